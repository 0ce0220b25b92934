// A gtest assertion that a call throws a given error type whose message holds given fragments, shared by the
// kernel tests (kernel_test_util.hpp) and the data-source and model tests (data_test_util.hpp): the
// project's "bad input gets one clear error naming the key, the value and the fix" is checked through it.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>

#include "hzp/core/error.hpp"

namespace hzp::test {

/// Passes when `f()` throws E (default hzp::Error) whose what() contains every fragment; on failure
/// reports the message it got. Use for "bad shapes are rejected with a message naming the dims".
template <typename E = ::hzp::Error, typename F>
::testing::AssertionResult throws_with(F&& f, std::initializer_list<std::string_view> fragments) {
  try {
    f();
  } catch (const E& e) {
    const std::string what = e.what();
    for (std::string_view frag : fragments)
      if (what.find(frag) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << frag << "\": " << what;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a different exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace hzp::test
