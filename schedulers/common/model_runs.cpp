// Checkpoint runs in the unsharded model's order (model_runs.hpp): a local layout's runs mapped through each
// tensor's global offset and index_in_full, and the rule that picks one writer for every element.
#include "hzp/schedulers/common/model_runs.hpp"

#include <algorithm>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

std::vector<StateArchive::Run> model_runs(const workloads::ParamLayout& layout, std::span<const StateArchive::Run> runs,
                                          const TensorWriter& keep) {
  std::vector<StateArchive::Run> out;
  auto emit = [&](std::int64_t global, std::int64_t local, std::int64_t count) {
    if (!out.empty() && out.back().global + out.back().count == global && out.back().local + out.back().count == local)
      out.back().count += count;
    else
      out.push_back({.global = global, .local = local, .count = count});
  };
  for (const StateArchive::Run& r : runs) {
    std::int64_t i = r.global, local = r.local;
    const std::int64_t end = r.global + r.count;
    while (i < end) {
      const workloads::ParamLayout::Location at = layout.locate(i);
      const workloads::Unit& unit = layout.unit(at.unit);
      const workloads::ParamTensor& t = unit.tensors[at.tensor];
      const std::int64_t tensor_begin = i - at.index;
      const std::int64_t stop = std::min(end, tensor_begin + t.numel());
      if (keep(unit, t)) {
        const std::int64_t base = t.global_offset >= 0 ? t.global_offset : tensor_begin;
        // A piece's elements are consecutive in the whole tensor within one slab along its cut dimension.
        std::int64_t slab = t.numel();
        if (t.shard.sharded()) {
          slab = 1;
          for (int d = t.shard.dim; d < t.shape.ndim; ++d) slab *= t.shape[d];
        }
        for (std::int64_t j = i; j < stop;) {
          const std::int64_t k = j - tensor_begin;
          const std::int64_t n = std::min(stop - j, slab - k % slab);
          emit(base + t.index_in_full(k), local + (j - i), n);
          j += n;
        }
      }
      local += stop - i;
      i = stop;
    }
  }
  return out;
}

TensorWriter piece_writer(const ProcessGroups& groups, bool dense_writer, bool expert_writer) {
  const int tp_rank = groups.tensor() ? groups.tensor()->rank() : 0;
  const int cp_rank = groups.context() ? groups.context()->rank() : 0;
  return [=](const workloads::Unit& unit, const workloads::ParamTensor& t) {
    if (!unit.runs) return false;
    const std::string& g = t.shard.sharded() ? t.shard.group : std::string();
    HZP_CHECK(g.empty() || g == "tp" || g == "ep", "checkpoint: tensor ", t.name, " is a piece over group '", g,
              "', whose writers are not chosen");
    // The expert-data group spans the context ranks (an ep group may be a cp group): its first rank is the one.
    if (g == "ep") return expert_writer && tp_rank == 0;
    return cp_rank == 0 && (g == "tp" || tp_rank == 0) && dense_writer;
  };
}

}  // namespace hzp::schedulers
