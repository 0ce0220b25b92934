// asynchzp's scheduler.tied_split (docs/data-parallel.md "The tied table's chain") under mpiexec at 2 and 4 ranks:
// the tied table's dense part exchanged after the head's backward and the last micro-batch's rows sent to their
// owners (rows_alltoall) or all-gathered (rows_allgather) after the embedding's give the single-rank reference's
// losses, norms and step-0 gradients (tiny: 128 tokens per micro-batch over a vocabulary of 64, so every micro-batch
// repeats ids; a vocabulary of 65 or 66 puts slice boundaries inside rows) and the option off's within fp32
// tolerance, and the two forms the same bits (the same additions in the same order); in deterministic mode two runs,
// two shardings and the two forms are bitwise equal; every group but the rows' moves the option off's bytes, the
// rows' all-gather moves the closed form (W−1)·T·(4 + d·b) per rank and the all-to-all-v the closed form of the
// rank's actual token ids (computed here from the data and the slices' arithmetic), within the stated bound of the
// plan's uniform-owner expectation; pipeline stages and an untied model are refused, context parallelism is not
// (its runs: test_asynchzp_tied_split_context.cpp).
#include <gtest/gtest.h>

#include "tied_split_test_util.hpp"
#include "hzp/core/error.hpp"

namespace hzp::test {
namespace {

using schedulers::SchedulerOptions;
using workloads::Precision;

// Layouts whose rows cross ranks: optimizer slices over 2 or 4 ranks, with and without replicas, both step ends,
// and one whose slices split rows.
std::vector<SplitCase> cases_at(int w) {
  if (w == 2) return {{2, 2, 2}, {2, 1, 1}, {2, 2, 1, false}, {2, 1, 1, true, true}, {2, 2, 2, true, false, 65}};
  return {{4, 2, 2}, {4, 4, 4}, {2, 2, 2, false}, {4, 2, 1, true, true}, {4, 2, 2, true, false, 66}};
}

bool ranks_fit() { return world_size() == 2 || world_size() == 4; }

TEST(AsyncHzpTiedSplit, MatchesNoneAndTheOptionOff) {
  if (!ranks_fit()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  run_then_barrier([] {
    auto world = make_world(std::max(1, world_size() / 2));
    for (const SplitCase& c : cases_at(world->size())) {
      SplitRun on(*world, c, TiedSplit::rows_alltoall);
      expect_matches_none(on, false, c.label() + " split", /*step0_grads=*/true, 8, SplitRun::vocab_of(c));
      expect_forms_match_the_option_off(*world, c);
    }
  }, 600);
}

TEST(AsyncHzpTiedSplit, DeterministicModeIsBitwiseAcrossRunsShardingsAndForms) {
  if (!ranks_fit()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  run_then_barrier([] {
    auto world = make_world(std::max(1, world_size() / 2));
    expect_deterministic_bitwise(*world, cases_at(world->size()));
  }, 600);
}

TEST(AsyncHzpTiedSplit, BytesAreTheOptionOffsPlusTheRowsAndThePlanIsWhatRan) {
  if (!ranks_fit()) GTEST_SKIP() << "runs at 2 and 4 ranks";
  run_then_barrier([] {
    // One node, as the plan's levels assume (an all-gather sends (W−1) shards under either algorithm).
    auto world = make_world(world_size());
    for (const SplitCase& c : cases_at(world->size()))
      for (bool deterministic : {false, true}) expect_bytes_are_the_option_offs_plus_the_rows(*world, c, deterministic);
  }, 600);
}

TEST(AsyncHzpTiedSplit, RefusesStagesAndAnUntiedModel) {
  if (world_size() != 4) GTEST_SKIP() << "runs at 4 ranks";
  run_then_barrier([] {
    auto world = make_world(2);
    for (TiedSplit mode : {TiedSplit::rows_alltoall, TiedSplit::rows_allgather}) {
      const std::string value = mode == TiedSplit::rows_alltoall ? "rows_alltoall" : "rows_allgather";
      auto refused = [&](SchedulerOptions o, bool tied, const std::string& needle) {
        SCOPED_TRACE(needle + " " + value);
        o.tied_split = mode;
        try {
          NdRun run(*world, two_nodes(*world), {o, [tied](workloads::LlamaConfig& m) { m.tied_embeddings = tied; }, false,
                                                false, 0, Precision::fp32, "asynchzp"});
          ADD_FAILURE() << "accepted";
        } catch (const ConfigError& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("scheduler.tied_split = " + value), std::string::npos) << what;
          EXPECT_NE(what.find(needle), std::string::npos) << what;
          EXPECT_NE(what.find("Fix:"), std::string::npos) << what;
        }
      };
      SchedulerOptions pp;
      pp.pp = 2;
      refused(pp, true, "scheduler.pp = 2");
      refused(SchedulerOptions{}, false, "model.tied_embeddings = true");
    }
  }, 300);
}

}  // namespace
}  // namespace hzp::test
