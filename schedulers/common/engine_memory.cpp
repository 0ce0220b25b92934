// engine_memory.hpp: zeroed buffers and device-carrying views for the parameter engines, host copies of device
// state, and scratch held until a stream has passed it.
#include "hzp/schedulers/common/engine_memory.hpp"

#include <cstring>

#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/error.hpp"

namespace hzp::schedulers {

Allocation zeroed_on(CachingAllocator& alloc, std::int64_t n, DType t, AllocationTag tag, StreamRef s) {
  const std::size_t bytes = static_cast<std::size_t>(n) * dtype_size(t);
  Allocation a = alloc.allocate(bytes, tag);
  if (a && bytes > 0) zero_bytes(a.data(), bytes, s);
  return a;
}

TensorView view_at(const Allocation& a, DType t, std::int64_t offset, std::int64_t n, Device device) {
  return TensorView(static_cast<std::byte*>(a.data()) + offset * static_cast<std::int64_t>(dtype_size(t)), Shape{n}, t,
                    device);
}

std::vector<std::byte> host_copy(ConstTensorView v, StreamRef s) {
  std::vector<std::byte> out(v.bytes());
  if (v.bytes() == 0) return out;
  if (v.device().is_cpu()) {
    std::memcpy(out.data(), v.data(), v.bytes());
    return out;
  }
  copy_bytes(out.data(), Device::cpu(), v.data(), v.device(), v.bytes(), s);
  s.synchronize();
  return out;
}

std::vector<float> host_floats(ConstTensorView v, StreamRef s) {
  HZP_CHECK(v.dtype() == DType::f32, "host_floats: a ", dtype_name(v.dtype()), " view");
  const std::vector<std::byte> b = host_copy(v, s);
  std::vector<float> out(static_cast<std::size_t>(v.numel()));
  if (!b.empty()) std::memcpy(out.data(), b.data(), b.size());
  return out;
}

void StreamScratch::keep(Allocation a) {
  if (!a) return;
  collect();
  if (stream_.device().is_cpu()) return;  // `a` is freed here: host work has already run
  Event done(stream_.device());
  done.record(stream_);
  kept_.emplace_back(std::move(done), std::move(a));
}

void StreamScratch::collect() {
  while (!kept_.empty() && kept_.front().first.query()) kept_.pop_front();  // recorded in stream order
}

void StreamScratch::drain() noexcept {
  if (kept_.empty()) return;
  try {
    stream_.synchronize();
  } catch (...) {
    // A failed device: the memory goes back regardless (the allocator's owner is being torn down with it).
  }
  kept_.clear();
}

}  // namespace hzp::schedulers
