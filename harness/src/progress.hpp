// The per-step progress line rank 0 prints (step, loss, tokens/s, MFU, exposed communication, memory,
// step time), printed by the results thread once the step's row is in the file, so a printed step is
// always one the file holds (up to the next flush).
#pragma once

#include <cstdint>
#include <string>

#include "summary.hpp"

namespace hzp::harness {

/// Steps are counted from 1 here (step index + 1: the number of steps completed).
/// "step    12/300  loss 3.1234  tok/s 8.41e+04  MFU 12.3%  comm 0.0%  mem 3.1 MiB  12.2 ms", with
/// " skipped (non-finite loss)" or " loss spike" appended when they apply.
std::string format_progress(const StepRecord& record, std::int64_t total_steps);

}  // namespace hzp::harness
