// The project's option table: every key's default satisfies its own range, every key is documented,
// and the defaults resolve and dump to TOML that reads back to the same values.
#include <gtest/gtest.h>

#include "hzp/core/options.hpp"
#include "hzp/harness/option_keys.hpp"
#include "hzp/harness/run_options.hpp"
#include "hzp/schedulers/scheduler_options.hpp"

namespace hzp::harness {
namespace {

TEST(OptionKeys, EveryDefaultSatisfiesItsOwnRange) {
  const OptionTable& t = hzpbench_options();
  ASSERT_GT(t.size(), 0u);
  for (const auto& [key, spec] : t) {
    const auto why = spec.violation(spec.default_value);
    EXPECT_FALSE(why.has_value()) << key << ": default " << format_option_value(spec.default_value) << " is "
                                  << why.value_or("");
    EXPECT_FALSE(spec.meaning.empty()) << key;
  }
}

TEST(OptionKeys, SchedulerKeysReachTheirFieldsAndDefaultToTheStruct) {
  // Every scheduler.* key is declared once (hzp/schedulers/scheduler_options.hpp): its default is the
  // struct's, and a value given on the command line lands in its own field, enum names included.
  const OptionTable& t = hzpbench_options();
  using O = schedulers::SchedulerOptions;
  const O d = schedulers::scheduler_options_from(resolve_defaults(t));
  const O want{};
  EXPECT_EQ(d.bucket_mb, want.bucket_mb);
  EXPECT_EQ(d.prefetch, want.prefetch);
  EXPECT_EQ(d.step_end, want.step_end);
  EXPECT_EQ(d.pool_fallback, want.pool_fallback);
  ConfigResolver r(t);
  for (const char* s : {"scheduler.bucket_mb=7", "scheduler.overlap=false", "scheduler.group_size=2", "scheduler.z1=8",
                        "scheduler.z2=4", "scheduler.z3=2", "scheduler.step_end=reduce_scatter", "scheduler.async=false",
                        "scheduler.prefetch=3", "scheduler.launch=tensor", "scheduler.pool_mb=5",
                        "scheduler.pool_fallback=inline", "scheduler.tp=4", "scheduler.sequence_parallel=true",
                        "scheduler.distributed_optimizer=true", "scheduler.tp_across_nodes=true", "scheduler.pp=4",
                        "scheduler.schedule=interleaved", "scheduler.virtual_stages=3", "scheduler.pp_layers=1,2,3,2",
                        "scheduler.debug_unit_sleep_ms=2.5", "scheduler.cp=4", "scheduler.pp_reuse=false",
                        "scheduler.rs_merge=false", "scheduler.ep=2", "scheduler.tied_split=rows_allgather"})
    r.add_set(s);
  const O o = schedulers::scheduler_options_from(r.resolve());
  EXPECT_EQ(o.bucket_mb, 7);
  EXPECT_FALSE(o.overlap);
  EXPECT_EQ(o.group_size, 2);
  EXPECT_EQ(o.z1, 8);
  EXPECT_EQ(o.z2, 4);
  EXPECT_EQ(o.z3, 2);
  EXPECT_EQ(o.step_end, O::StepEnd::reduce_scatter);
  EXPECT_FALSE(o.async);
  EXPECT_EQ(o.prefetch, 3);
  EXPECT_EQ(o.launch, O::Launch::tensor);
  EXPECT_EQ(o.pool_mb, 5);
  EXPECT_EQ(o.pool_fallback, O::PoolFallback::inline_alloc);
  EXPECT_EQ(o.tp, 4);
  EXPECT_TRUE(o.sequence_parallel);
  EXPECT_TRUE(o.distributed_optimizer);
  EXPECT_TRUE(o.tp_across_nodes);
  EXPECT_EQ(o.pp, 4);
  EXPECT_EQ(o.cp, 4);
  EXPECT_EQ(o.schedule, schedulers::PipelineScheduleKind::interleaved);
  EXPECT_EQ(o.virtual_stages, 3);
  EXPECT_EQ(o.pp_layers, (std::vector<int>{1, 2, 3, 2}));
  EXPECT_EQ(o.debug_unit_sleep_ms, 2.5);
  EXPECT_EQ(o.ep, 2);
  EXPECT_EQ(d.tp, want.tp);
  EXPECT_EQ(d.distributed_optimizer, want.distributed_optimizer);
  EXPECT_EQ(d.pp, want.pp);
  EXPECT_EQ(d.schedule, want.schedule);
  EXPECT_TRUE(d.pp_layers.empty());
  EXPECT_EQ(d.cp, want.cp);
  EXPECT_EQ(d.ep, want.ep);
  EXPECT_EQ(d.ep, 1);
  EXPECT_EQ(d.pp_reuse, want.pp_reuse);
  EXPECT_EQ(d.rs_merge, want.rs_merge);
  EXPECT_TRUE(d.pp_reuse && d.rs_merge);
  EXPECT_FALSE(o.pp_reuse);
  EXPECT_FALSE(o.rs_merge);
  EXPECT_EQ(o.tied_split, O::TiedSplit::rows_allgather);
  EXPECT_EQ(d.tied_split, O::TiedSplit::off);
  EXPECT_EQ(d.tied_split, want.tied_split);
  EXPECT_EQ(schedulers::scheduler_option_decls().size(), 26u);  // a new key is declared there, and tested here
}

// scheduler.tied_split names its forms (it was a bool): the old `true` is refused naming the key and the names.
TEST(OptionKeys, TiedSplitTakesItsFormsByName) {
  using O = schedulers::SchedulerOptions;
  for (const auto& [text, want] : {std::pair{"off", O::TiedSplit::off}, {"rows_alltoall", O::TiedSplit::rows_alltoall},
                                   {"rows_allgather", O::TiedSplit::rows_allgather}}) {
    ConfigResolver r(hzpbench_options());
    r.add_set(std::string("scheduler.tied_split=") + text);
    EXPECT_EQ(schedulers::scheduler_options_from(r.resolve()).tied_split, want) << text;
  }
  try {
    ConfigResolver r(hzpbench_options());
    r.add_set("scheduler.tied_split=true");
    (void)r.resolve();
    ADD_FAILURE() << "scheduler.tied_split=true accepted";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("scheduler.tied_split"), std::string::npos) << what;
    EXPECT_NE(what.find("rows_alltoall"), std::string::npos) << what;
  }
}

TEST(OptionKeys, FoundationKeysAreRegistered) {
  const OptionTable& t = hzpbench_options();
  for (const char* key : {"topology.world_size", "topology.ranks_per_node", "collectives.backend",
                          "collectives.mpi_native", "collectives.wait_policy", "collectives.backoff_max_us",
                          "collectives.timeout_s", "collectives.small_message_bytes", "links.emulate",
                          "links.intra.latency_us", "links.intra.bandwidth_gbps", "links.inter.latency_us",
                          "links.inter.bandwidth_gbps"}) {
    EXPECT_TRUE(t.contains(key)) << key;
  }
  const ResolvedConfig c = resolve_defaults(t);
  EXPECT_EQ(c.get_string("collectives.wait_policy"), "mixed");
  EXPECT_EQ(c.get_int("collectives.small_message_bytes"), 65536);
  EXPECT_FALSE(c.get_bool("links.emulate"));
  // The CPU defaults keep an H100 cluster's ratio: 25-45 MB/s inside a node, 2.5-5 MB/s across.
  EXPECT_GE(c.get_double("links.intra.bandwidth_gbps"), 0.025);
  EXPECT_LE(c.get_double("links.intra.bandwidth_gbps"), 0.045);
  EXPECT_GE(c.get_double("links.inter.bandwidth_gbps"), 0.0025);
  EXPECT_LE(c.get_double("links.inter.bandwidth_gbps"), 0.005);
}

TEST(OptionKeys, CheckpointsOnSignalOnly) {
  // output.checkpoint_on_signal turns the signal's checkpoint on without periodic ones (what slurm/sweep asks for).
  const OptionTable& t = hzpbench_options();
  const RunOptions off = run_options_from(resolve_defaults(t));
  EXPECT_FALSE(off.checkpoint_on_signal);
  EXPECT_FALSE(off.checkpoints_on());
  const RunOptions on =
      run_options_from(ConfigResolver(t).add_toml_text("output.checkpoint_on_signal = true", "test").resolve());
  EXPECT_TRUE(on.checkpoint_on_signal);
  EXPECT_EQ(on.checkpoint_every, 0);
  EXPECT_TRUE(on.checkpoints_on());
}

TEST(OptionKeys, DefaultsDumpAndReadBack) {
  const OptionTable& t = hzpbench_options();
  const ResolvedConfig c = resolve_defaults(t);
  const ResolvedConfig back = ConfigResolver(t).add_toml_text(c.to_toml(), "dump").resolve();
  for (const auto& [key, e] : c.entries()) EXPECT_EQ(back.value(key), e.value) << key;
}

}  // namespace
}  // namespace hzp::harness
