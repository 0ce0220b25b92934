// Text views of the option table and of a resolved configuration: the TOML dump with origins (what
// results files record and rank 0 prints), the aligned table of `hzpbench list`, and the Markdown
// reference that docs/options.md is generated from. All iterate the table in key order, so outputs are
// stable from build to build.
#include <algorithm>
#include <map>

#include "hzp/core/options.hpp"
#include "options_internal.hpp"

namespace hzp {
namespace {

std::string section_of(const std::string& key) {
  const auto dot = key.find('.');
  return dot == std::string::npos ? std::string() : key.substr(0, dot);
}

// Keys grouped by first path component, top-level keys (section "") first: TOML requires them before
// any [table] header, and the list reads the same way.
template <typename Map>
std::map<std::string, std::vector<typename Map::const_pointer>> by_section(const Map& m) {
  std::map<std::string, std::vector<typename Map::const_pointer>> out;
  for (const auto& kv : m) out[section_of(kv.first)].push_back(&kv);
  return out;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string markdown_cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string preset_overrides(const Preset& p) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : p.values) parts.push_back(k + "=" + format_option_value(v));
  return detail::join(parts, ", ");
}

}  // namespace

std::string ResolvedConfig::to_toml(bool with_origins) const {
  std::string out;
  const auto sections = by_section(entries_);
  for (const auto& [section, entries] : sections) {
    std::vector<std::string> lines;
    std::size_t width = 0;
    for (const auto* kv : entries) {
      const std::string rel = section.empty() ? kv->first : kv->first.substr(section.size() + 1);
      lines.push_back(rel + " = " + format_option_value(kv->second.value, true));
      width = std::max(width, lines.back().size());
    }
    if (!out.empty()) out += '\n';
    if (!section.empty()) out += "[" + section + "]\n";
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (with_origins) {
        out += pad(lines[i], width) + "  # " + entries[i]->second.origin.where + "\n";
      } else {
        out += lines[i] + "\n";
      }
    }
  }
  return out;
}

std::string format_option_list(const OptionTable& table, bool include_hidden) {
  struct Row {
    std::string key, type, def, range, unit, meaning;
  };
  std::map<std::string, std::vector<Row>> rows;
  Row header{"KEY", "TYPE", "DEFAULT", "RANGE", "UNIT", "MEANING"};
  std::size_t w[5] = {header.key.size(), header.type.size(), header.def.size(), header.range.size(),
                      header.unit.size()};
  for (const auto& [key, spec] : table) {
    if (spec.hidden && !include_hidden) continue;
    Row r{key, option_type_name(spec.type), format_option_value(spec.default_value), spec.range_text(),
          spec.unit, spec.hidden ? "(hidden: test hook) " + spec.meaning : spec.meaning};
    w[0] = std::max(w[0], r.key.size());
    w[1] = std::max(w[1], r.type.size());
    w[2] = std::max(w[2], r.def.size());
    w[3] = std::max(w[3], r.range.size());
    w[4] = std::max(w[4], r.unit.size());
    rows[section_of(key)].push_back(std::move(r));
  }
  auto line = [&](const Row& r) {
    return pad(r.key, w[0] + 2) + pad(r.type, w[1] + 2) + pad(r.def, w[2] + 2) + pad(r.range, w[3] + 2) +
           pad(r.unit, w[4] + 2) + r.meaning + "\n";
  };
  std::string out = line(header);
  for (const auto& [section, list] : rows) {
    out += "\n[" + (section.empty() ? std::string("top level") : section) + "]\n";
    for (const Row& r : list) out += line(r);
  }
  const auto presets = table.presets();
  if (!presets.empty()) {
    out += "\nPRESETS (selected by the value of their key; they fill keys left at their defaults)\n";
    for (const Preset* p : presets) {
      out += "  " + p->preset_key + "=" + p->name + (p->meaning.empty() ? "" : ": " + p->meaning) + "\n";
      out += "      " + preset_overrides(*p) + "\n";
    }
  }
  return out;
}

std::string format_option_markdown(const OptionTable& table) {
  std::string out;
  std::map<std::string, std::vector<const OptionSpec*>> sections;
  for (const auto& [key, spec] : table) sections[section_of(key)].push_back(&spec);
  for (const auto& [section, specs] : sections) {
    out += "\n## " + (section.empty() ? std::string("Top-level keys") : "`" + section + "`") + "\n\n";
    out += "| Key | Type | Default | Range | Unit | Meaning |\n";
    out += "|-----|------|---------|-------|------|---------|\n";
    for (const OptionSpec* s : specs) {
      const std::string range = s->range_text();
      out += "| `" + s->key + "` | " + option_type_name(s->type) + " | `" +
             markdown_cell(format_option_value(s->default_value)) + "` | " +
             (range.empty() ? std::string() : "`" + markdown_cell(range) + "`") + " | " + markdown_cell(s->unit) +
             " | " + (s->hidden ? "*Hidden from `list` (test hook).* " : "") + markdown_cell(s->meaning) +
             " |\n";
    }
  }
  const auto presets = table.presets();
  if (!presets.empty()) {
    out += "\n## Presets\n\nA preset is chosen by the value of its key and fills the keys still at their "
           "defaults (files and `--set` win over it).\n\n";
    out += "| Preset | Meaning | Overrides |\n|--------|---------|-----------|\n";
    for (const Preset* p : presets) {
      out += "| `" + p->preset_key + "=" + p->name + "` | " + markdown_cell(p->meaning) + " | `" +
             markdown_cell(preset_overrides(*p)) + "` |\n";
    }
  }
  return out;
}

}  // namespace hzp
