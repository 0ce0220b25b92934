// Device-side helpers for the GPU tests: one device (cuda:0) with a caching allocator over CudaBacking
// and a stream, uploads of host vectors into device tensors, and downloads back (which synchronise the
// stream). Everything a GPU test compares is brought back to the host first.
#pragma once

#include <vector>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::test {

struct DeviceTensor {
  Allocation mem;
  TensorView view;
};

class Gpu {
 public:
  Gpu() : backing_(0), alloc_(backing_), stream_(Device::cuda(0)) {}
  StreamRef stream() const { return stream_.ref(); }
  CachingAllocator& allocator() { return alloc_; }
  Device device() const { return Device::cuda(0); }

  DeviceTensor empty(Shape s, DType t, AllocationTag tag = AllocationTag::other) {
    DeviceTensor d;
    d.mem = alloc_.allocate(static_cast<std::size_t>(s.numel()) * dtype_size(t), tag);
    d.view = TensorView(d.mem.data(), s, t, device());
    return d;
  }
  template <typename T>
  DeviceTensor upload(const std::vector<T>& v, Shape s) {
    HZP_CHECK(static_cast<std::size_t>(s.numel()) == v.size(), "upload: shape ", to_string(s), " vs ", v.size());
    DeviceTensor d = empty(s, dtype_of_v<T>);
    copy_bytes(d.view.data(), device(), v.data(), Device::cpu(), d.view.bytes(), stream());
    stream_.ref().synchronize();  // the host vector may die right after
    return d;
  }
  template <typename T>
  std::vector<T> download(ConstTensorView v) {
    HZP_CHECK(v.dtype() == dtype_of_v<T>, "download: dtype ", dtype_name(v.dtype()));
    std::vector<T> out(static_cast<std::size_t>(v.numel()));
    copy_bytes(out.data(), Device::cpu(), v.data(), device(), v.bytes(), stream());
    stream_.ref().synchronize();
    return out;
  }

 private:
  CudaBacking backing_;
  CachingAllocator alloc_;
  Stream stream_;
};

}  // namespace hzp::test
