// asynchzp's scheduler.tied_split under context parallelism (docs/data-parallel.md "The tied table's chain"), cp = 2
// under mpiexec at 4 and 8 ranks on `tiny`: each rank's rows are the ids of its own tokens (2 of the 4 chunks of
// every sequence, 64 slots of a 128-token micro-batch) and travel over the data × context ranks, whose gradients the
// table sums. Both forms give the single-rank reference's losses, norms and step-0 gradients and the option off's
// losses, norms and parameters within fp32 tolerance, and the same bits as each other; deterministic mode is
// bitwise across runs, shardings and forms; every group but the rows' moves the option off's bytes, the rows' the
// closed forms with T = micro_batch_size · seq_len / cp (all-gather) or of the rank's own token ids (all-to-all-v),
// and the plan (what `hzpbench plan` and `hzpbench simulate` read) is what ran.
#include <gtest/gtest.h>

#include "tied_split_test_util.hpp"

namespace hzp::test {
namespace {

// Layouts at W ranks with cp = 2 (dp = W / 2): z1 over dp · cp with z3 = z2 = cp (the paper's shape), inline, two
// replicas of z1 = cp, z2 across two cp groups with the reduce-scatter step end, and slice boundaries inside rows.
std::vector<SplitCase> cases_at(int w) {
  if (w == 4)
    return {{.z1 = 4, .z2 = 2, .z3 = 2, .cp = 2},
            {.z1 = 4, .z2 = 2, .z3 = 1, .cp = 2},
            {.z1 = 4, .z2 = 2, .z3 = 2, .async = false, .cp = 2},
            {.z1 = 2, .z2 = 2, .z3 = 2, .cp = 2},
            {.z1 = 4, .z2 = 4, .z3 = 2, .rs_end = true, .cp = 2},
            {.z1 = 4, .z2 = 2, .z3 = 2, .vocab = 66, .cp = 2}};
  return {{.z1 = 8, .z2 = 2, .z3 = 2, .cp = 2},
          {.z1 = 4, .z2 = 2, .z3 = 1, .cp = 2},
          {.z1 = 4, .z2 = 2, .z3 = 2, .async = false, .cp = 2},
          {.z1 = 8, .z2 = 4, .z3 = 2, .rs_end = true, .vocab = 66, .cp = 2}};
}

bool ranks_fit() { return world_size() == 4 || world_size() == 8; }

TEST(AsyncHzpTiedSplitContext, MatchesNoneAndTheOptionOff) {
  if (!ranks_fit()) GTEST_SKIP() << "runs at 4 and 8 ranks";
  run_then_barrier([] {
    auto world = make_world(world_size() / 2);
    for (const SplitCase& c : cases_at(world->size())) {
      SplitRun on(*world, c, TiedSplit::rows_alltoall);
      expect_matches_none(on, false, c.label() + " split", /*step0_grads=*/true, 6, SplitRun::vocab_of(c));
      expect_forms_match_the_option_off(*world, c);
    }
  }, 600);
}

TEST(AsyncHzpTiedSplitContext, DeterministicModeIsBitwiseAcrossRunsShardingsAndForms) {
  if (!ranks_fit()) GTEST_SKIP() << "runs at 4 and 8 ranks";
  run_then_barrier([] {
    auto world = make_world(world_size() / 2);
    expect_deterministic_bitwise(*world, cases_at(world->size()));
  }, 600);
}

TEST(AsyncHzpTiedSplitContext, BytesAreTheOptionOffsPlusTheRowsAndThePlanIsWhatRan) {
  if (!ranks_fit()) GTEST_SKIP() << "runs at 4 and 8 ranks";
  run_then_barrier([] {
    auto world = make_world(world_size());
    for (const SplitCase& c : cases_at(world->size()))
      for (bool deterministic : {false, true}) expect_bytes_are_the_option_offs_plus_the_rows(*world, c, deterministic);
  }, 600);
}

}  // namespace
}  // namespace hzp::test
