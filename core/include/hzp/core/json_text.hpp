// Strings for the JSON the program writes by hand (plan --json, inspect --json, the trace): one escaper, so
// every writer quotes the same way.
#pragma once

#include <string>
#include <string_view>

namespace hzp {

/// `s` with ", \ and control characters escaped as JSON requires (no surrounding quotes).
std::string json_escape(std::string_view s);
/// json_escape(s) in double quotes: a JSON string.
std::string json_quote(std::string_view s);

}  // namespace hzp
