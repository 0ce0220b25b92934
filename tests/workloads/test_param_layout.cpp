// ParamLayout and initialisation: unit offsets and sizes against the config's counts, the gradient-
// writer rules for a tied head, element lookup, and the counter-based initialiser's independence
// from how the flat range is split (what lets every shard initialise its own slice), and a pipeline stage's layout
// (stage_layout): the units it holds start from the whole model's values, the tied table's writers and sharing.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "data_test_util.hpp"
#include "hzp/workloads/llama.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::test {
namespace {

using workloads::LlamaConfig;
using workloads::ParamLayout;

workloads::ParamTensor tensor(std::string name, Shape shape, std::int64_t offset) {
  workloads::ParamTensor t;
  t.name = std::move(name);
  t.shape = shape;
  t.offset = offset;
  return t;
}

LlamaConfig tiny_shape(bool tied) {
  LlamaConfig c;  // the defaults are tiny's shape
  c.tied_embeddings = tied;
  return c;
}

TEST(ParamLayout, UnitsCoverTheFlatBufferInOrder) {
  for (bool tied : {true, false}) {
    const LlamaConfig c = tiny_shape(tied);
    const ParamLayout layout = workloads::llama_layout(c);
    ASSERT_EQ(layout.num_units(), c.layers + 2);
    EXPECT_EQ(layout.total_numel(), c.num_params());
    std::int64_t next = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
      EXPECT_EQ(layout.unit_offset(u), next);
      next += layout.unit_numel(u);
    }
    EXPECT_EQ(next, layout.total_numel());
    EXPECT_EQ(layout.unit(0).name, "embedding");
    EXPECT_EQ(layout.unit(1).name, "block.0");
    EXPECT_EQ(layout.unit(c.layers + 1).name, "head");
    EXPECT_EQ(layout.unit_numel(1), c.block_params());
    const auto* wq = layout.find("blocks.2.attn.wq");
    ASSERT_NE(wq, nullptr);
    EXPECT_EQ(wq->shape, (Shape{c.heads * c.resolved_head_dim(), c.hidden}));
  }
}

TEST(ParamLayout, TiedHeadDeclaresTheEmbeddingAndItsGradientFinalisesLast) {
  const LlamaConfig c = tiny_shape(true);
  const ParamLayout layout = workloads::llama_layout(c);
  const int head = static_cast<int>(c.layers) + 1;
  EXPECT_EQ(layout.unit(head).uses, std::vector<int>{0});
  EXPECT_EQ(layout.param_blocks(head), (std::vector<int>{head, 0}));
  // Backward order: the head writes the embedding's gradient first, the embedding unit last.
  EXPECT_EQ(layout.grad_writers(0), (std::vector<int>{head, 0}));
  EXPECT_EQ(layout.first_grad_writer(0), head);
  EXPECT_EQ(layout.last_grad_writer(0), 0);
  EXPECT_EQ(layout.grads_final_after(head), std::vector<int>{head});
  EXPECT_EQ(layout.grads_final_after(0), std::vector<int>{0});
  EXPECT_EQ(layout.grads_final_after(2), std::vector<int>{2});
  // Forward order: the embedding's parameters are read last by the head.
  EXPECT_TRUE(layout.params_last_used_in_forward(0).empty());
  EXPECT_EQ(layout.params_last_used_in_forward(head), (std::vector<int>{head, 0}));

  const ParamLayout untied = workloads::llama_layout(tiny_shape(false));
  EXPECT_TRUE(untied.unit(head).uses.empty());
  EXPECT_EQ(untied.grad_writers(0), std::vector<int>{0});
  EXPECT_NE(untied.find("lm_head"), nullptr);
  EXPECT_EQ(untied.total_numel() - layout.total_numel(), c.vocab * c.hidden);
}

TEST(ParamLayout, LocateFindsUnitTensorAndIndex) {
  const ParamLayout layout = workloads::llama_layout(tiny_shape(true));
  int unit = -1;
  const auto* wk = layout.find("blocks.1.attn.wk", &unit);
  ASSERT_NE(wk, nullptr);
  const std::int64_t g = layout.unit_offset(unit) + wk->offset + 5;
  const auto loc = layout.locate(g);
  EXPECT_EQ(loc.unit, unit);
  EXPECT_EQ(layout.unit(loc.unit).tensors[loc.tensor].name, "blocks.1.attn.wk");
  EXPECT_EQ(loc.index, 5);
  EXPECT_EQ(layout.locate(layout.total_numel() - 1).unit, layout.num_units() - 1);
  EXPECT_THROW(layout.locate(layout.total_numel()), PreconditionError);
}

TEST(ParamLayout, RejectsInconsistentUnits) {
  workloads::Unit u;
  u.name = "x";
  u.tensors.push_back(tensor("a", Shape{4}, 0));
  u.tensors.push_back(tensor("b", Shape{4}, 5));  // gap
  u.numel = 9;
  EXPECT_TRUE(throws_with<PreconditionError>([&] { ParamLayout({u}); }, {"tensor b starts at 5", "expected 4"}));
  workloads::Unit v;
  v.name = "y";
  v.tensors.push_back(tensor("a", Shape{4}, 0));
  v.numel = 4;
  v.uses = {0};
  EXPECT_TRUE(throws_with<PreconditionError>([&] { ParamLayout({v}); }, {"uses unit 0"}));
}

TEST(Init, IndependentOfHowTheRangeIsSplit) {
  const ParamLayout layout = workloads::llama_layout(tiny_shape(true));
  const auto n = static_cast<std::size_t>(layout.total_numel());
  std::vector<float> whole(n), pieces(n);
  workloads::init_params(layout, 0, std::span<float>(whole), 42);
  // Uneven shards that cut through tensors and units, as a sharded scheduler's would.
  const std::size_t cuts[] = {0, 1, 777, 4096 + 3, n / 2, n - 5, n};
  for (std::size_t i = 0; i + 1 < std::size(cuts); ++i)
    workloads::init_params(layout, static_cast<std::int64_t>(cuts[i]),
                           std::span<float>(pieces).subspan(cuts[i], cuts[i + 1] - cuts[i]), 42);
  EXPECT_EQ(0, std::memcmp(whole.data(), pieces.data(), n * sizeof(float)));

  std::vector<double> dbl(n);
  workloads::init_params(layout, 0, std::span<double>(dbl), 42);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(whole[i], static_cast<float>(dbl[i])) << i;

  std::vector<float> other(n);
  workloads::init_params(layout, 0, std::span<float>(other), 43);
  EXPECT_NE(0, std::memcmp(whole.data(), other.data(), n * sizeof(float)));
}

// A piece of a sharded tensor initialises to the matching slice of the whole tensor (what lets a
// tensor-parallel rank start from the parameters of the unsharded model). The reference slices the whole
// tensor by explicit coordinates, independently of index_in_full.
TEST(Init, ShardedPiecesStartFromTheSliceOfTheWholeTensor) {
  using workloads::ParamTensor;
  using workloads::Unit;
  // A whole layout with a 2-D and a 3-D tensor, both normal-initialised.
  Unit whole_unit;
  whole_unit.name = "u";
  whole_unit.tensors.push_back(tensor("m", Shape{6, 8}, 0));
  whole_unit.tensors.push_back(tensor("c", Shape{2, 6, 4}, 48));
  whole_unit.numel = 48 + 48;
  const ParamLayout whole({whole_unit});
  std::vector<double> ref(96);
  workloads::init_params(whole, 0, std::span<double>(ref), 7);

  for (int which = 0; which < 2; ++which) {
    const ParamTensor& full = whole.unit(0).tensors[static_cast<std::size_t>(which)];
    for (int dim = 0; dim < full.shape.ndim; ++dim) {
      for (int count : {1, 2, 3}) {
        if (full.shape[dim] % count != 0) continue;
        for (int index = 0; index < count; ++index) {
          ParamTensor piece;
          piece.name = full.name;
          piece.shape = full.shape;
          piece.shape.dims[static_cast<std::size_t>(dim)] = full.shape[dim] / count;
          piece.shard = {dim, index, count, "tp"};
          piece.global_shape = full.shape;
          piece.global_offset = full.offset;
          Unit u;
          u.name = "piece";
          u.tensors.push_back(piece);
          u.numel = piece.numel();
          const ParamLayout sharded({u});
          std::vector<double> got(static_cast<std::size_t>(u.numel));
          workloads::init_params(sharded, 0, std::span<double>(got), 7);
          // Walk the piece's coordinates; its element at coordinate x is the whole tensor's at x with
          // x[dim] moved by index · piece extent.
          std::int64_t local = 0;
          std::array<std::int64_t, 3> x{};
          const int nd = piece.shape.ndim;
          for (; local < piece.numel(); ++local) {
            std::int64_t rem = local;
            for (int d = nd - 1; d >= 0; --d) {
              x[static_cast<std::size_t>(d)] = rem % piece.shape[d];
              rem /= piece.shape[d];
            }
            x[static_cast<std::size_t>(dim)] += index * piece.shape[dim];
            std::int64_t g = 0;
            for (int d = 0; d < nd; ++d) g = g * full.shape[d] + x[static_cast<std::size_t>(d)];
            ASSERT_EQ(got[static_cast<std::size_t>(local)], ref[static_cast<std::size_t>(full.offset + g)])
                << full.name << " dim " << dim << " piece " << index << "/" << count << " element " << local;
          }
        }
      }
    }
  }
}

TEST(ParamLayout, RejectsAnInconsistentShard) {
  workloads::Unit u;
  u.name = "u";
  workloads::ParamTensor t = tensor("w", Shape{4, 8}, 0);
  t.shard = {0, 0, 2, "tp"};
  t.global_shape = Shape{6, 8};  // 4 · 2 != 6
  t.global_offset = 0;
  u.tensors.push_back(t);
  u.numel = 32;
  EXPECT_TRUE(throws_with<PreconditionError>([&] { ParamLayout({u}); },
                                             {"tensor w", "piece 0 of 2 along dim 0", "[6, 8]", "\"tp\""}));
  u.tensors[0].global_shape = Shape{8, 8};
  u.tensors[0].shard.group = "";  // no group: nobody could reassemble it
  EXPECT_TRUE(throws_with<PreconditionError>([&] { ParamLayout({u}); }, {"tensor w", "a group"}));
  u.tensors[0].shard.group = "tp";
  EXPECT_NO_THROW(ParamLayout({u}));
}

TEST(Init, StdPerTensorKindAndNormsAtOne) {
  LlamaConfig c;
  c.layers = 8;
  c.hidden = 128;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn_hidden = 256;
  c.vocab = 512;
  const ParamLayout layout = workloads::llama_layout(c);
  std::vector<double> p(static_cast<std::size_t>(layout.total_numel()));
  workloads::init_params(layout, 0, std::span<double>(p), 1);
  auto stats = [&](const char* name) {
    int u = -1;
    const auto* t = layout.find(name, &u);
    EXPECT_NE(t, nullptr) << name;
    double s = 0, s2 = 0;
    const std::int64_t base = layout.unit_offset(u) + t->offset;
    for (std::int64_t i = 0; i < t->numel(); ++i) {
      s += p[static_cast<std::size_t>(base + i)];
      s2 += p[static_cast<std::size_t>(base + i)] * p[static_cast<std::size_t>(base + i)];
    }
    const double n = static_cast<double>(t->numel());
    return std::pair{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  // 65k samples: the sample std is within ~1% of the true one.
  const auto [m_emb, s_emb] = stats("tok_embeddings");
  EXPECT_NEAR(s_emb, 0.02, 0.02 * 0.03);
  EXPECT_NEAR(m_emb, 0.0, 0.001);
  const double scaled = 0.02 / std::sqrt(2.0 * 8);
  EXPECT_NEAR(stats("blocks.3.mlp.w_down").second, scaled, scaled * 0.03);
  EXPECT_NEAR(stats("blocks.3.attn.wo").second, scaled, scaled * 0.05);
  EXPECT_NEAR(stats("blocks.3.mlp.w_up").second, 0.02, 0.02 * 0.03);
  const auto [m_norm, s_norm] = stats("blocks.5.attn_norm");
  EXPECT_EQ(m_norm, 1.0);
  EXPECT_EQ(s_norm, 0.0);
}

// Tiny (6 units) cut into 3 stages: units {0,1}, {2,3}, {4,5} (embedding, blocks 0-3, head).
workloads::StageCut three_stages(int stage) { return {{0, 0, 1, 1, 2, 2}, stage}; }

TEST(StageLayout, KeepsTheStagesUnitsWithTheWholeModelsValues) {
  for (bool tied : {true, false}) {
    const ParamLayout whole = workloads::llama_layout(tiny_shape(tied));
    std::vector<float> all(static_cast<std::size_t>(whole.total_numel()));
    workloads::init_params(whole, 0, std::span<float>(all), 7);
    std::int64_t absent_total = 0;
    for (int stage = 0; stage < 3; ++stage) {
      const ParamLayout st = workloads::stage_layout(whole, three_stages(stage));
      ASSERT_EQ(st.num_units(), whole.num_units());
      std::vector<float> mine(static_cast<std::size_t>(st.total_numel()));
      workloads::init_params(st, 0, std::span<float>(mine), 7);
      std::int64_t held = 0, absent = 0;
      for (int u = 0; u < whole.num_units(); ++u) {
        const workloads::Unit& x = st.unit(u);
        const bool runs = three_stages(stage).stage_of_unit[static_cast<std::size_t>(u)] == stage;
        EXPECT_EQ(x.runs, runs) << "stage " << stage << " unit " << u;
        // The tied table is shared by the first stage (running it) and the last (its head uses it), and marked
        // so on the middle stage too, which holds neither.
        EXPECT_EQ(x.shared, tied && u == 0) << "stage " << stage << " unit " << u;
        // Every stage knows the holders (a pure slot for the group of the two, docs/phantom.md).
        const std::vector<int> holders = tied && u == 0 ? std::vector<int>{0, 2} : std::vector<int>{};
        EXPECT_EQ(x.held_on_stages, holders) << "stage " << stage << " unit " << u;
        const bool kept = runs || (tied && u == 0 && stage == 2);
        EXPECT_EQ(x.numel, kept ? whole.unit_numel(u) : 0) << "stage " << stage << " unit " << u;
        EXPECT_EQ(x.absent_numel + x.numel, whole.unit_numel(u));
        EXPECT_EQ(static_cast<std::size_t>(x.absent_tensors) + x.tensors.size(), whole.unit(u).tensors.size());
        held += x.numel;
        absent += x.absent_numel;
        if (x.numel > 0) {  // bitwise the whole model's values
          EXPECT_EQ(std::memcmp(mine.data() + st.unit_offset(u), all.data() + whole.unit_offset(u),
                                static_cast<std::size_t>(x.numel) * sizeof(float)),
                    0)
              << "stage " << stage << " unit " << u;
        }
      }
      EXPECT_EQ(held, st.total_numel());
      absent_total += absent;
      EXPECT_EQ(held + absent, whole.total_numel());
    }
    // Every unit is held once over the three stages, the tied table twice.
    EXPECT_EQ(absent_total, 2 * whole.total_numel() - (tied ? whole.unit_numel(0) : 0));
  }
}

TEST(StageLayout, TheHeldTableIsWrittenOnlyByTheHeadAndFinalAfterIt) {
  const ParamLayout whole = workloads::llama_layout(tiny_shape(true));
  const int head = whole.num_units() - 1;
  const ParamLayout last = workloads::stage_layout(whole, three_stages(2));
  EXPECT_EQ(last.grad_writers(0), (std::vector<int>{head}));
  EXPECT_EQ(last.grads_final_after(head), (std::vector<int>{head, 0}));
  const ParamLayout first = workloads::stage_layout(whole, three_stages(0));
  EXPECT_EQ(first.grad_writers(0), (std::vector<int>{0}));  // the head's use is another stage's
  EXPECT_TRUE(first.unit(head).uses.empty());
  EXPECT_TRUE(first.grad_writers(head).empty());
  const ParamLayout middle = workloads::stage_layout(whole, three_stages(1));
  EXPECT_TRUE(middle.grad_writers(0).empty());
  EXPECT_EQ(middle.unit_numel(0), 0);
  EXPECT_THROW((void)workloads::stage_layout(whole, {{0, 0, 1}, 0}), PreconditionError);
  EXPECT_THROW((void)workloads::stage_layout(whole, {{0, 0, 0, 0, 0, 0}, 1}), PreconditionError);
}

}  // namespace
}  // namespace hzp::test
