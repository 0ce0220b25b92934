// scheduler.tied_split's rows (tied_rows.hpp): which table, the refusals, the message, its owners and its exchange
// (all-to-all-v to the owners, or all-gather).
#include "asynchzp/tied_rows.hpp"

#include <algorithm>
#include <cstring>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/common/engine_memory.hpp"

namespace hzp::schedulers {

const char* tied_split_name(TiedSplit mode) { return name_of(SchedulerOptions::kTiedSplitNames, mode).data(); }

TiedTable tied_split_table(const workloads::ParamLayout& layout, const ParallelDims& dims, bool on_gpu, TiedSplit mode) {
  const char* name = tied_split_name(mode);
  // Context parallelism needs nothing apart: a cp rank's lookup writes the rows of its own tokens, and the rows'
  // group is the ranks whose gradients the table sums, data × context. Stages do: see the message.
  if (dims.pp > 1)
    HZP_THROW(ConfigError, "asynchzp: scheduler.tied_split = ", name, " with scheduler.pp = ", dims.pp,
              ": with stages the table's two writers are on two stages (each stage's copy has one writer) and the two "
              "copies' slices are added whole by the embedding group's all-reduce before the norm, at the step's "
              "end, which a split cannot move. Fix: scheduler.tied_split = off, or scheduler.pp = 1");
  if (on_gpu)
    HZP_THROW(ConfigError, "asynchzp: scheduler.tied_split = ", name, " on a GPU: the last micro-batch's rows are "
              "read on the host, built for the CPU backend only. Fix: scheduler.tied_split = off, or backend = cpu");
  for (int u = 0; u < layout.num_units(); ++u) {
    const std::vector<int> writers = layout.grad_writers(u);
    if (writers.size() != 2 || writers.back() != u) continue;
    const workloads::Unit& unit = layout.unit(u);
    if (unit.tensors.size() != 1 || unit.tensors[0].shape.ndim != 2 || unit.tensors[0].shard.sharded()) continue;
    return TiedTable{u, writers.front(), unit.tensors[0].shape[0], unit.tensors[0].shape[1]};
  }
  HZP_THROW(ConfigError, "asynchzp: scheduler.tied_split = ", name, " but the model has no tied table (one [rows, "
            "width] tensor that one other unit also writes). Fix: model.tied_embeddings = true, or "
            "scheduler.tied_split = off");
}

std::vector<TiedOwner> tied_owners(const TiedTable& table, std::int64_t table_offset, const Segments& seg,
                                   const NestedGroups& g) {
  std::vector<std::vector<int>> holders(static_cast<std::size_t>(g.z1()));
  for (int q = 0; q < g.world(); ++q) holders[static_cast<std::size_t>(g.opt_index(q))].push_back(q);
  std::vector<TiedOwner> out;
  for (int s = seg.first(table.unit); s < seg.end(table.unit); ++s)
    for (int o = 0; o < g.z1(); ++o) {
      const ShardLayout::Range r = seg.l1.valid_range(s, o);
      const std::int64_t begin = seg.l1.global_offset(s) - table_offset + r.begin;
      if (r.count > 0) out.push_back({begin, begin + r.count, holders[static_cast<std::size_t>(o)]});
    }
  std::sort(out.begin(), out.end(), [](const TiedOwner& a, const TiedOwner& b) { return a.begin < b.begin; });
  return out;
}

void declare_tied_rows(CollectiveLedger& out, const PlanGroup& group, const TiedTable& table, std::int64_t slots,
                       DType wire, TiedSplit mode, int z1) {
  const auto w = static_cast<std::int64_t>(group.members.size());
  if (w < 2) return;
  if (mode == TiedSplit::rows_allgather) {
    out.all_gather(group, slots, DType::i32, 1, "per step (tied table: the last micro-batch's row ids)");
    out.all_gather(group, slots * table.width, wire, 1, "per step (tied table: the last micro-batch's rows)");
    return;
  }
  // Each of `slots` distinct rows goes to the w/z1 ranks holding its optimizer slice, the owner uniform.
  const std::int64_t rows = slots * (w / z1);
  out.all_to_all(group, coll::CollOp::all_to_all, w, DType::i64, 1, "per step (tied table: rows per owner)");
  out.all_to_all(group, coll::CollOp::all_to_allv, rows, DType::i32, 1,
                 "per step (tied table: the last micro-batch's row ids to their owners; expectation: uniform owners)");
  out.all_to_all(group, coll::CollOp::all_to_allv, rows * table.width, wire, 1,
                 "per step (tied table: the last micro-batch's rows to their owners; expectation: uniform owners)");
}

TiedRows::TiedRows(TiedTable table, std::int64_t slots, coll::Communicator& group, CachingAllocator& alloc,
                   TiedSplit mode, std::vector<TiedOwner> owners)
    : table_(table), slots_(slots), group_(&group), mode_(mode), owners_(std::move(owners)),
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
  if (group_->size() > 1 && mode_ == TiedSplit::rows_alltoall) return to_owners(mine, add);
  if (group_->size() > 1) return gather(mine, add);
  // One rank's rows are its own message: nothing to exchange.
  const std::int64_t d = table_.width, vb = static_cast<std::int64_t>(dtype_size(mine.dtype));
  for (std::int64_t i = 0; i < slots_; ++i)
    if (mine.ids[static_cast<std::size_t>(i)] >= 0)
      add(static_cast<std::int64_t>(mine.ids[static_cast<std::size_t>(i)]) * d, mine.values.data() + i * d * vb);
}

void TiedRows::gather(const Message& mine, const AddRow& add) {
  const int w = group_->size();
  const std::int64_t d = table_.width, vb = static_cast<std::int64_t>(dtype_size(mine.dtype));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(slots_ * w));
  std::vector<std::byte> values(static_cast<std::size_t>(slots_ * d * vb * w));
  group_->all_gather(ConstTensorView(mine.ids.data(), Shape{slots_}, DType::i32),
                     TensorView(ids.data(), Shape{slots_ * w}, DType::i32), StreamRef::host());
  group_->all_gather(ConstTensorView(mine.values.data(), Shape{slots_ * d}, mine.dtype),
                     TensorView(values.data(), Shape{slots_ * d * w}, mine.dtype), StreamRef::host());
  for (std::int64_t i = 0; i < slots_ * w; ++i)
    if (ids[static_cast<std::size_t>(i)] >= 0)
      add(static_cast<std::int64_t>(ids[static_cast<std::size_t>(i)]) * d, values.data() + i * d * vb);
}

void TiedRows::to_owners(const Message& mine, const AddRow& add) {
  const int w = group_->size();
  const std::int64_t d = table_.width, vb = static_cast<std::int64_t>(dtype_size(mine.dtype));
  // The slots each rank is sent, in slot order: a row goes to every rank holding any of its elements (whole: a
  // row across a slice boundary costs one row more, and the receiver's add already takes only its own part).
  std::vector<std::vector<std::int64_t>> to(static_cast<std::size_t>(w));
  for (std::int64_t i = 0; i < slots_; ++i) {
    const std::int32_t id = mine.ids[static_cast<std::size_t>(i)];
    if (id < 0) continue;
    const std::int64_t first = static_cast<std::int64_t>(id) * d, end = first + d;
    auto o = std::partition_point(owners_.begin(), owners_.end(), [&](const TiedOwner& x) { return x.end <= first; });
    for (; o != owners_.end() && o->begin < end; ++o)
      for (int q : o->ranks) {
        std::vector<std::int64_t>& slots = to[static_cast<std::size_t>(q)];
        if (slots.empty() || slots.back() != i) slots.push_back(i);
      }
  }
  std::vector<std::int64_t> send(static_cast<std::size_t>(w)), recv(static_cast<std::size_t>(w));
  std::int64_t sent = 0;
  for (std::size_t q = 0; q < to.size(); ++q) {
    send[q] = static_cast<std::int64_t>(to[q].size());
    sent += send[q];
  }
  group_->all_to_all(ConstTensorView(send.data(), Shape{w}, DType::i64), TensorView(recv.data(), Shape{w}, DType::i64),
                     StreamRef::host());
  std::int64_t received = 0;
  for (std::int64_t n : recv) received += n;
  std::vector<std::int32_t> ids_out, ids_in(static_cast<std::size_t>(received));
  std::vector<std::byte> values_out(static_cast<std::size_t>(sent * d * vb)),
      values_in(static_cast<std::size_t>(received * d * vb));
  ids_out.reserve(static_cast<std::size_t>(sent));
  for (const std::vector<std::int64_t>& slots : to)
    for (std::int64_t i : slots) {
      std::memcpy(values_out.data() + static_cast<std::int64_t>(ids_out.size()) * d * vb,
                  mine.values.data() + i * d * vb, static_cast<std::size_t>(d * vb));
      ids_out.push_back(mine.ids[static_cast<std::size_t>(i)]);
    }
  std::vector<std::int64_t> send_values(send), recv_values(recv);
  for (std::int64_t& n : send_values) n *= d;
  for (std::int64_t& n : recv_values) n *= d;
  group_->start_all_to_allv(ConstTensorView(ids_out.data(), Shape{sent}, DType::i32), send,
                            TensorView(ids_in.data(), Shape{received}, DType::i32), recv, StreamRef::host()).wait();
  group_->start_all_to_allv(ConstTensorView(values_out.data(), Shape{sent * d}, mine.dtype), send_values,
                            TensorView(values_in.data(), Shape{received * d}, mine.dtype), recv_values,
                            StreamRef::host()).wait();
  for (std::int64_t i = 0; i < received; ++i)
    add(static_cast<std::int64_t>(ids_in[static_cast<std::size_t>(i)]) * d, values_in.data() + i * d * vb);
}

}  // namespace hzp::schedulers
