// `hzpbench inspect FILE`: summarises a results file (docs/results-schema.md): status (with a hint
// when a file still says `running`: its job was killed unless it is still going), world size, the
// configuration's main choices, completed steps, first/last loss, median step time after warm-up,
// data provenance and every dataset with its shape. `--json` prints the same as one JSON object.
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "commands.hpp"
#include "hzp/core/json_text.hpp"
#include "hzp/harness/results_reader.hpp"

namespace hzp::harness {
namespace {

// The configuration keys a reader wants first; absent ones are skipped (older configs, other tools).
constexpr const char* kConfigKeys[] = {"model.preset",       "scheduler.name",  "train.steps",
                                       "train.global_batch", "train.precision", "data.source"};

struct Summary {
  std::string file, status_text, start_time, end_time, hzpbench_version, git_sha, backend;
  RunStatus status = RunStatus::running();
  std::int64_t schema = 0, world_size = 0, completed = 0, git_dirty = 0;
  double last_flush = NAN;
  std::vector<std::pair<std::string, std::string>> config;  // key, value (strings bare, others as TOML)
  std::vector<bool> config_is_string;
  std::string config_problem;
  bool has_loss = false;
  double first_loss = NAN, last_loss = NAN;
  std::string step_time_source;  // "" when there is none
  std::int64_t warmup = -1;      // -1: no warmup_steps attribute
  std::int64_t first_step = 0;   // a resumed run's first step (0-based; 0 when it did not resume)
  std::int64_t measured = 0;
  double median_step_s = NAN;
  std::vector<std::pair<std::string, std::string>> data;
  std::vector<DatasetInfo> datasets;
};

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void summarise_config(const std::string& text, Summary& s) {
  try {
    const toml::table t = toml::parse(text);
    for (const char* key : kConfigKeys) {
      const toml::node_view<const toml::node> n = t.at_path(key);
      if (!n) continue;
      std::ostringstream os;
      if (n.is_string())
        os << n.value_or(std::string());
      else
        os << n;
      s.config.emplace_back(key, os.str());
      s.config_is_string.push_back(n.is_string() || n.is_date() || n.is_time() || n.is_date_time() ||
                                   n.is_array() || n.is_table() ||
                                   (n.is_floating_point() && !std::isfinite(n.value_or(0.0))));
    }
  } catch (const toml::parse_error& e) {
    s.config_problem = std::string("the config attribute is not valid TOML: ") + std::string(e.description());
  }
}

Summary summarise(const ResultsReader& r) {
  Summary s;
  s.file = r.path().string();
  s.schema = r.schema_version();
  s.status = r.status();
  s.status_text = s.status.text();
  s.world_size = r.int_attribute("world_size");
  s.backend = r.string_attribute("backend");
  s.start_time = r.string_attribute("start_time");
  s.end_time = r.string_attribute("end_time");
  s.hzpbench_version = r.string_attribute("hzpbench_version");
  s.git_sha = r.string_attribute("git_sha");
  s.git_dirty = r.int_attribute("git_dirty");
  if (auto f = r.attribute("last_flush_unix_s"); f && std::holds_alternative<double>(*f))
    s.last_flush = std::get<double>(*f);
  summarise_config(r.string_attribute("config"), s);
  s.datasets = r.datasets();
  s.completed = r.completed_steps();
  if (auto w = r.attribute("warmup_steps"); w && std::holds_alternative<std::int64_t>(*w))
    s.warmup = std::get<std::int64_t>(*w);
  if (auto f = r.attribute("first_step"); f && std::holds_alternative<std::int64_t>(*f))
    s.first_step = std::get<std::int64_t>(*f);

  auto has = [&](std::string_view name) -> const DatasetInfo* {
    for (const DatasetInfo& d : s.datasets)
      if (d.name == name) return &d;
    return nullptr;
  };
  if (const DatasetInfo* d = has("steps/loss"); d && s.completed > 0) {
    const std::vector<double> loss = r.read_doubles("steps/loss");
    s.has_loss = true;
    s.first_loss = loss.front();
    s.last_loss = loss[static_cast<std::size_t>(s.completed) - 1];
  }
  // Step time: the recorded per-step value, or the slowest rank's (a step ends when its last rank does).
  std::vector<double> per_step;
  if (has("steps/step_time_s")) {
    s.step_time_source = "steps/step_time_s";
    per_step = r.read_doubles("steps/step_time_s");
  } else if (const DatasetInfo* d = has("ranks/step_time_s"); d && d->shape.size() == 2 && d->shape[1] > 0) {
    s.step_time_source = "max over ranks of ranks/step_time_s";
    const std::vector<double> all = r.read_doubles("ranks/step_time_s");
    const auto w = static_cast<std::size_t>(d->shape[1]);
    for (std::size_t i = 0; i + w <= all.size(); i += w)
      per_step.push_back(*std::max_element(all.begin() + i, all.begin() + i + w));
  }
  if (!s.step_time_source.empty()) {
    per_step.resize(std::min<std::size_t>(per_step.size(), static_cast<std::size_t>(s.completed)));
    const std::size_t skip =
        s.warmup > 0 ? std::min<std::size_t>(per_step.size(), static_cast<std::size_t>(s.warmup)) : 0;
    std::vector<double> measured(per_step.begin() + static_cast<std::ptrdiff_t>(skip), per_step.end());
    s.measured = static_cast<std::int64_t>(measured.size());
    s.median_step_s = median(std::move(measured));
  }
  for (auto& [k, v] : r.attributes_with_prefix("data.")) s.data.emplace_back(k, attr_to_string(v));
  return s;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string t = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + "]";
}

std::string num(double v, const char* fmt = "%.6g") {
  if (std::isnan(v)) return "nan";
  char buf[40];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

std::string killed_hint(const Summary& s) {
  std::string h =
      "the run did not finish: if no job is still writing this file, it was killed (SIGKILL, "
      "out of memory, time limit, node failure) after step " +
      std::to_string(s.completed);
  if (!std::isnan(s.last_flush)) h += "; last flush " + iso8601_utc(s.last_flush);
  return h + ". Every flushed step is in the file.";
}

void print_text(const Summary& s) {
  auto line = [](const char* key, const std::string& value) {
    std::printf("%-14s %s\n", key, value.c_str());
  };
  line("file", s.file);
  line("status", s.status_text);
  if (s.status.kind() == RunStatus::Kind::running) line("  killed?", killed_hint(s));
  line("schema", std::to_string(s.schema));
  line("hzpbench", s.hzpbench_version + " (git " + s.git_sha + (s.git_dirty ? ", dirty tree)" : ")"));
  line("started", s.start_time + (s.end_time.empty() ? "" : ", ended " + s.end_time));
  line("world_size", std::to_string(s.world_size) + " (" + s.backend + ")");
  std::string cfg;
  for (const auto& [k, v] : s.config) cfg += (cfg.empty() ? "" : ", ") + k + " = " + v;
  line("config", !s.config_problem.empty() ? s.config_problem
                 : cfg.empty()             ? "(none of model.preset, scheduler.name, train.steps set)"
                                           : cfg);
  line("steps", std::to_string(s.completed) + " completed" +
                    (s.first_step > 0 ? " (steps " + std::to_string(s.first_step + 1) + ".." +
                                            std::to_string(s.first_step + s.completed) + ": a resumed run)"
                                      : std::string()));
  if (s.has_loss) line("loss", "first " + num(s.first_loss) + ", last " + num(s.last_loss));
  if (!s.step_time_source.empty()) {
    std::string t = "median " + num(s.median_step_s) + " s over " + std::to_string(s.measured) + " steps";
    t += s.warmup >= 0 ? " after " + std::to_string(s.warmup) + " warm-up steps"
                       : " (no warmup_steps attribute: all steps)";
    line("step time", t + " [" + s.step_time_source + "]");
  }
  if (s.data.empty()) line("data", "(no data.* provenance)");
  for (std::size_t i = 0; i < s.data.size(); ++i)
    line(i ? "" : "data", s.data[i].first + " = " + s.data[i].second);
  std::printf("datasets (%zu)\n", s.datasets.size());
  for (const DatasetInfo& d : s.datasets)
    std::printf("  %-36s %-14s %-8s %s\n", d.name.c_str(), shape_string(d.shape).c_str(), d.dtype.c_str(),
                d.units.c_str());
}


std::string json_num(double v) { return std::isnan(v) || std::isinf(v) ? "null" : num(v, "%.17g"); }

void print_json(const Summary& s) {
  std::string o = "{";
  auto field = [&](std::string_view k, const std::string& v) {
    o += (o.size() > 1 ? ", " : "") + json_quote(k) + ": " + v;
  };
  field("file", json_quote(s.file));
  field("schema_version", std::to_string(s.schema));
  field("status", json_quote(s.status_text));
  field("finished", s.status.kind() == RunStatus::Kind::running ? "false" : "true");
  field("hzpbench_version", json_quote(s.hzpbench_version));
  field("git_sha", json_quote(s.git_sha));
  field("git_dirty", s.git_dirty ? "true" : "false");
  field("start_time", json_quote(s.start_time));
  field("end_time", json_quote(s.end_time));
  field("last_flush_unix_s", json_num(s.last_flush));
  field("world_size", std::to_string(s.world_size));
  field("backend", json_quote(s.backend));
  std::string cfg = "{";
  // Numbers and booleans are valid JSON as TOML prints them; everything else goes as a string.
  for (std::size_t i = 0; i < s.config.size(); ++i)
    cfg += (cfg.size() > 1 ? ", " : "") + json_quote(s.config[i].first) + ": " +
           (s.config_is_string[i] ? json_quote(s.config[i].second) : s.config[i].second);
  field("config", cfg + "}");
  field("completed_steps", std::to_string(s.completed));
  // A resumed run's rows start at first_step: the step reached is first_step + completed_steps.
  field("first_step", std::to_string(s.first_step));
  field("first_loss", s.has_loss ? json_num(s.first_loss) : "null");
  field("last_loss", s.has_loss ? json_num(s.last_loss) : "null");
  field("median_step_time_s", json_num(s.median_step_s));
  field("measured_steps", std::to_string(s.measured));
  field("warmup_steps", s.warmup >= 0 ? std::to_string(s.warmup) : "null");
  std::string data = "{";
  for (const auto& [k, v] : s.data) data += (data.size() > 1 ? ", " : "") + json_quote(k) + ": " + json_quote(v);
  field("data", data + "}");
  std::string ds = "[";
  for (const DatasetInfo& d : s.datasets) {
    std::string shape = "[";
    for (std::size_t i = 0; i < d.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(d.shape[i]);
    ds += (ds.size() > 1 ? ", " : "") + std::string("{\"name\": ") + json_quote(d.name) +
          ", \"shape\": " + shape + "], \"dtype\": " + json_quote(d.dtype) +
          ", \"units\": " + json_quote(d.units) + "}";
  }
  field("datasets", ds + "]");
  std::printf("%s}\n", o.c_str());
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  struct Args {
    std::string file;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub =
      app.add_subcommand("inspect", "Summarise a results file, including one left by a killed run");
  sub->add_option("FILE", args->file, "Results file (.h5) written by hzpbench run")->required();
  sub->add_flag("--json", args->json, "Print the summary as one JSON object");
  sub->footer("docs/results-schema.md describes every attribute and dataset.");
  return {sub, [args] {
            const ResultsReader reader(args->file);
            const Summary s = summarise(reader);
            if (args->json)
              print_json(s);
            else
              print_text(s);
            return 0;
          }};
}

}  // namespace hzp::harness
