// Checkpoint state shared by the schedulers (common/checkpoint_state.hpp, state_archive.hpp): the interface's
// default refusal, device buffers staged through the host, the optimizer slice's arrays (ShardedOptimizer::checkpoint),
// deterministic mode's scale state (FixedPointGrads::saved_state) and the model's non-gradient state. Kept in one
// file apart from the schedulers' step code.
#include "hzp/schedulers/common/checkpoint_state.hpp"

#include <cstring>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/cast.hpp"
#include "hzp/schedulers/common/sharded_optimizer.hpp"
#include "hzp/schedulers/scheduler.hpp"

namespace hzp::schedulers {

void Scheduler::checkpoint(StateArchive& archive) {
  (void)archive;
  HZP_THROW(UnsupportedError, "scheduler ", name(), " cannot write or read checkpoints yet. Fix: "
            "output.checkpoint_every = 0 (and no --resume), or one of none, ddp, zero1, zero2, zero3, hsdp, asynchzp, nd");
}

// ---- deterministic mode's scales -------------------------------------------------------------------------------
// [step, have_accepted, retries, exponents..., accepted maxima...]: every value an integer or a maximum that a
// double holds exactly, so the next step picks the same exponents as a run that never stopped.
std::vector<double> FixedPointGrads::saved_state() const {
  std::vector<double> s = {static_cast<double>(step_), have_accepted_ ? 1.0 : 0.0, static_cast<double>(retries_)};
  for (int e : exponents_) s.push_back(e);
  s.insert(s.end(), accepted_max_.begin(), accepted_max_.end());
  return s;
}

void FixedPointGrads::restore_state(std::span<const double> s) {
  const std::size_t t = exponents_.size();
  if (s.size() != 3 + 2 * t)
    HZP_THROW(DataError, "deterministic.scales holds ", s.size(), " numbers but this model's ", t,
              " tensors need ", 3 + 2 * t, " (a checkpoint of another model or without train.deterministic)");
  step_ = static_cast<std::int64_t>(s[0]);
  have_accepted_ = s[1] != 0;
  retries_ = static_cast<std::int64_t>(s[2]);
  for (std::size_t i = 0; i < t; ++i) exponents_[i] = static_cast<int>(s[3 + i]);
  accepted_max_.assign(s.begin() + static_cast<std::ptrdiff_t>(3 + t), s.end());
}

// ---- device buffers through the host --------------------------------------------------------------------------
void device_array(StateArchive& archive, std::string_view component, DType dtype, std::span<const StateArchive::Run> runs,
                  void* base, std::int64_t numel, Device device, StreamRef stream) {
  if (device.is_cpu()) {
    archive.array(component, dtype, runs, base);
    return;
  }
  // The archive packs and unpacks with memcpy: it gets a host copy of the whole buffer. Loading copies the buffer
  // down first too, so that the elements no run names (padding) go back up unchanged.
  const std::size_t bytes = static_cast<std::size_t>(numel) * dtype_size(dtype);
  std::vector<std::byte> host(bytes);
  if (bytes > 0) copy_bytes(host.data(), Device::cpu(), base, device, bytes, stream);
  stream.synchronize();
  archive.array(component, dtype, runs, host.data());
  if (!archive.loading() || bytes == 0) return;
  copy_bytes(base, device, host.data(), Device::cpu(), bytes, stream);
  stream.synchronize();  // `host` dies here
}

// ---- the optimizer slice ---------------------------------------------------------------------------------------
void ShardedOptimizer::checkpoint(StateArchive& archive, std::span<const ShardLayout::FlatSliceRun> runs, bool writer) {
  const bool load = archive.loading();
  const std::span<const ShardLayout::FlatSliceRun> mine = load || writer ? runs : std::span<const ShardLayout::FlatSliceRun>{};
  const Device dev = alloc_->device();
  if (master_) {
    device_array(archive, "master", DType::f32, mine, master_.data(), numel_, dev, stream_);
  } else {
    // fp32 keeps no separate master: the pieces are it, staged contiguously on the host so the runs' local offsets
    // apply (and copied back when loading).
    std::vector<float> staged(static_cast<std::size_t>(numel_), 0.0f);
    std::int64_t off = 0;
    for (const TensorView& p : pieces_) {
      if (p.numel() > 0) copy_bytes(staged.data() + off, Device::cpu(), p.data(), dev, p.bytes(), stream_);
      off += p.numel();
    }
    stream_.synchronize();
    archive.array("master", DType::f32, mine, staged.data());
    if (load) {
      off = 0;
      for (const TensorView& p : pieces_) {
        if (p.numel() > 0) copy_bytes(p.data(), dev, staged.data() + off, Device::cpu(), p.bytes(), stream_);
        off += p.numel();
      }
      stream_.synchronize();  // `staged` dies here
    }
  }
  device_array(archive, "m", DType::f32, mine, m_.data(), numel_, dev, stream_);
  device_array(archive, "v", DType::f32, mine, v_.data(), numel_, dev, stream_);
  if (!load || !master_) return;
  // The working pieces from the master, as the constructor and every update write them (bf16 rounds once).
  std::int64_t off = 0;
  for (const TensorView& p : pieces_) {
    if (p.numel() > 0) kernels::cast(p, f32(master_, off, p.numel()), stream_);
    off += p.numel();
  }
  stream_.synchronize();
}

// ---- beside the arrays -----------------------------------------------------------------------------------------
void checkpoint_side_state(StateArchive& archive, const workloads::Workload& model, FixedPointGrads* fixed,
                           coll::Communicator* stages) {
  std::vector<double> model_state = archive.loading() ? std::vector<double>{} : model.checkpoint_state();
  // Each stage's list holds its own units' part and 0 elsewhere: the sum is exact, and the whole model's.
  if (!archive.loading() && stages != nullptr && stages->size() > 1 && !model_state.empty())
    stages->all_reduce(TensorView(model_state.data(), Shape{static_cast<std::int64_t>(model_state.size())}, DType::f64),
                       coll::ReduceOp::sum, StreamRef::host());
  archive.numbers("model.state", model_state);
  if (archive.loading()) model.restore_checkpoint_state(model_state);
  if (fixed != nullptr) {
    std::vector<double> scales = archive.loading() ? std::vector<double>{} : fixed->saved_state();
    archive.numbers("deterministic.scales", scales);
    // A checkpoint of a run without deterministic mode has none: its first step starts from step 0's exponents
    // (its numerics differ from a deterministic run's anyway).
    if (archive.loading() && !scales.empty()) fixed->restore_state(scales);
  }
}

std::vector<StateArchive::Run> whole_model_runs(std::int64_t numel) {
  return {StateArchive::Run{.global = 0, .local = 0, .count = numel}};
}

}  // namespace hzp::schedulers
