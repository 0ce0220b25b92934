// The option table: every configuration key declared once (type, default, range, unit, meaning), and
// the one resolver that layers key defaults < presets < TOML config files < `--set key=value` on top of
// it. The same table drives parsing, `hzpbench list`, the generated docs and the
// resolved-config dump that results files record. Generic machinery only: the project's keys are
// registered in harness/src/option_keys.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace hzp {

// ---------------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------------

enum class OptionType { boolean, integer, real, string, enumeration, int_list, string_list };

/// "bool", "int", "float", "string", "enum", "int list", "string list" (what `list` shows).
const char* option_type_name(OptionType type) noexcept;

/// A value of any option type. Enumerations hold their name as a std::string; integers are int64.
using OptionValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>,
                                 std::vector<std::string>>;

/// Renders a value the way a user types it after `--set key=` (strings unquoted, lists comma-separated),
/// or, with `toml_literal`, as a TOML literal that parses back to the same value (doubles round-trip).
std::string format_option_value(const OptionValue& value, bool toml_literal = false);

// ---------------------------------------------------------------------------------------------------
// One key
// ---------------------------------------------------------------------------------------------------

/// One end of a numeric range. For int lists the range applies to every element.
struct NumberBound {
  double value = 0;
  bool inclusive = true;
};

/// The declaration of one key. Built with a factory plus chained refinements, e.g.
///   OptionSpec::real("collectives.timeout_s", 300, "deadline of every wait").positive().with_unit("s")
struct OptionSpec {
  std::string key;              ///< dotted path, snake_case components: "topology.ranks_per_node"
  OptionType type = OptionType::string;
  OptionValue default_value;
  std::string meaning;          ///< one line: what it does, what special values (0 = auto) mean
  std::string unit;             ///< "s", "us", "bytes", "GB/s", ...; empty when unitless
  std::optional<NumberBound> lower, upper;  ///< numbers and int lists only
  std::vector<std::string> allowed;         ///< enumerations only, in declaration order
  bool hidden = false;          ///< documented in the Markdown docs, left out of `list` (test hooks)

  static OptionSpec boolean(std::string key, bool default_value, std::string meaning);
  static OptionSpec integer(std::string key, std::int64_t default_value, std::string meaning);
  static OptionSpec real(std::string key, double default_value, std::string meaning);
  static OptionSpec string(std::string key, std::string default_value, std::string meaning);
  static OptionSpec enumeration(std::string key, std::vector<std::string> allowed,
                                std::string default_value, std::string meaning);
  static OptionSpec int_list(std::string key, std::vector<std::int64_t> default_value,
                             std::string meaning);
  static OptionSpec string_list(std::string key, std::vector<std::string> default_value,
                                std::string meaning);

  OptionSpec& at_least(double v);      ///< value >= v
  OptionSpec& above(double v);         ///< value >  v
  OptionSpec& at_most(double v);       ///< value <= v
  OptionSpec& below(double v);         ///< value <  v
  OptionSpec& in_range(double lo, double hi) { return at_least(lo).at_most(hi); }
  OptionSpec& positive() { return above(0); }
  OptionSpec& non_negative() { return at_least(0); }
  OptionSpec& with_unit(std::string u);
  OptionSpec& hide();

  /// "true or false", "an integer", "one of: yield, backoff, mixed", ... (used in error fixes).
  std::string expected_text() const;
  /// The range as `list` shows it: ">= 0", "> 0", "[1, 8]", "yield | backoff | mixed"; "" when any.
  std::string range_text() const;
  /// Why `value` breaks this key's range or allowed set, or nullopt when it is acceptable. `value`
  /// must already hold this key's type.
  std::optional<std::string> violation(const OptionValue& value) const;
};

// ---------------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------------

/// A named set of overrides selected by the value of an enumeration key (the "preset key"), e.g.
/// `model.preset = "tiny"` supplying `model.layers = 4`. Applied above key defaults and below files.
struct Preset {
  std::string preset_key;  ///< "model.preset"
  std::string name;        ///< "tiny"
  std::string meaning;
  std::map<std::string, OptionValue, std::less<>> values;
};

/// Every key a program accepts. Not thread-safe to modify; build it once, then share it read-only.
class OptionTable {
 public:
  using Specs = std::map<std::string, OptionSpec, std::less<>>;

  /// `list_hint` ends unknown-key errors, e.g. "run 'hzpbench list' to see every key".
  explicit OptionTable(std::string list_hint = {});

  /// Registers a key. Throws PreconditionError (a programming error, not a user's) when the key is
  /// malformed or already registered, when it is a prefix of another key or has one as its prefix at a
  /// component boundary (a TOML file could not hold both), or when its default breaks its own range.
  const OptionSpec& add(OptionSpec spec);

  /// Registers preset `name` of the enumeration key `preset_key` (adding `name` to its allowed values if
  /// absent). Every override must name a registered key that is not a preset key and hold a valid value
  /// of its type (an integer is accepted for a float key). Throws PreconditionError otherwise.
  void add_preset(std::string_view preset_key, std::string name,
                  std::vector<std::pair<std::string, OptionValue>> values, std::string meaning = {});

  const OptionSpec* find(std::string_view key) const noexcept;
  bool contains(std::string_view key) const noexcept { return find(key) != nullptr; }
  /// Registered keys closest to `key` (edit distance over the whole key, or over its last component
  /// only, so `ranks_per_node` finds `topology.ranks_per_node`), best first.
  std::vector<std::string> suggestions(std::string_view key, std::size_t max_count = 3) const;

  /// Every key, ordered by key (a stable order for list, docs and dumps).
  const Specs& specs() const noexcept { return specs_; }
  Specs::const_iterator begin() const noexcept { return specs_.begin(); }
  Specs::const_iterator end() const noexcept { return specs_.end(); }
  std::size_t size() const noexcept { return specs_.size(); }

  const Preset* find_preset(std::string_view preset_key, std::string_view name) const noexcept;
  /// Every preset, ordered by preset key, then name.
  std::vector<const Preset*> presets() const;
  bool is_preset_key(std::string_view key) const noexcept;

  const std::string& list_hint() const noexcept { return list_hint_; }

 private:
  Specs specs_;
  std::map<std::string, std::map<std::string, Preset, std::less<>>, std::less<>> presets_;
  std::string list_hint_;
};

// ---------------------------------------------------------------------------------------------------
// Resolution
// ---------------------------------------------------------------------------------------------------

enum class ValueSource { default_value, preset, file, set };
/// "default", "preset", "file", "set".
const char* value_source_name(ValueSource source) noexcept;

/// Where a resolved value came from; `where` is what the dump prints: "default",
/// "preset model.preset=tiny", "run.toml:3:1", "--set".
struct ValueOrigin {
  ValueSource source = ValueSource::default_value;
  std::string where = "default";
};

/// Every key of a table with its value after layering, and its origin. Holds a pointer to the table,
/// which must outlive it. Read-only after construction, so safe to share between threads.
class ResolvedConfig {
 public:
  struct Entry {
    OptionValue value;
    ValueOrigin origin;
  };

  const OptionTable& table() const noexcept { return *table_; }
  const OptionValue& value(std::string_view key) const;
  const ValueOrigin& origin(std::string_view key) const;

  /// Typed getters. Throw PreconditionError (a programming error) when the key is not registered or
  /// its type is not the one asked for; get_string serves string and enumeration keys.
  std::int64_t get_int(std::string_view key) const;
  /// get_int for a key the program holds in an int (group sizes, ranks): a value beyond int's range throws
  /// ConfigError naming the key, the value, its origin and the fix, where a cast would wrap (2^63-1 to -1).
  int get_int32(std::string_view key) const;
  double get_double(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<std::int64_t>& get_int_list(std::string_view key) const;
  const std::vector<std::string>& get_string_list(std::string_view key) const;

  /// Every key with its value as TOML (top-level keys first, then one [section] per first path
  /// component), optionally with each value's origin as a trailing comment. Parses back (through
  /// ConfigResolver::add_toml_text) to the same values. This is the text results files record.
  std::string to_toml(bool with_origins = true) const;

  const std::map<std::string, Entry, std::less<>>& entries() const noexcept { return entries_; }

  /// Replaces a value that came from a key default or a preset, never one a file or --set gave, with
  /// `value`, appending `why` to its origin (so the dump says what was changed and why); returns whether
  /// it did. For a program's fitting rules (a preset's warm-up scaled to a shorter run); call it before the
  /// configuration is shared.
  bool fit_unset(std::string_view key, OptionValue value, const std::string& why);
  /// The value the chosen preset of `preset_key` gives `key`, if it gives one.
  std::optional<OptionValue> preset_value(std::string_view preset_key, std::string_view key) const;

 private:
  friend class ConfigResolver;
  explicit ResolvedConfig(const OptionTable& table) : table_(&table) {}
  const Entry& entry(std::string_view key, const char* getter) const;

  const OptionTable* table_;
  std::map<std::string, Entry, std::less<>> entries_;
};

/// Collects the layers of one configuration and resolves them. Each add_* call parses and checks its
/// input at once and throws ConfigError naming the key, the value, where it came from (file:line:column
/// or `--set`) and the fix. Later layers of the same kind win over earlier ones (a second file over the
/// first; the last `--set` of a key over earlier ones). Precedence, lowest first:
///   key defaults < preset (chosen by the final value of its preset key) < files and texts < --set.
class ConfigResolver {
 public:
  explicit ConfigResolver(const OptionTable& table) : table_(&table) {}

  /// Reads a TOML file; nested tables flatten to dotted keys ([model] layers = 4 is model.layers).
  /// Throws ConfigError when it is missing or unreadable (naming the path), malformed (path, line,
  /// column, parser message), or holds an unknown key or a bad value.
  ConfigResolver& add_file(const std::string& path);
  /// The same for TOML text held in memory (an embedded default config); `source_name` replaces
  /// the path in messages and origins.
  ConfigResolver& add_toml_text(std::string_view text, const std::string& source_name);
  /// One `key=value` override; the value is parsed by the key's type: true/false; decimal integers
  /// (strictly: 2.5 or 1e3 are refused for integer keys); numbers; strings with or without quotes;
  /// enumeration names; lists as `1,2,3` or `[1, 2, 3]`.
  ConfigResolver& add_set(std::string_view assignment);

  /// Layers everything added so far (every value was checked when added, so this does not throw).
  ResolvedConfig resolve() const;

 private:
  struct Assignment {
    std::string key;
    OptionValue value;
    ValueOrigin origin;
  };
  void parse_toml(std::string_view text, const std::string& source_name);

  const OptionTable* table_;
  std::vector<Assignment> file_layer_;
  std::vector<Assignment> set_layer_;
};

/// Defaults only (no preset chosen unless a preset key's default names one).
ResolvedConfig resolve_defaults(const OptionTable& table);

// ---------------------------------------------------------------------------------------------------
// Documentation
// ---------------------------------------------------------------------------------------------------

/// The human table of `list`: key, type, default, range, unit, meaning, grouped by top-level section,
/// followed by the presets. Hidden keys only with `include_hidden`.
std::string format_option_list(const OptionTable& table, bool include_hidden = false);
/// The same as Markdown (one table per section); hidden keys are included and marked, since the docs
/// are where test-only keys are documented.
std::string format_option_markdown(const OptionTable& table);

/// Edit distance (insertions, deletions, substitutions) between two strings.
std::size_t levenshtein_distance(std::string_view a, std::string_view b);

}  // namespace hzp
