// The option table's declarations: value formatting, OptionSpec factories and range checks,
// OptionTable registration (with its refusal of ambiguous keys), presets and did-you-mean suggestions.
// Layering lives in options_resolve.cpp, the list/docs output in options_format.cpp.
#include "hzp/core/options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "hzp/core/error.hpp"
#include "hzp/core/json_text.hpp"
#include "options_internal.hpp"

namespace hzp {

const char* option_type_name(OptionType type) noexcept {
  switch (type) {
    case OptionType::boolean: return "bool";
    case OptionType::integer: return "int";
    case OptionType::real: return "float";
    case OptionType::string: return "string";
    case OptionType::enumeration: return "enum";
    case OptionType::int_list: return "int list";
    case OptionType::string_list: return "string list";
  }
  return "?";
}

const char* value_source_name(ValueSource source) noexcept {
  switch (source) {
    case ValueSource::default_value: return "default";
    case ValueSource::preset: return "preset";
    case ValueSource::file: return "file";
    case ValueSource::set: return "set";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------------
// Formatting values
// ---------------------------------------------------------------------------------------------------

namespace detail {

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // Shortest text that reads back to the same double, so a dumped config reproduces the run exactly.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, end);
  // TOML needs a '.' or an exponent to read a float back as a float.
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string escapes exactly as a JSON string does (DEL included, which json_escape also escapes).
std::string toml_quote(std::string_view s) { return json_quote(s); }

}  // namespace detail

std::string format_option_value(const OptionValue& value, bool toml_literal) {
  auto str = [&](const std::string& s) {
    // An empty string typed after `--set key=` is invisible; show it quoted either way.
    return (toml_literal || s.empty()) ? detail::toml_quote(s) : s;
  };
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return detail::format_double(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return str(v);
        } else {
          std::string s = toml_literal ? "[" : "";
          for (std::size_t i = 0; i < v.size(); ++i) {
            if (i) s += toml_literal ? ", " : ",";
            if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
              s += std::to_string(v[i]);
            } else {
              s += toml_literal ? detail::toml_quote(v[i]) : v[i];
            }
          }
          if (toml_literal) s += "]";
          if (!toml_literal && v.empty()) s = "[]";
          return s;
        }
      },
      value);
}

// ---------------------------------------------------------------------------------------------------
// OptionSpec
// ---------------------------------------------------------------------------------------------------

namespace {

OptionSpec make_spec(std::string key, OptionType type, OptionValue def, std::string meaning) {
  OptionSpec s;
  s.key = std::move(key);
  s.type = type;
  s.default_value = std::move(def);
  s.meaning = std::move(meaning);
  return s;
}

bool is_numeric(OptionType t) {
  return t == OptionType::integer || t == OptionType::real || t == OptionType::int_list;
}

std::string bound_number(double v) {
  // Whole bounds read as whole numbers ("> 0", not "> 0.0"), for float keys too.
  if (std::trunc(v) == v && std::fabs(v) < 9.2e18)
    return std::to_string(static_cast<std::int64_t>(v));
  return detail::format_double(v);
}

bool key_component_ok(std::string_view c) {
  if (c.empty()) return false;
  return std::all_of(c.begin(), c.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
  });
}

bool valid_key(std::string_view key) {
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    if (!key_component_ok(key.substr(start, dot == std::string_view::npos ? dot : dot - start)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// a is a proper prefix of b at a component boundary: "links.intra" and "links.intra.latency_us".
bool is_component_prefix(std::string_view a, std::string_view b) {
  return b.size() > a.size() && b.substr(0, a.size()) == a && b[a.size()] == '.';
}

}  // namespace

OptionSpec OptionSpec::boolean(std::string key, bool def, std::string meaning) {
  return make_spec(std::move(key), OptionType::boolean, def, std::move(meaning));
}
OptionSpec OptionSpec::integer(std::string key, std::int64_t def, std::string meaning) {
  return make_spec(std::move(key), OptionType::integer, def, std::move(meaning));
}
OptionSpec OptionSpec::real(std::string key, double def, std::string meaning) {
  return make_spec(std::move(key), OptionType::real, def, std::move(meaning));
}
OptionSpec OptionSpec::string(std::string key, std::string def, std::string meaning) {
  return make_spec(std::move(key), OptionType::string, std::move(def), std::move(meaning));
}
OptionSpec OptionSpec::enumeration(std::string key, std::vector<std::string> allowed, std::string def,
                                   std::string meaning) {
  OptionSpec s = make_spec(std::move(key), OptionType::enumeration, std::move(def), std::move(meaning));
  s.allowed = std::move(allowed);
  return s;
}
OptionSpec OptionSpec::int_list(std::string key, std::vector<std::int64_t> def, std::string meaning) {
  return make_spec(std::move(key), OptionType::int_list, std::move(def), std::move(meaning));
}
OptionSpec OptionSpec::string_list(std::string key, std::vector<std::string> def, std::string meaning) {
  return make_spec(std::move(key), OptionType::string_list, std::move(def), std::move(meaning));
}

OptionSpec& OptionSpec::at_least(double v) {
  lower = NumberBound{v, true};
  return *this;
}
OptionSpec& OptionSpec::above(double v) {
  lower = NumberBound{v, false};
  return *this;
}
OptionSpec& OptionSpec::at_most(double v) {
  upper = NumberBound{v, true};
  return *this;
}
OptionSpec& OptionSpec::below(double v) {
  upper = NumberBound{v, false};
  return *this;
}
OptionSpec& OptionSpec::with_unit(std::string u) {
  unit = std::move(u);
  return *this;
}
OptionSpec& OptionSpec::hide() {
  hidden = true;
  return *this;
}

std::string OptionSpec::expected_text() const {
  std::string s;
  switch (type) {
    case OptionType::boolean: return "true or false";
    case OptionType::integer: s = "an integer"; break;
    case OptionType::real: s = "a finite number"; break;
    case OptionType::string: return "a string";
    case OptionType::enumeration: {
      s = "one of: ";
      for (std::size_t i = 0; i < allowed.size(); ++i) s += (i ? ", " : "") + allowed[i];
      return s;
    }
    case OptionType::int_list: s = "a list of integers"; break;
    case OptionType::string_list: return "a list of strings";
  }
  if (const std::string r = range_text(); !r.empty())
    s += type == OptionType::int_list ? " (each " + r + ")" : " " + r;
  return s;
}

std::string OptionSpec::range_text() const {
  if (type == OptionType::enumeration) {
    std::string s;
    for (std::size_t i = 0; i < allowed.size(); ++i) s += (i ? " | " : "") + allowed[i];
    return s;
  }
  if (!is_numeric(type)) return "";
  if (lower && upper) {
    return std::string(lower->inclusive ? "[" : "(") + bound_number(lower->value) + ", " +
           bound_number(upper->value) + (upper->inclusive ? "]" : ")");
  }
  if (lower) return std::string(lower->inclusive ? ">= " : "> ") + bound_number(lower->value);
  if (upper) return std::string(upper->inclusive ? "<= " : "< ") + bound_number(upper->value);
  return "";
}

std::optional<std::string> OptionSpec::violation(const OptionValue& value) const {
  auto check_number = [&](double v) -> bool {
    // NaN fails every comparison, so a ranged key refuses it.
    if (lower && !(lower->inclusive ? v >= lower->value : v > lower->value)) return false;
    if (upper && !(upper->inclusive ? v <= upper->value : v < upper->value)) return false;
    return true;
  };
  switch (type) {
    case OptionType::integer:
      if (!check_number(static_cast<double>(std::get<std::int64_t>(value))))
        return "out of range: must be " + range_text();
      return std::nullopt;
    case OptionType::real:
      // inf passes a one-sided range and an unranged key takes nan; no key means either (a deadline or a rate of
      // inf overflows the clocks and sizes computed from it), so every float must be finite.
      if (!std::isfinite(std::get<double>(value))) return std::string("not a finite number");
      if (!check_number(std::get<double>(value))) return "out of range: must be " + range_text();
      return std::nullopt;
    case OptionType::int_list:
      for (std::int64_t v : std::get<std::vector<std::int64_t>>(value)) {
        if (!check_number(static_cast<double>(v)))
          return "element " + std::to_string(v) + " is out of range: each must be " + range_text();
      }
      return std::nullopt;
    case OptionType::enumeration: {
      const auto& s = std::get<std::string>(value);
      if (std::find(allowed.begin(), allowed.end(), s) == allowed.end())
        return "not an allowed value: use one of " + detail::join(allowed, ", ");
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

namespace detail {

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string s;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) s += sep;
    s += parts[i];
  }
  return s;
}

bool holds_type(OptionType type, const OptionValue& v) {
  switch (type) {
    case OptionType::boolean: return std::holds_alternative<bool>(v);
    case OptionType::integer: return std::holds_alternative<std::int64_t>(v);
    case OptionType::real: return std::holds_alternative<double>(v);
    case OptionType::string:
    case OptionType::enumeration: return std::holds_alternative<std::string>(v);
    case OptionType::int_list: return std::holds_alternative<std::vector<std::int64_t>>(v);
    case OptionType::string_list: return std::holds_alternative<std::vector<std::string>>(v);
  }
  return false;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------------
// OptionTable
// ---------------------------------------------------------------------------------------------------

OptionTable::OptionTable(std::string list_hint) : list_hint_(std::move(list_hint)) {}

const OptionSpec& OptionTable::add(OptionSpec spec) {
  const std::string& key = spec.key;
  HZP_CHECK(valid_key(key), "option key '", key,
            "' is malformed: use dot-separated snake_case components such as 'topology.ranks_per_node'");
  HZP_CHECK(!specs_.contains(key), "option key '", key, "' is registered twice");
  for (const auto& [other, unused] : specs_) {
    HZP_CHECK(!is_component_prefix(other, key) && !is_component_prefix(key, other), "option key '", key,
              "' clashes with '", other, "': a key cannot also be a section holding other keys");
  }
  HZP_CHECK(!spec.meaning.empty(), "option key '", key, "' needs a one-line meaning");
  HZP_CHECK(detail::holds_type(spec.type, spec.default_value), "option key '", key,
            "': the default's type is not ", option_type_name(spec.type));
  HZP_CHECK(is_numeric(spec.type) || (!spec.lower && !spec.upper), "option key '", key,
            "': only numeric keys take a range");
  if (spec.type == OptionType::enumeration) {
    HZP_CHECK(!spec.allowed.empty(), "enumeration key '", key, "' has no allowed values");
    for (std::size_t i = 0; i < spec.allowed.size(); ++i) {
      HZP_CHECK(std::count(spec.allowed.begin(), spec.allowed.end(), spec.allowed[i]) == 1,
                "enumeration key '", key, "' lists '", spec.allowed[i], "' twice");
    }
  } else {
    HZP_CHECK(spec.allowed.empty(), "option key '", key, "': only enumerations take allowed values");
  }
  if (auto why = spec.violation(spec.default_value)) {
    HZP_THROW(PreconditionError, "option key '", key, "': default ",
              format_option_value(spec.default_value), " is ", *why);
  }
  auto [it, inserted] = specs_.emplace(key, std::move(spec));
  return it->second;
}

void OptionTable::add_preset(std::string_view preset_key, std::string name,
                             std::vector<std::pair<std::string, OptionValue>> values, std::string meaning) {
  auto it = specs_.find(preset_key);
  HZP_CHECK(it != specs_.end(), "preset '", name, "': preset key '", preset_key, "' is not registered");
  OptionSpec& pk = it->second;
  HZP_CHECK(pk.type == OptionType::enumeration, "preset key '", preset_key,
            "' must be an enumeration (its values name the presets)");
  HZP_CHECK(!name.empty() && !presets_[std::string(preset_key)].contains(name), "preset '", name,
            "' of '", preset_key, "' is empty or registered twice");

  Preset p;
  p.preset_key = std::string(preset_key);
  p.name = name;
  p.meaning = std::move(meaning);
  for (auto& [key, value] : values) {
    const OptionSpec* spec = find(key);
    HZP_CHECK(spec != nullptr, "preset ", preset_key, "=", name, " sets unknown key '", key, "'");
    HZP_CHECK(key != preset_key && !presets_.contains(key), "preset ", preset_key, "=", name,
              " sets the preset key '", key, "': presets do not chain");
    // Written in C++ as `{"train.lr", 1}`, an integer literal should still serve a float key.
    if (spec->type == OptionType::real && std::holds_alternative<std::int64_t>(value))
      value = static_cast<double>(std::get<std::int64_t>(value));
    HZP_CHECK(detail::holds_type(spec->type, value), "preset ", preset_key, "=", name, " gives '", key,
              "' a value that is not ", option_type_name(spec->type));
    if (auto why = spec->violation(value)) {
      HZP_THROW(PreconditionError, "preset ", preset_key, "=", name, " gives '", key, "' the value ",
                format_option_value(value), ", which is ", *why);
    }
    HZP_CHECK(!p.values.contains(key), "preset ", preset_key, "=", name, " sets '", key, "' twice");
    p.values.emplace(key, std::move(value));
  }
  // A preset key that is itself the target of some other preset would make the order ambiguous.
  for (const auto& [k, byname] : presets_) {
    for (const auto& [n, other] : byname) {
      HZP_CHECK(!other.values.contains(preset_key), "preset ", k, "=", n, " sets '", preset_key,
                "', which is now a preset key: presets do not chain");
    }
  }
  if (std::find(pk.allowed.begin(), pk.allowed.end(), name) == pk.allowed.end()) pk.allowed.push_back(name);
  presets_[std::string(preset_key)].emplace(name, std::move(p));
}

const OptionSpec* OptionTable::find(std::string_view key) const noexcept {
  auto it = specs_.find(key);
  return it == specs_.end() ? nullptr : &it->second;
}

const Preset* OptionTable::find_preset(std::string_view preset_key, std::string_view name) const noexcept {
  auto it = presets_.find(preset_key);
  if (it == presets_.end()) return nullptr;
  auto jt = it->second.find(name);
  return jt == it->second.end() ? nullptr : &jt->second;
}

std::vector<const Preset*> OptionTable::presets() const {
  std::vector<const Preset*> out;
  for (const auto& [key, byname] : presets_) {
    for (const auto& [name, p] : byname) out.push_back(&p);
  }
  return out;
}

bool OptionTable::is_preset_key(std::string_view key) const noexcept { return presets_.contains(key); }

// ---------------------------------------------------------------------------------------------------
// Did you mean
// ---------------------------------------------------------------------------------------------------

std::size_t levenshtein_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::vector<std::string> OptionTable::suggestions(std::string_view typed, std::size_t max_count) const {
  // Keys are lower-case; compare "Topology.World_Size" as if typed in lower case.
  std::string lowered(typed);
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string_view key = lowered;
  auto last = [](std::string_view k) {
    const auto dot = k.rfind('.');
    return dot == std::string_view::npos ? k : k.substr(dot + 1);
  };
  // A typo of a few characters, or the right name under the wrong (or no) section. The thresholds
  // grow with length so that short keys do not match everything.
  const std::size_t full_limit = std::max<std::size_t>(2, key.size() / 4);
  const std::string_view key_last = last(key);
  const std::size_t last_limit = std::max<std::size_t>(1, key_last.size() / 5);
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const auto& [name, spec] : specs_) {
    const std::size_t full = levenshtein_distance(key, name);
    const std::size_t tail = levenshtein_distance(key_last, last(name));
    std::size_t score = SIZE_MAX;
    if (full <= full_limit) score = full;
    // A matching last component costs one more than an exact full match, so a typo in the section
    // still ranks after a genuine near-miss of the whole key.
    if (tail <= last_limit) score = std::min(score, tail + 1);
    if (score != SIZE_MAX) scored.emplace_back(score, name);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (std::size_t i = 0; i < scored.size() && i < max_count; ++i) out.push_back(scored[i].second);
  return out;
}

}  // namespace hzp
