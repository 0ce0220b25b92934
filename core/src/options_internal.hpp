// Helpers shared by the option-table sources (options.cpp, options_resolve.cpp, options_format.cpp);
// private to hzp_core.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hzp/core/options.hpp"

namespace hzp::detail {

/// Shortest round-trip text of a double, always readable back as a TOML float ("50.0", "0.004", "inf").
std::string format_double(double v);
/// A TOML basic string literal with escapes.
std::string toml_quote(std::string_view s);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
/// Whether `v` holds the alternative that values of `type` use.
bool holds_type(OptionType type, const OptionValue& v);

}  // namespace hzp::detail
