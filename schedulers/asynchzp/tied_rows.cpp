// scheduler.tied_split's rows (tied_rows.hpp): which table, the refusals, the message and its all-gather.
#include "asynchzp/tied_rows.hpp"

#include <algorithm>
#include <cstring>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"

namespace hzp::schedulers {

TiedTable tied_split_table(const workloads::ParamLayout& layout, const ParallelDims& dims, bool on_gpu) {
  if (dims.pp > 1 || dims.cp > 1)
    HZP_THROW(ConfigError, "asynchzp: scheduler.tied_split = true with scheduler.pp = ", dims.pp, " and scheduler.cp = ",
              dims.cp, ": the split is built for one stage holding whole sequences (with stages the table's two "
              "writers are on two stages; with cp a sequence's tokens are on several ranks). Fix: "
              "scheduler.tied_split = false, or pp = cp = 1");
  if (on_gpu)
    HZP_THROW(ConfigError, "asynchzp: scheduler.tied_split = true on a GPU: the last micro-batch's rows are read on "
              "the host, built for the CPU backend only. Fix: scheduler.tied_split = false, or backend = cpu");
  for (int u = 0; u < layout.num_units(); ++u) {
    const std::vector<int> writers = layout.grad_writers(u);
    if (writers.size() != 2 || writers.back() != u) continue;
    const workloads::Unit& unit = layout.unit(u);
    if (unit.tensors.size() != 1 || unit.tensors[0].shape.ndim != 2 || unit.tensors[0].shard.sharded()) continue;
    return TiedTable{u, writers.front(), unit.tensors[0].shape[0], unit.tensors[0].shape[1]};
  }
  HZP_THROW(ConfigError, "asynchzp: scheduler.tied_split = true but the model has no tied table (one [rows, width] "
            "tensor that one other unit also writes). Fix: model.tied_embeddings = true, or scheduler.tied_split = "
            "false");
}

void declare_tied_rows(CollectiveLedger& out, const PlanGroup& group, const TiedTable& table, std::int64_t slots,
                       DType wire) {
  if (group.members.size() < 2) return;
  out.all_gather(group, slots, DType::i32, 1, "per step (tied table: the last micro-batch's row ids)");
  out.all_gather(group, slots * table.width, wire, 1, "per step (tied table: the last micro-batch's rows)");
}

TiedRows::TiedRows(TiedTable table, std::int64_t slots, coll::Communicator& group, CachingAllocator& alloc)
    : table_(table), slots_(slots), group_(&group),
      lookup_(zeroed_on(alloc, table.rows * table.width, DType::f32, AllocationTag::grad, StreamRef::host())) {}

TensorView TiedRows::lookup_grad() const {
  return TensorView(lookup_.data(), Shape{table_.rows * table_.width}, DType::f32);
}

void TiedRows::set_tokens(std::span<const std::int32_t> inputs) {
  rows_.assign(inputs.begin(), inputs.end());
  std::sort(rows_.begin(), rows_.end());
  rows_.erase(std::unique(rows_.begin(), rows_.end()), rows_.end());
  HZP_CHECK(static_cast<std::int64_t>(rows_.size()) <= slots_ && (rows_.empty() || (rows_.front() >= 0 &&
                rows_.back() < table_.rows)),
            "tied rows: ", rows_.size(), " distinct tokens for ", slots_, " slots, ids in [",
            rows_.empty() ? 0 : rows_.front(), ", ", rows_.empty() ? 0 : rows_.back(), "] of ", table_.rows, " rows");
}

TiedRows::Message TiedRows::take(FixedPointGrads* fixed) {
  const std::int64_t d = table_.width;
  Message m;
  m.dtype = fixed ? DType::i64 : DType::f32;
  m.ids.assign(static_cast<std::size_t>(slots_), -1);
  m.values.assign(static_cast<std::size_t>(slots_ * d) * dtype_size(m.dtype), std::byte{0});
  auto* grad = static_cast<float*>(lookup_.data());
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const std::int64_t first = static_cast<std::int64_t>(rows_[i]) * d;
    m.ids[i] = rows_[i];
    std::byte* out = m.values.data() + static_cast<std::size_t>(static_cast<std::int64_t>(i) * d) * dtype_size(m.dtype);
    if (fixed)
      fixed->to_fixed_at(table_.unit, first, ConstTensorView(grad + first, Shape{d}, DType::f32),
                         TensorView(out, Shape{d}, DType::i64));
    else
      std::memcpy(out, grad + first, static_cast<std::size_t>(d) * sizeof(float));
    std::fill(grad + first, grad + first + d, 0.0f);  // the buffer is zero again for the next step
  }
  return m;
}

void TiedRows::exchange(const Message& mine, const AddRow& add) {
  const int w = group_->size();
  const std::int64_t d = table_.width, vb = static_cast<std::int64_t>(dtype_size(mine.dtype));
  // One rank's rows are its own message: gathered only where there are others (the gather would copy them in).
  std::vector<std::int32_t> gathered_ids;
  std::vector<std::byte> gathered_values;
  if (w > 1) {
    gathered_ids.resize(static_cast<std::size_t>(slots_ * w));
    gathered_values.resize(static_cast<std::size_t>(slots_ * d * vb * w));
    group_->all_gather(ConstTensorView(mine.ids.data(), Shape{slots_}, DType::i32),
                       TensorView(gathered_ids.data(), Shape{slots_ * w}, DType::i32), StreamRef::host());
    group_->all_gather(ConstTensorView(mine.values.data(), Shape{slots_ * d}, mine.dtype),
                       TensorView(gathered_values.data(), Shape{slots_ * d * w}, mine.dtype), StreamRef::host());
  }
  const std::vector<std::int32_t>& ids = w > 1 ? gathered_ids : mine.ids;
  const std::vector<std::byte>& values = w > 1 ? gathered_values : mine.values;
  for (std::int64_t i = 0; i < slots_ * w; ++i)
    if (ids[static_cast<std::size_t>(i)] >= 0)
      add(static_cast<std::int64_t>(ids[static_cast<std::size_t>(i)]) * d, values.data() + i * d * vb);
}

}  // namespace hzp::schedulers
