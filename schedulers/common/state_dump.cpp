// visit_flat_component and visit_gathered_state (state_dump.hpp).
#include "hzp/schedulers/common/state_dump.hpp"

#include <vector>

#include "hzp/core/dtype.hpp"
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

void visit_gathered_state(DataParallelScheduler& s, const workloads::ParamLayout& layout,
                          workloads::Precision precision, bool root, StateVisitor& visitor) {
  // Every rank takes part in every gather, in the same order; only the root hands tensors over.
  const std::vector<float> param = s.gather_working_params();
  const std::vector<float> master =
      workloads::has_separate_master(precision) ? s.gather_master_params() : std::vector<float>{};
  const std::vector<float> grad = s.gather_gradient();
  const std::vector<float> m = s.gather_moment(false);
  const std::vector<float> v = s.gather_moment(true);
  if (!root) return;
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
  visit_flat_component(layout, "param", pview, visitor);
  if (!master.empty()) visit_flat_component(layout, "master", f32(master), visitor);
  visit_flat_component(layout, "grad", f32(grad), visitor);
  visit_flat_component(layout, "m", f32(m), visitor);
  visit_flat_component(layout, "v", f32(v), visitor);
}

}  // namespace hzp::schedulers
