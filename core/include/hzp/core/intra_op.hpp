// Intra-operation parallelism on the CPU: one process-wide pool of worker threads that splits a kernel's
// independent items (rows, elements, heads, GEMM column blocks) into contiguous ranges. Every item is computed by
// exactly one range with the same arithmetic as a single-threaded loop, so results are bitwise the same for any
// thread count; reductions stay inside one item. The pool starts with one thread (everything inline); the harness
// sizes it to the rank's cores, and OpenBLAS then runs single-threaded inside each range, so one set of threads
// serves both the GEMMs and the element-wise kernels instead of OpenBLAS's pool spinning beside ours.
#pragma once

#include <cstdint>
#include <functional>

namespace hzp::core {

/// Sets the number of threads parallel_for uses, the caller included (n >= 1; 1 = run everything inline).
/// Workers beyond the first are started or stopped here; not to be called while a parallel_for runs.
void set_intra_op_threads(int n);

/// The current thread count (1 until set_intra_op_threads is called).
int intra_op_threads();

/// Runs fn(begin, end) over [0, n) split into at most intra_op_threads() contiguous ranges of at least `grain`
/// items each (the calling thread takes the first range) and returns when all are done. Runs inline, as one
/// range, when the pool has one thread, when n < 2·grain, when called from inside a parallel_for, or when another
/// thread is using the pool (a background communication thread's kernels never wait for the compute thread's).
/// An exception thrown by fn on any thread is rethrown here after every range has finished.
void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& fn);

/// The most ranges a parallel_for over n items of this grain uses now: min(threads, n / grain), at least 1. A
/// kernel that needs scratch per range sizes it by this and indexes it by parallel_for_ranges' range number.
int intra_op_ranges(std::int64_t n, std::int64_t grain);

/// parallel_for, also passing each range's number (0 for the caller's; always < intra_op_ranges(n, grain)).
void parallel_for_ranges(std::int64_t n, std::int64_t grain,
                         const std::function<void(int, std::int64_t, std::int64_t)>& fn);

}  // namespace hzp::core
