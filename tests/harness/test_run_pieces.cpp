// The pieces of `hzpbench run` that need no MPI: the run's options (fault specs, default scheduler,
// embedded default, output paths), link profiles and comm_to_compute, dump-step parsing, summary statistics
// (percentiles, spikes, step aggregation) and the failure precedence.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "failure.hpp"
#include "hzp/core/error.hpp"
#include "hzp/harness/link_profiles.hpp"
#include "hzp/harness/option_keys.hpp"
#include "hzp/harness/run_options.hpp"
#include "hzp/schedulers/scheduler.hpp"
#include "run_context.hpp"
#include "run_setup.hpp"
#include "summary.hpp"

namespace hzp::harness {
namespace {

TEST(RunOptions, FaultSpecsParseRankColonStep) {
  EXPECT_FALSE(parse_fault_spec("debug.throw_at", "").active());
  const FaultSpec f = parse_fault_spec("debug.throw_at", "1:30");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.step, 30);
  EXPECT_TRUE(f.hits(1, 30));
  EXPECT_FALSE(f.hits(0, 30));
  for (const char* bad : {"1", "1:", ":3", "a:3", "1:-2", "-1:3", "1:3:4", "1.5:2"})
    EXPECT_THROW(parse_fault_spec("debug.stall_at", bad), ConfigError) << bad;
}

TEST(RunOptions, DefaultSchedulerIsNoneOnOneRankAndAZeroOneBeyond) {
  EXPECT_EQ(default_scheduler(1).value(), "none");
  const auto names = schedulers::scheduler_names();
  const auto multi = default_scheduler(2);
  if (multi) {
    EXPECT_NE(std::find(names.begin(), names.end(), *multi), names.end());
    EXPECT_NE(*multi, "none");
  }
  // The embedded default names only the preset, the scheduler and the links.
  const std::string one = embedded_default_toml(1);
  EXPECT_NE(one.find("preset = \"small\""), std::string::npos);
  EXPECT_NE(one.find("name = \"none\""), std::string::npos);
  EXPECT_NE(one.find("profile = \"h100-dgx\""), std::string::npos);
  EXPECT_EQ(one.find("[train]"), std::string::npos);
}

TEST(RunOptions, EmbeddedDefaultKeepsThePresetsOwnDefaults) {
  RunCliArgs a;
  a.config.sets = {"model.preset=tiny"};
  const ResolvedConfig c = resolve_run_config(a, 1);
  EXPECT_EQ(c.get_int("model.hidden"), 64);
  EXPECT_EQ(c.get_int("train.global_batch"), 16);
  EXPECT_EQ(c.get_string("scheduler.name"), "none");
  EXPECT_EQ(c.origin("links.profile").where.rfind("embedded default", 0), 0u) << c.origin("links.profile").where;
}

TEST(RunOptions, DefaultOutputPathNamesUtcTimeAndConfigHash) {
  RunCliArgs a;
  a.config.sets = {"model.preset=tiny"};
  const ResolvedConfig c = resolve_run_config(a, 1);
  const std::string p = default_output_path(c, 1714566896.0);  // 2024-05-01T12:34:56Z
  EXPECT_EQ(p, "results/20240501T123456Z-" + config_hash(c) + ".h5");
  EXPECT_EQ(config_hash(c).size(), 8u);
  a.config.sets.push_back("train.steps=7");
  EXPECT_NE(config_hash(resolve_run_config(a, 1)), config_hash(c)) << "another configuration, another hash";
}

TEST(LinkProfiles, H100RatiosBecomeCpuBandwidths) {
  EXPECT_NEAR(kH100Dgx.intra_flop_per_byte(), 2197.8, 0.1);
  EXPECT_NEAR(kH100Dgx.inter_flop_per_byte(), 19780, 1e-6);
  LinkPlanInput in;
  in.profile = "h100-dgx";
  in.given.enabled = true;
  in.flops_per_s = 75e9;
  const LinkPlan p = plan_links(in);
  // 75 GFLOP/s keeps 2.2k FLOP per intra byte at ~34 MB/s and 19.8k per inter byte at ~3.8 MB/s.
  EXPECT_NEAR(p.links.intra.bandwidth_gbps * 1e3, 75e9 / (989e12 / 450e9) / 1e6, 1e-9);
  EXPECT_NEAR(p.links.inter.bandwidth_gbps * 1e3, 75e9 / 19780 / 1e6, 1e-9);
  EXPECT_NEAR(p.intra_flop_per_byte, kH100Dgx.intra_flop_per_byte(), 1e-6);
  EXPECT_DOUBLE_EQ(p.links.intra.latency_us, in.given.intra.latency_us) << "latencies stay as given";
  EXPECT_NE(p.how.find("h100-dgx"), std::string::npos);
}

TEST(LinkProfiles, PaperNpuAndCustom) {
  LinkPlanInput in;
  in.given.enabled = true;
  in.flops_per_s = 60e9;
  in.profile = "paper-npu";
  LinkPlan p = plan_links(in);
  EXPECT_NEAR(p.links.intra.bandwidth_gbps / p.links.inter.bandwidth_gbps, 16.0, 1e-9);  // 400 / 25 GB/s
  EXPECT_NEAR(p.links.intra.bandwidth_gbps * 1e9, 60e9 / 750, 1e-3);
  in.profile = "custom";
  in.custom_intra_flop_per_byte = 1000;
  in.custom_inter_flop_per_byte = 8000;
  p = plan_links(in);
  EXPECT_NEAR(p.links.intra.bandwidth_gbps, 0.06, 1e-12);
  EXPECT_NEAR(p.links.inter.bandwidth_gbps, 0.0075, 1e-12);
}

TEST(LinkProfiles, CommToComputeSetsInterFromTheReferenceVolume) {
  LinkPlanInput in;
  in.given.enabled = true;
  in.profile = "h100-dgx";
  in.flops_per_s = 50e9;
  in.comm_to_compute = 0.5;
  in.micro_batch_s = 2.0;
  in.num_params = 1'000'000;
  const LinkPlan p = plan_links(in);
  // 4N = 4 MB per micro-batch in 0.5 x 2 s: 4 MB/s; intra keeps H100's 450/50 = 9x.
  EXPECT_NEAR(p.links.inter.bandwidth_gbps, 4e6 / 1.0 / 1e9, 1e-15);
  EXPECT_NEAR(p.links.intra.bandwidth_gbps / p.links.inter.bandwidth_gbps, 9.0, 1e-9);
  EXPECT_DOUBLE_EQ(p.reference_bytes, 4e6);
}

TEST(LinkProfiles, OffOrAsGivenNeedNoMeasurement) {
  LinkPlanInput in;
  EXPECT_FALSE(link_plan_needs_measurement(in));
  in.profile = "h100-dgx";
  EXPECT_FALSE(link_plan_needs_measurement(in)) << "emulation off: a profile changes nothing";
  in.given.enabled = true;
  EXPECT_TRUE(link_plan_needs_measurement(in));
  EXPECT_THROW(validate_link_profile("b200"), ConfigError);
}

TEST(RunSetup, DumpStepsAndOutputPaths) {
  EXPECT_EQ(parse_dump_steps("5,0,5", 10), (std::vector<std::int64_t>{0, 5}));
  EXPECT_TRUE(parse_dump_steps("", 10).empty());
  EXPECT_THROW(parse_dump_steps("1,x", 10), ConfigError);
  EXPECT_THROW(parse_dump_steps("10", 10), ConfigError);
  const auto dir = std::filesystem::temp_directory_path() / "hzp_test_run_pieces";
  std::filesystem::create_directories(dir);
  const auto existing = dir / "existing.h5";
  std::ofstream(existing) << "x";
  EXPECT_THROW(check_output_path(existing.string(), false), ConfigError);
  EXPECT_NO_THROW(check_output_path(existing.string(), true));
  EXPECT_NO_THROW(check_output_path((dir / "new/deeper/run.h5").string(), false)) << "parents are created later";
  EXPECT_THROW(check_output_path((existing / "run.h5").string(), false), ConfigError) << "a file as parent";
  EXPECT_THROW(check_output_path(dir.string(), false), ConfigError) << "a directory";
}

// The collectives.* enumeration keys against names written out here: each name the option parser accepts reaches
// MpiCommConfig as its value and reads back as the same name (what the results file records); `list` offers
// exactly these names; an unknown one is a ConfigError naming the key, the value and the choices.
TEST(RunSetup, CollectivesEnumerationNamesRoundTrip) {
  const OptionTable& t = hzpbench_options();
  const auto comm = [&](const std::string& set) {
    ConfigResolver r(t);
    r.add_set(set);
    return mpi_comm_config_from(r.resolve());
  };
  for (const auto& [name, value] : std::vector<std::pair<std::string, coll::WaitPolicy>>{
           {"yield", coll::WaitPolicy::yield}, {"backoff", coll::WaitPolicy::backoff},
           {"mixed", coll::WaitPolicy::mixed}}) {
    const coll::MpiCommConfig c = comm("collectives.wait_policy=" + name);
    EXPECT_EQ(c.wait_policy, value) << name;
    EXPECT_EQ(coll::wait_policy_name(c.wait_policy), name);
  }
  for (const auto& [name, value] : std::vector<std::pair<std::string, coll::Transport>>{
           {"auto", coll::Transport::automatic}, {"mpi", coll::Transport::mpi}, {"shm", coll::Transport::shm}}) {
    const coll::MpiCommConfig c = comm("collectives.transport=" + name);
    EXPECT_EQ(c.transport, value) << name;
    EXPECT_EQ(coll::transport_name(c.transport), name);
  }
  EXPECT_EQ(t.find("collectives.wait_policy")->allowed, (std::vector<std::string>{"yield", "backoff", "mixed"}));
  EXPECT_EQ(t.find("collectives.transport")->allowed, (std::vector<std::string>{"auto", "mpi", "shm"}));
  for (const auto& [key, choices] : std::vector<std::pair<std::string, std::string>>{
           {"collectives.wait_policy", "yield, backoff, mixed"}, {"collectives.transport", "auto, mpi, shm"}}) {
    try {
      comm(key + "=bogus");
      ADD_FAILURE() << key << " accepted an unknown name";
    } catch (const ConfigError& e) {
      EXPECT_NE(e.message().find(key + " = bogus"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(choices), std::string::npos) << e.message();
    }
  }
}

TEST(Summary, PercentilesInterpolateLinearly) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 100), 5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 95), 4.8);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
}

TEST(Summary, SpikesAreZScoresOverTheTrailingWindow) {
  SpikeDetector d(20, 4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(d.push(1.0 + 0.01 * i))) << "fewer than 5 values known";
  for (int i = 4; i < 30; ++i) EXPECT_FALSE(d.is_spike(d.push(1.0 + 0.01 * (i % 3))));
  const double z = d.push(5.0);
  EXPECT_TRUE(d.is_spike(z)) << z;
  EXPECT_TRUE(std::isnan(d.push(std::numeric_limits<double>::quiet_NaN())));
}

TEST(Summary, AggregateTakesTheMaxStepTimeAndComputesMfu) {
  RankSample a, b;
  a[RankField::step_time_s] = 0.5;
  b[RankField::step_time_s] = 1.0;
  a[RankField::exposed_comm_s] = 0.25;
  b[RankField::exposed_comm_s] = 0.0;
  a[StepField::tokens] = b[StepField::tokens] = 1000;
  a[StepField::loss] = b[StepField::loss] = 2.5;
  const RankSample samples[] = {a, b};
  const StepScale scale{2, 6e6, 5e6, 1e9};
  const StepRecord r = aggregate_step(3, samples, scale);
  EXPECT_EQ(r.step, 3);
  EXPECT_DOUBLE_EQ(r.step_time_s, 1.0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 1000);
  EXPECT_DOUBLE_EQ(r.model_flops, 6e9);
  EXPECT_DOUBLE_EQ(r.mfu, 6e9 / 1.0 / 2e9);
  EXPECT_DOUBLE_EQ(r.mfu_causal, 5e9 / 1.0 / 2e9);
  EXPECT_DOUBLE_EQ(r.exposed_comm_frac, 0.25);  // mean of 0.5 and 0
  EXPECT_DOUBLE_EQ(r.rank_spread, 0.5 / 0.75);
}

TEST(Failure, ErrorsOutrankTheirEchoes) {
  FailureReport err{1, kExitFailed, FailureReport::Kind::error, 10, "boom"};
  FailureReport timeout{0, kExitFailed, FailureReport::Kind::timeout, 5, "timed out"};
  FailureReport stalled_early{2, kExitFailed, FailureReport::Kind::watchdog, 3, "stall"};
  FailureReport stalled_late{0, kExitFailed, FailureReport::Kind::watchdog, 4, "stall"};
  EXPECT_TRUE(err.better_than(timeout));
  EXPECT_FALSE(timeout.better_than(err));
  EXPECT_TRUE(stalled_early.better_than(stalled_late));
  EXPECT_FALSE(stalled_late.better_than(stalled_early));
  EXPECT_TRUE(stalled_late.better_than(timeout));
  // A rank idle inside a collective waits for a peer: a rank idle outside one explains the stall better,
  // even when it made its last progress a moment later (both stop at about the same time).
  FailureReport waiting_early{0, kExitFailed, FailureReport::Kind::watchdog, 3, "stall", true};
  FailureReport stopped_late{1, kExitFailed, FailureReport::Kind::watchdog, 3.001, "stall", false};
  EXPECT_TRUE(stopped_late.better_than(waiting_early));
  EXPECT_FALSE(waiting_early.better_than(stopped_late));
  EXPECT_EQ(exit_code_for(ConfigError("x")), kExitBadInput);
  EXPECT_EQ(exit_code_for(DataError("x")), kExitBadInput);
  EXPECT_EQ(exit_code_for(TimeoutError("x")), kExitFailed);
  EXPECT_EQ(exit_code_for(std::runtime_error("x")), kExitFailed);
}

}  // namespace
}  // namespace hzp::harness

// OpenBLAS threads per rank: each rank's share of the machine, never OpenBLAS's default of every CPU per
// process; one thread in deterministic mode; the environment's setting left alone.
TEST(OpenblasThreads, EachRankGetsItsShareOfTheCpus) {
  using hzp::harness::openblas_threads_for;
  EXPECT_EQ(openblas_threads_for(64, 64, 8, false, false), 8);   // 8 unbound ranks on a 64-CPU node
  EXPECT_EQ(openblas_threads_for(16, 16, 4, false, false), 4);
  EXPECT_EQ(openblas_threads_for(2, 2, 4, false, false), 1);     // oversubscribed: one thread, not zero
  EXPECT_EQ(openblas_threads_for(2, 2, 1, false, false), 2);     // one rank: the whole machine
  EXPECT_EQ(openblas_threads_for(6, 64, 8, false, false), 6);    // bound by the launcher to 6 CPUs
  EXPECT_EQ(openblas_threads_for(64, 64, 8, true, false), 1);    // deterministic
  EXPECT_EQ(openblas_threads_for(64, 64, 8, true, true), 1);     // deterministic wins over the environment
  EXPECT_EQ(openblas_threads_for(64, 64, 8, false, true), 0);    // OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set
}
