// visit_flat_component and visit_gathered_state (state_dump.hpp).
#include "hzp/schedulers/common/state_dump.hpp"

#include <algorithm>
#include <vector>

#include "hzp/core/dtype.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/cast.hpp"

namespace hzp::schedulers {

void visit_flat_component(const workloads::ParamLayout& layout, std::string_view component, ConstTensorView flat,
                          StateVisitor& visitor) {
  for (int u = 0; u < layout.num_units(); ++u) {
    const ConstTensorView block = workloads::unit_block(layout, u, flat);
    for (int t = 0; t < static_cast<int>(layout.unit(u).tensors.size()); ++t)
      visitor.tensor(component, layout.unit(u).tensors[static_cast<std::size_t>(t)].name,
                     workloads::tensor_in_block(layout, u, t, block));
  }
}

std::vector<float> gather_tensor_pieces(const workloads::ParamTensor& t, ConstTensorView piece, coll::Communicator& tp) {
  const int n = tp.size();
  HZP_CHECK(t.shard.sharded() && t.shard.count == n && t.shard.index == tp.rank() && piece.dtype() == DType::f32 &&
                piece.numel() == t.numel(),
            "gather_tensor_pieces: ", t.name, " is piece ", t.shard.index, " of ", t.shard.count, " but the group has ",
            n, " ranks (this one ", tp.rank(), ")");
  const std::int64_t m = t.numel();
  std::vector<float> all(static_cast<std::size_t>(m * n));
  tp.all_gather(piece, TensorView(all.data(), Shape{m * n}, DType::f32), StreamRef::host());
  // Row-major: each piece is `outer` runs of `inner` elements; the whole tensor interleaves the pieces' runs.
  std::int64_t outer = 1;
  for (int d = 0; d < t.shard.dim; ++d) outer *= t.shape[d];
  const std::int64_t inner = m / outer;
  std::vector<float> full(all.size());
  for (int r = 0; r < n; ++r)
    for (std::int64_t o = 0; o < outer; ++o)
      std::copy_n(all.data() + r * m + o * inner, inner, full.data() + (o * n + r) * inner);
  return full;
}

namespace {

// The groups a tensor's pieces are gathered over: "ep" pieces over ep, every other piece over tp.
struct PieceGroups {
  coll::Communicator* tp = nullptr;
  coll::Communicator* ep = nullptr;
  coll::Communicator* of(const workloads::ParamTensor& t) const {
    coll::Communicator* c = t.shard.group == "ep" ? ep : tp;
    return c != nullptr && c->size() > 1 ? c : nullptr;
  }
};

// One component, tensor by tensor; pieces of tensor- and expert-parallel tensors gathered whole (every rank takes
// part).
void visit_component(const workloads::ParamLayout& layout, std::string_view component, ConstTensorView flat,
                     const PieceGroups& groups, bool root, StateVisitor& visitor) {
  for (int u = 0; u < layout.num_units(); ++u) {
    const ConstTensorView block = workloads::unit_block(layout, u, flat);
    for (int t = 0; t < static_cast<int>(layout.unit(u).tensors.size()); ++t) {
      const workloads::ParamTensor& pt = layout.unit(u).tensors[static_cast<std::size_t>(t)];
      const ConstTensorView mine = workloads::tensor_in_block(layout, u, t, block);
      coll::Communicator* const group = pt.shard.sharded() ? groups.of(pt) : nullptr;
      if (group == nullptr) {
        if (root) visitor.tensor(component, pt.name, mine);
        continue;
      }
      // Pieces travel as fp32 (bf16 widens exactly) and are narrowed back after.
      std::vector<float> wide(static_cast<std::size_t>(mine.numel()));
      kernels::cast(TensorView(wide.data(), mine.shape(), DType::f32), mine, StreamRef::host());
      const std::vector<float> full =
          gather_tensor_pieces(pt, ConstTensorView(wide.data(), Shape{mine.numel()}, DType::f32), *group);
      if (!root) continue;
      if (mine.dtype() == DType::f32) {
        visitor.tensor(component, pt.name, ConstTensorView(full.data(), pt.global_shape, DType::f32));
      } else {
        std::vector<std::byte> narrow(full.size() * dtype_size(mine.dtype()));
        kernels::cast(TensorView(narrow.data(), pt.global_shape, mine.dtype()),
                      ConstTensorView(full.data(), pt.global_shape, DType::f32), StreamRef::host());
        visitor.tensor(component, pt.name, ConstTensorView(narrow.data(), pt.global_shape, mine.dtype()));
      }
    }
  }
}

}  // namespace

void visit_gathered_state(DataParallelScheduler& s, const workloads::ParamLayout& layout,
                          workloads::Precision precision, bool root, coll::Communicator* tp, StateVisitor& visitor,
                          coll::Communicator* ep) {
  const PieceGroups groups{tp, ep};
  // Every rank takes part in every gather, in the same order; only the root hands tensors over.
  const std::vector<float> param = s.gather_working_params();
  const std::vector<float> master =
      workloads::has_separate_master(precision) ? s.gather_master_params() : std::vector<float>{};
  const std::vector<float> grad = s.gather_gradient();
  const std::vector<float> m = s.gather_moment(false);
  const std::vector<float> v = s.gather_moment(true);
  auto f32 = [](const std::vector<float>& x) {
    return ConstTensorView(x.data(), Shape{static_cast<std::int64_t>(x.size())}, DType::f32);
  };
  // The working parameters in their own dtype: bf16 values were widened exactly, so narrowing is exact.
  std::vector<bf16> narrow;
  ConstTensorView pview = f32(param);
  if (workloads::param_dtype(precision) == DType::bf16) {
    narrow.resize(param.size());
    kernels::cast(TensorView(narrow.data(), pview.shape(), DType::bf16), pview, StreamRef::host());
    pview = ConstTensorView(narrow.data(), pview.shape(), DType::bf16);
  }
  visit_component(layout, "param", pview, groups, root, visitor);
  if (!master.empty()) visit_component(layout, "master", f32(master), groups, root, visitor);
  visit_component(layout, "grad", f32(grad), groups, root, visitor);
  visit_component(layout, "m", f32(m), groups, root, visitor);
  visit_component(layout, "v", f32(v), groups, root, visitor);
}

}  // namespace hzp::schedulers
