// An enumeration key declared from its enum's name table (enum_names.hpp): the allowed values and the default's
// name come from the table, so the option, `hzpbench list` and the enum's to_string spell every name once.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "hzp/core/enum_names.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/options.hpp"

namespace hzp {

/// OptionSpec::enumeration(key, every name in table order, default_value's name, meaning). The default must be
/// in the table (PreconditionError: a programming error).
template <typename E, std::size_t N>
OptionSpec enum_option_spec(std::string key, const EnumName<E> (&table)[N], E default_value, std::string meaning) {
  HZP_CHECK(has_name(table, default_value), "option ", key, ": its default value has no name in the enum's table");
  std::string default_name(name_of(table, default_value));
  return OptionSpec::enumeration(std::move(key), names_of(table), std::move(default_name), std::move(meaning));
}

/// The value of enumeration key `key` in `config`. The parser accepted only the names the spec allows; a name
/// outside `table` means the spec was not built from it, a programming error (PreconditionError).
template <typename E, std::size_t N>
E enum_value(const ResolvedConfig& config, std::string_view key, const EnumName<E> (&table)[N]) {
  const std::string& name = config.get_string(key);
  const std::optional<E> v = value_of(table, name);
  HZP_CHECK(v.has_value(), key, " = ", name, " is not in its enum's name table");
  return *v;
}

}  // namespace hzp
