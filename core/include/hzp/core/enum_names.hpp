// One table of {name, value} pairs per configuration enum, declared beside the enum by the layer that owns it, and
// the lookups both directions read it through: the names the option parser accepts, `hzpbench list` shows, error
// messages quote and results attributes record then cannot drift apart (they did when a to_string switch and
// an option's allowed list spelled each name twice). enum_option.hpp builds an option declaration from a table.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hzp {

/// One spelling. Names are string literals, so name_of(...).data() is a NUL-terminated C string.
template <typename E>
struct EnumName {
  std::string_view name;
  E value;
};

/// `value`'s name, or "?" for a value the table does not list (a corrupted or out-of-range enum).
template <typename E, std::size_t N>
constexpr std::string_view name_of(const EnumName<E> (&table)[N], E value) noexcept {
  for (const EnumName<E>& e : table)
    if (e.value == value) return e.name;
  return "?";
}

/// Whether the table lists `value` (false: a corrupted or out-of-range enum).
template <typename E, std::size_t N>
constexpr bool has_name(const EnumName<E> (&table)[N], E value) noexcept {
  for (const EnumName<E>& e : table)
    if (e.value == value) return true;
  return false;
}

/// The value spelled `name`, or nullopt.
template <typename E, std::size_t N>
constexpr std::optional<E> value_of(const EnumName<E> (&table)[N], std::string_view name) noexcept {
  for (const EnumName<E>& e : table)
    if (e.name == name) return e.value;
  return std::nullopt;
}

/// Every name in table order (an option's allowed values).
template <typename E, std::size_t N>
std::vector<std::string> names_of(const EnumName<E> (&table)[N]) {
  std::vector<std::string> names;
  for (const EnumName<E>& e : table) names.emplace_back(e.name);
  return names;
}

/// "a, b, c": the choices as error messages list them.
template <typename E, std::size_t N>
std::string names_text(const EnumName<E> (&table)[N]) {
  std::string text;
  for (const EnumName<E>& e : table) (text += text.empty() ? "" : ", ") += e.name;
  return text;
}

}  // namespace hzp
