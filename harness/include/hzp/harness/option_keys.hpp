// The project's option table: every configuration key hzpbench accepts, registered in one place
// (harness/src/option_keys.cpp), from which parsing, `hzpbench list`, docs/options.md and the resolved
// config dump are all derived, so none of them can drift from the others.
#pragma once

#include "hzp/core/options.hpp"

namespace hzp::harness {

/// Every key hzpbench accepts. Built once, on first use (thread-safe), and read-only afterwards.
const OptionTable& hzpbench_options();

}  // namespace hzp::harness
