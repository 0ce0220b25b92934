// OpenBLAS picks its kernels by the CPU's family and model when the library loads. A CPU newer than the
// library (OpenBLAS 0.3.21 does not know Intel's model 207, Emerald Rapids, which the 2-core machines report)
// gets the generic Prescott kernels: SSE3 only, a third of the AVX-512 kernels' sgemm rate here. The choice can
// only be changed before the library loads (OPENBLAS_CORETYPE), so hzpbench restarts itself once with it set.
#pragma once

#include <string>

namespace hzp::harness {

/// The OPENBLAS_CORETYPE this process should have had: "SkylakeX" when OpenBLAS fell back to Prescott on a CPU
/// with AVX-512 (F, BW, VL), "Haswell" on one with AVX2 and FMA; empty when OpenBLAS chose a real core, the
/// variable is already set, or the CPU has neither.
std::string better_blas_core();

/// Called first thing in main, before MPI is initialised: when better_blas_core() names a core, sets
/// OPENBLAS_CORETYPE to it and replaces the process with the same program and arguments (execv of
/// /proc/self/exe); returns only when nothing needs changing or the exec failed (then the run goes on with the
/// generic kernels and the results file's threads.openblas_core says which). HZP_KEEP_BLAS_CORE=1 turns it off.
void restart_with_better_blas_core(char** argv);

/// A warning for the run's header when the environment's OPENBLAS_CORETYPE names a core without AVX-512 on a CPU
/// that has it (machine images pin one); empty otherwise. hzpbench keeps a core the user named either way.
std::string narrower_blas_core_note();

/// The core OpenBLAS runs with (openblas_get_corename), for the results file.
std::string blas_core_name();

}  // namespace hzp::harness
