// A results writer to kill: creates a results file the way a run does (provenance, 1-D and
// [step, rank] series, comm counters, a fixed array), then appends one step every --interval-ms,
// flushing after each and printing "completed N" once step N is flushed. killed_writer_test.py
// SIGKILLs it at random moments; the CLI tests of `hzpbench inspect` use the files it leaves.
//   results_writer_victim OUT [--interval-ms 20] [--steps N (0 = until killed)] [--ranks R]
//                             [--finish ok|none]   (none: exit without finish(), status stays running)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "hzp/harness/results_file.hpp"

namespace hh = hzp::harness;

namespace {

// The values step s writes; killed_writer_test.py recomputes them to check what the file holds.
double loss_at(std::int64_t s) { return 5.0 * std::exp(-0.01 * static_cast<double>(s)); }
double rank_time_at(std::int64_t s, std::int64_t r) {
  return 0.02 + 0.001 * static_cast<double>((s + r) % 3);
}

const hh::SeriesSpec kLoss{"steps/loss", "nats/token", "Mean training loss over the step's global batch"};
const hh::SeriesSpec kLr{"steps/lr", "1", "Learning rate used by the step's optimizer update"};
const hh::SeriesSpec kStepTime{"steps/step_time_s", "s", "Step wall time, maximum over ranks"};
const hh::SeriesSpec kRankTime{"ranks/step_time_s", "s", "Step wall time per rank"};
const hh::SeriesSpec kAgCount{"comm/all_gather/intra/count", "1",
                              "All-gathers per step and rank, intra-node"};
const hh::SeriesSpec kAgBytes{"comm/all_gather/intra/bytes", "bytes",
                              "All-gather bytes per step and rank, intra-node"};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT [--interval-ms MS] [--steps N] [--ranks R] [--finish ok|none]\n",
                 argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  int interval_ms = 20;
  std::int64_t steps = 0;
  std::int64_t ranks = 2;
  std::string finish = "ok";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--interval-ms")
      interval_ms = std::atoi(v.c_str());
    else if (k == "--steps")
      steps = std::atoll(v.c_str());
    else if (k == "--ranks")
      ranks = std::atoll(v.c_str());
    else if (k == "--finish")
      finish = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    hh::RunInfo info;
    info.argv.assign(argv, argv + argc);
    info.config_toml = "[model]\npreset = \"tiny\"\n\n[scheduler]\nname = \"zero3\"\n\n[train]\nsteps = " +
                       std::to_string(steps) + "\n";
    info.world_size = ranks;
    info.topology = std::to_string(ranks) + " ranks on 1 node";
    info.threads = {{"openblas", std::int64_t{1}}};
    info.data = {
        {"source", std::string("synthetic")}, {"vocab_size", std::int64_t{64}}, {"order", std::int64_t{1}}};
    hh::ResultsWriter w = hh::ResultsWriter::create(out, info, /*force=*/true);
    w.set_attribute("entropy_floor", 1.25);
    w.set_attribute("warmup_steps", std::int64_t{2});
    const std::vector<std::int64_t> shape = {ranks, 5};
    std::vector<std::int64_t> state(static_cast<std::size_t>(ranks * 5));
    for (std::size_t i = 0; i < state.size(); ++i) state[i] = 1000 * static_cast<std::int64_t>(i + 1);
    w.write_array(
        {"memory/model_state_bytes", "bytes", "Persistent model-state bytes per rank and component"}, shape,
        state);
    w.set_dataset_attribute("memory/model_state_bytes", "components",
                            std::vector<std::string>{"param", "grad", "master", "m", "v"});
    w.flush();
    std::printf("created\n");
    std::fflush(stdout);

    std::vector<double> times(static_cast<std::size_t>(ranks));
    std::vector<std::int64_t> counts(static_cast<std::size_t>(ranks)), bytes(static_cast<std::size_t>(ranks));
    for (std::int64_t s = 0; steps == 0 || s < steps; ++s) {
      double slowest = 0.0;
      for (std::int64_t r = 0; r < ranks; ++r) {
        times[static_cast<std::size_t>(r)] = rank_time_at(s, r);
        slowest = std::max(slowest, times[static_cast<std::size_t>(r)]);
        counts[static_cast<std::size_t>(r)] = 4;
        bytes[static_cast<std::size_t>(r)] = 4096 * (s + 1);
      }
      w.append(kLoss, loss_at(s));
      w.append(kLr, 1e-3);
      w.append(kStepTime, slowest);
      w.append_row(kRankTime, times);
      w.append_row(kAgCount, counts);
      w.append_row(kAgBytes, bytes);
      w.flush();
      std::printf("completed %lld\n", static_cast<long long>(s + 1));
      std::fflush(stdout);
      if (interval_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    }
    if (finish == "ok") w.finish(hh::RunStatus::ok());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "results_writer_victim: %s\n", e.what());
    return 1;
  }
}
