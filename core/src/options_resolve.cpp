// Layering a configuration: TOML files (toml++) and `--set key=value` texts parsed by each key's type,
// presets applied above defaults, and the typed getters of the result. Every user mistake becomes one
// ConfigError naming the key, the value, where it came from (file:line:column or --set) and the fix.
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "hzp/core/error.hpp"
#include "hzp/core/options.hpp"
#include "options_internal.hpp"

namespace hzp {
namespace {

// Where a value was written, for messages and for the origin the dump prints.
struct Where {
  ValueSource source;
  std::string text;  // "run.toml:3:15" or "--set topology.world_size=2.5"
  std::string origin_text() const { return source == ValueSource::set ? "--set" : text; }
};

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// How the user would write the default at that place: the fix's example.
std::string example(const OptionSpec& spec, ValueSource source) {
  if (source == ValueSource::set) return "--set " + spec.key + "=" + format_option_value(spec.default_value);
  return spec.key + " = " + format_option_value(spec.default_value, true);
}

std::string unit_note(const OptionSpec& spec) { return spec.unit.empty() ? "" : " (" + spec.unit + ")"; }

[[noreturn]] void unknown_key(const OptionTable& table, std::string_view key, const Where& w) {
  std::string msg = w.text + ": unknown key '" + std::string(key) + "'.";
  const auto near = table.suggestions(key);
  if (!near.empty()) {
    msg += " Did you mean ";
    for (std::size_t i = 0; i < near.size(); ++i) {
      if (i) msg += i + 1 == near.size() ? " or " : ", ";
      msg += "'" + near[i] + "'";
    }
    msg += "?";
  }
  msg += " Fix: correct the key's name or remove it";
  if (!table.list_hint().empty()) msg += " (" + table.list_hint() + ")";
  msg += ".";
  HZP_THROW(ConfigError, msg);
}

[[noreturn]] void wrong_type(const OptionSpec& spec, const std::string& shown, const std::string& problem,
                             const Where& w, const std::string& fix = {}) {
  // A --set's location already shows key=value; a file's shows only where, so name them there.
  const std::string what = w.source == ValueSource::set ? "" : spec.key + " = " + shown + ": ";
  HZP_THROW(ConfigError, w.text, ": ", what, problem, "; ", spec.key, " takes ",
            spec.expected_text(), unit_note(spec), ". Fix: ",
            fix.empty() ? "write e.g. " + example(spec, w.source) + " (the default)" : fix, ".");
}

// Range and allowed-value checks shared by files and --set.
void check_value(const OptionSpec& spec, const OptionValue& value, const std::string& shown, const Where& w) {
  if (!spec.violation(value)) return;
  if (spec.type == OptionType::enumeration) {
    const auto& name = std::get<std::string>(value);
    std::string near;
    std::size_t best = SIZE_MAX;
    for (const auto& a : spec.allowed) {
      // A swapped pair of letters costs 2; allow that except for very short names.
      const std::size_t limit = a.size() <= 3 ? 1 : std::max<std::size_t>(2, a.size() / 3);
      const std::size_t d = levenshtein_distance(name, a);
      if (d <= limit && d < best) {
        best = d;
        near = " (did you mean '" + a + "'?)";
      }
    }
    HZP_THROW(ConfigError, w.text, ": ", spec.key, " = ", shown, " is not an allowed value", near,
              ". Fix: use one of ", detail::join(spec.allowed, ", "), ".");
  }
  HZP_THROW(ConfigError, w.text, ": ", spec.key, " = ", shown, " is ", *spec.violation(value),
            unit_note(spec), ". Fix: give ", spec.expected_text(), ", e.g. ", example(spec, w.source),
            " (the default).");
}

// ---------------------------------------------------------------------------------------------------
// --set text -> value
// ---------------------------------------------------------------------------------------------------

// TOML's digit separators: an underscore only between two digits.
std::optional<std::string> strip_underscores(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      const bool ok = i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                      std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!ok) return std::nullopt;
      continue;
    }
    out += s[i];
  }
  return out;
}

enum class IntParse { ok, not_integer, overflow };

IntParse parse_int(std::string_view text, std::int64_t& out) {
  auto cleaned = strip_underscores(text);
  if (!cleaned || cleaned->empty()) return IntParse::not_integer;
  std::string_view s = *cleaned;
  if (s[0] == '+') s.remove_prefix(1);
  // from_chars accepts only digits after an optional '-': "1e3", "2.5", "0x10" stop early.
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (s.empty() || end != s.data() + s.size()) return IntParse::not_integer;
  if (ec == std::errc::result_out_of_range) return IntParse::overflow;
  if (ec != std::errc()) return IntParse::not_integer;
  return IntParse::ok;
}

bool parse_double(std::string_view text, double& out) {
  auto cleaned = strip_underscores(text);
  if (!cleaned || cleaned->empty()) return false;
  std::string_view s = *cleaned;
  if (s[0] == '+') s.remove_prefix(1);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, std::chars_format::general);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// A string value with or without quotes: "a\tb" (TOML escapes), 'a\b' (literal) or a\b (as typed).
bool parse_string(std::string_view text, std::string& out) {
  if (text.size() >= 2 && text.front() == '\'' && text.back() == '\'') {
    out = std::string(text.substr(1, text.size() - 2));
    return true;
  }
  if (!text.empty() && text.front() == '"') {
    try {
      toml::table t = toml::parse("v = " + std::string(text));
      if (auto s = t["v"].value<std::string>()) {
        out = *s;
        return true;
      }
    } catch (const toml::parse_error&) {
    }
    return false;
  }
  out = std::string(text);
  return true;
}

std::optional<OptionValue> value_from_node(const OptionSpec& spec, const toml::node& node, std::string& problem);

OptionValue parse_set_value(const OptionSpec& spec, std::string_view text, const Where& w) {
  const std::string shown(text);
  switch (spec.type) {
    case OptionType::boolean:
      if (text == "true") return true;
      if (text == "false") return false;
      wrong_type(spec, shown, "'" + shown + "' is not a boolean", w,
                 "write --set " + spec.key + "=true or --set " + spec.key + "=false");
    case OptionType::integer: {
      std::int64_t v = 0;
      switch (parse_int(text, v)) {
        case IntParse::ok: return v;
        case IntParse::overflow: wrong_type(spec, shown, "'" + shown + "' does not fit in 64 bits", w);
        case IntParse::not_integer: {
          double d = 0;
          // Refuse 1e3 and 4.0 too (a float where an integer is meant is usually a mistake), but
          // say what the whole number would be.
          if (parse_double(text, d) && std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9e18) {
            wrong_type(spec, shown, "'" + shown + "' is written as a float", w,
                       "write it as a whole number: --set " + spec.key + "=" +
                           std::to_string(static_cast<std::int64_t>(d)));
          }
          wrong_type(spec, shown, "'" + shown + "' is not an integer", w,
                     "give a whole number, e.g. " + example(spec, w.source) + " (the default)");
        }
      }
      break;
    }
    case OptionType::real: {
      double d = 0;
      if (parse_double(text, d)) return d;
      wrong_type(spec, shown, "'" + shown + "' is not a number", w);
    }
    case OptionType::string:
    case OptionType::enumeration: {
      std::string s;
      if (parse_string(text, s)) return s;
      wrong_type(spec, shown, "the quoted string is not closed or has a bad escape", w);
    }
    case OptionType::int_list:
    case OptionType::string_list: {
      if (!text.empty() && text.front() == '[') {
        // The TOML array syntax, parsed by the TOML reader so files and --set agree.
        std::string problem = "not a valid TOML array";
        try {
          toml::table t = toml::parse("v = " + shown);
          if (auto v = value_from_node(spec, *t.get("v"), problem)) return *v;
        } catch (const toml::parse_error&) {
        }
        wrong_type(spec, shown, problem, w);
      }
      std::vector<std::string> parts;
      if (!text.empty()) {
        std::size_t start = 0;
        while (true) {
          const auto comma = text.find(',', start);
          parts.emplace_back(trim(text.substr(start, comma == std::string_view::npos ? comma : comma - start)));
          if (comma == std::string_view::npos) break;
          start = comma + 1;
        }
      }
      if (spec.type == OptionType::int_list) {
        std::vector<std::int64_t> out;
        for (const auto& p : parts) {
          std::int64_t v = 0;
          if (parse_int(p, v) != IntParse::ok)
            wrong_type(spec, shown, "element '" + p + "' is not an integer", w,
                       "write integers separated by commas, e.g. --set " + spec.key + "=1,2,4");
          out.push_back(v);
        }
        return out;
      }
      std::vector<std::string> out;
      for (const auto& p : parts) {
        std::string s;
        if (!parse_string(p, s)) wrong_type(spec, shown, "element " + p + " is not a valid string", w);
        out.push_back(std::move(s));
      }
      return out;
    }
  }
  HZP_THROW(PreconditionError, "unhandled option type");
}

// ---------------------------------------------------------------------------------------------------
// TOML node -> value
// ---------------------------------------------------------------------------------------------------

std::string describe_node(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

std::string node_text(const toml::node& node) {
  if (node.is_table()) return "{...}";
  std::ostringstream os;
  node.visit([&](const auto& n) { os << n; });
  return os.str();
}

std::optional<OptionValue> value_from_node(const OptionSpec& spec, const toml::node& node,
                                           std::string& problem) {
  problem = "got " + describe_node(node);
  switch (spec.type) {
    case OptionType::boolean:
      if (auto v = node.as_boolean()) return v->get();
      return std::nullopt;
    case OptionType::integer:
      if (auto v = node.as_integer()) return v->get();
      return std::nullopt;
    case OptionType::real:
      if (auto v = node.as_floating_point()) return v->get();
      // `backoff_max_us = 50` means 50.0; only the reverse (a float for an integer) is refused.
      if (auto v = node.as_integer()) return static_cast<double>(v->get());
      return std::nullopt;
    case OptionType::string:
    case OptionType::enumeration:
      if (auto v = node.as_string()) return v->get();
      return std::nullopt;
    case OptionType::int_list:
    case OptionType::string_list: {
      const toml::array* arr = node.as_array();
      if (!arr) return std::nullopt;
      std::vector<std::int64_t> ints;
      std::vector<std::string> strs;
      for (const toml::node& e : *arr) {
        if (spec.type == OptionType::int_list) {
          auto v = e.as_integer();
          if (!v) {
            problem = "got an array holding " + describe_node(e);
            return std::nullopt;
          }
          ints.push_back(v->get());
        } else {
          auto v = e.as_string();
          if (!v) {
            problem = "got an array holding " + describe_node(e);
            return std::nullopt;
          }
          strs.push_back(v->get());
        }
      }
      if (spec.type == OptionType::int_list) return ints;
      return strs;
    }
  }
  return std::nullopt;
}

// " (`<line>`)": line `line` (counted from 1) of `text`, trimmed and cut to 120 characters; "" when there is none.
std::string quoted_line(std::string_view text, std::size_t line) {
  for (std::size_t i = 1; i < line && !text.empty(); ++i) {
    const auto nl = text.find('\n');
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
  }
  std::string_view l = trim(text.substr(0, text.find('\n')));
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  if (l.empty()) return {};
  return " (`" + std::string(l.substr(0, 120)) + (l.size() > 120 ? "..." : "") + "`)";
}

std::string located(const std::string& source_name, const toml::source_region& r) {
  if (r.begin.line == 0) return source_name;
  return source_name + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

bool has_keys_under(const OptionTable& table, const std::string& prefix) {
  const std::string p = prefix + ".";
  auto it = table.specs().lower_bound(p);
  return it != table.specs().end() && it->first.compare(0, p.size(), p) == 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// ConfigResolver
// ---------------------------------------------------------------------------------------------------

ConfigResolver& ConfigResolver::add_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    HZP_THROW(ConfigError, "config file '", path,
              "' does not exist. Fix: check the path (relative paths start in the current directory, ",
              fs::current_path(ec).string(), ").");
  }
  if (!fs::is_regular_file(path, ec))
    HZP_THROW(ConfigError, "config file '", path, "' is not a regular file. Fix: give the path of a TOML file.");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof())
    HZP_THROW(ConfigError, "config file '", path, "' cannot be read. Fix: check its permissions.");
  parse_toml(text.str(), path);
  return *this;
}

ConfigResolver& ConfigResolver::add_toml_text(std::string_view text, const std::string& source_name) {
  parse_toml(text, source_name);
  return *this;
}

void ConfigResolver::parse_toml(std::string_view text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    // The parser's description names the token, not always the key (an integer beyond 64 bits): quoting the
    // line names both.
    HZP_THROW(ConfigError, source_name, ":", b.line, ":", b.column, ": malformed TOML at line ", b.line,
              ", column ", b.column, quoted_line(text, b.line), ": ", e.description(), ". Fix: correct the syntax there.");
  }

  // Flatten nested tables to dotted keys, then check in file order (toml++ keeps tables sorted by
  // key), so that the error reported is the first one the user reads in the file.
  struct Leaf {
    std::string key;
    const toml::node* node;
    toml::source_region key_region;
    bool unknown;
  };
  std::vector<Leaf> leaves;
  auto walk = [&](auto&& self, const toml::table& t, const std::string& prefix) -> void {
    for (const auto& [k, node] : t) {
      const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      if (table_->contains(key)) {
        leaves.push_back({key, &node, k.source(), false});
      } else if (const toml::table* sub = node.as_table(); sub && (has_keys_under(*table_, key) || !sub->empty())) {
        // An unknown section still recurses, so its keys get their own did-you-mean.
        self(self, *sub, key);
      } else {
        leaves.push_back({key, &node, k.source(), true});
      }
    }
  };
  walk(walk, root, "");
  std::stable_sort(leaves.begin(), leaves.end(), [](const Leaf& a, const Leaf& b) {
    return std::pair(a.key_region.begin.line, a.key_region.begin.column) <
           std::pair(b.key_region.begin.line, b.key_region.begin.column);
  });

  for (const Leaf& leaf : leaves) {
    if (leaf.unknown) unknown_key(*table_, leaf.key, {ValueSource::file, located(source_name, leaf.key_region)});
    const OptionSpec& spec = *table_->find(leaf.key);
    const Where w{ValueSource::file, located(source_name, leaf.node->source())};
    std::string problem;
    auto value = value_from_node(spec, *leaf.node, problem);
    const std::string shown = node_text(*leaf.node);
    if (!value) wrong_type(spec, shown, problem, w);
    check_value(spec, *value, shown, w);
    file_layer_.push_back({leaf.key, std::move(*value), {ValueSource::file, w.origin_text()}});
  }
}

ConfigResolver& ConfigResolver::add_set(std::string_view assignment) {
  const std::string shown(assignment);
  const auto eq = assignment.find('=');
  const std::string_view key = trim(assignment.substr(0, eq));
  if (eq == std::string_view::npos || key.empty()) {
    HZP_THROW(ConfigError, "--set ", shown,
              ": expected key=value. Fix: name a key and its value, e.g. --set topology.ranks_per_node=4",
              table_->list_hint().empty() ? "" : " (" + table_->list_hint() + ")", ".");
  }
  const Where w{ValueSource::set, "--set " + shown};
  const OptionSpec* spec = table_->find(key);
  if (!spec) unknown_key(*table_, key, w);
  const std::string_view text = trim(assignment.substr(eq + 1));
  OptionValue value = parse_set_value(*spec, text, w);
  check_value(*spec, value, std::string(text), w);
  set_layer_.push_back({spec->key, std::move(value), {ValueSource::set, w.origin_text()}});
  return *this;
}

ResolvedConfig ConfigResolver::resolve() const {
  ResolvedConfig cfg(*table_);
  for (const auto& [key, spec] : *table_) cfg.entries_.emplace(key, ResolvedConfig::Entry{spec.default_value, {}});
  for (const auto* layer : {&file_layer_, &set_layer_}) {
    for (const Assignment& a : *layer) {
      auto& e = cfg.entries_.find(a.key)->second;
      e.value = a.value;
      e.origin = a.origin;
    }
  }
  // A preset fills only what is still at its default: it sits above defaults and below everything
  // else, whichever layer chose the preset.
  for (const Preset* p : table_->presets()) {
    if (std::get<std::string>(cfg.entries_.find(p->preset_key)->second.value) != p->name) continue;
    for (const auto& [key, value] : p->values) {
      auto& e = cfg.entries_.find(key)->second;
      if (e.origin.source != ValueSource::default_value) continue;
      e.value = value;
      e.origin = {ValueSource::preset, "preset " + p->preset_key + "=" + p->name};
    }
  }
  return cfg;
}

ResolvedConfig resolve_defaults(const OptionTable& table) { return ConfigResolver(table).resolve(); }

// ---------------------------------------------------------------------------------------------------
// ResolvedConfig getters
// ---------------------------------------------------------------------------------------------------

const ResolvedConfig::Entry& ResolvedConfig::entry(std::string_view key, const char* getter) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    const auto near = table_->suggestions(key, 1);
    HZP_THROW(PreconditionError, getter, "(\"", key, "\"): the key is not registered in the option table",
              near.empty() ? std::string() : "; did you mean '" + near[0] + "'?");
  }
  return it->second;
}

bool ResolvedConfig::fit_unset(std::string_view key, OptionValue value, const std::string& why) {
  Entry& e = const_cast<Entry&>(entry(key, "fit_unset"));
  if (e.origin.source != ValueSource::default_value && e.origin.source != ValueSource::preset) return false;
  HZP_CHECK(value.index() == e.value.index(), "fit_unset(\"", key, "\"): the new value has another type");
  e.value = std::move(value);
  e.origin.where += ", " + why;
  return true;
}

std::optional<OptionValue> ResolvedConfig::preset_value(std::string_view preset_key, std::string_view key) const {
  const std::string& chosen = get_string(preset_key);
  for (const Preset* p : table_->presets()) {
    if (p->preset_key != preset_key || p->name != chosen) continue;
    if (auto it = p->values.find(key); it != p->values.end()) return it->second;
  }
  return std::nullopt;
}

const OptionValue& ResolvedConfig::value(std::string_view key) const { return entry(key, "value").value; }
const ValueOrigin& ResolvedConfig::origin(std::string_view key) const { return entry(key, "origin").origin; }

namespace {
template <typename T>
const T& typed(const ResolvedConfig::Entry& e, const OptionTable& table, std::string_view key,
               const char* getter) {
  if (const T* v = std::get_if<T>(&e.value)) return *v;
  HZP_THROW(PreconditionError, getter, "(\"", key, "\"): the key is of type ",
            option_type_name(table.find(key)->type), "; use the getter of that type");
}
}  // namespace

std::int64_t ResolvedConfig::get_int(std::string_view key) const {
  return typed<std::int64_t>(entry(key, "get_int"), *table_, key, "get_int");
}
int ResolvedConfig::get_int32(std::string_view key) const {
  const std::int64_t v = get_int(key);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    HZP_THROW(ConfigError, key, " = ", v, " (from ", origin(key).where, ") does not fit the 32-bit integer it is held in. "
              "Fix: a value up to ", std::numeric_limits<int>::max(), " (see 'hzpbench list' for the key's meaning).");
  return static_cast<int>(v);
}
double ResolvedConfig::get_double(std::string_view key) const {
  return typed<double>(entry(key, "get_double"), *table_, key, "get_double");
}
bool ResolvedConfig::get_bool(std::string_view key) const {
  return typed<bool>(entry(key, "get_bool"), *table_, key, "get_bool");
}
const std::string& ResolvedConfig::get_string(std::string_view key) const {
  return typed<std::string>(entry(key, "get_string"), *table_, key, "get_string");
}
const std::vector<std::int64_t>& ResolvedConfig::get_int_list(std::string_view key) const {
  return typed<std::vector<std::int64_t>>(entry(key, "get_int_list"), *table_, key, "get_int_list");
}
const std::vector<std::string>& ResolvedConfig::get_string_list(std::string_view key) const {
  return typed<std::vector<std::string>>(entry(key, "get_string_list"), *table_, key, "get_string_list");
}

}  // namespace hzp
