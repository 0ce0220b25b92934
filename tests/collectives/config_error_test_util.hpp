// expect_config_error, shared by the topology and rank-mesh tests (test_topology.cpp, test_mesh.cpp): both check
// that a bad layout is refused with a ConfigError whose message names every number involved.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "hzp/core/error.hpp"

namespace hzp::test {

/// Runs fn, expects ConfigError whose message (without its location context) contains every piece.
template <typename Fn>
void expect_config_error(Fn&& fn, std::initializer_list<std::string> pieces) {
  try {
    fn();
    FAIL() << "no ConfigError thrown";
  } catch (const ConfigError& e) {
    for (const auto& p : pieces)
      EXPECT_NE(e.message().find(p), std::string::npos) << "missing '" << p << "' in: " << e.message();
  }
}

}  // namespace hzp::test
