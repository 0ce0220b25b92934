// Strings for the JSON the program writes by hand (plan --json, inspect --json, the trace) and the TOML of
// resolved configurations (whose basic strings escape the same way): one escaper for every writer.
#pragma once

#include <string>
#include <string_view>

namespace hzp {

/// `s` with ", \, control characters and DEL escaped (no surrounding quotes): valid in JSON and TOML strings.
std::string json_escape(std::string_view s);
/// json_escape(s) in double quotes: a JSON string.
std::string json_quote(std::string_view s);

}  // namespace hzp
