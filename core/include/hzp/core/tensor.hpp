// Non-owning tensor views: a pointer, a shape (up to 4 dims, row-major contiguous), a dtype and a
// device. Memory is owned elsewhere (allocator blocks, pools, flat parameter buffers).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "hzp/core/device.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/core/error.hpp"

namespace hzp {

inline constexpr int kMaxDims = 4;

struct Shape {
  std::array<std::int64_t, kMaxDims> dims{};
  int ndim = 0;

  constexpr Shape() = default;
  Shape(std::initializer_list<std::int64_t> d) {
    HZP_CHECK(d.size() <= kMaxDims, "shape has ", d.size(), " dims, at most ", kMaxDims, " supported");
    for (auto v : d) {
      HZP_CHECK(v >= 0, "negative dimension ", v, " in shape");
      dims[ndim++] = v;
    }
  }
  constexpr std::int64_t operator[](int i) const { return dims[i]; }
  constexpr std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= dims[i];
    return n;
  }
  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    if (a.ndim != b.ndim) return false;
    for (int i = 0; i < a.ndim; ++i)
      if (a.dims[i] != b.dims[i]) return false;
    return true;
  }
};

std::string to_string(const Shape& s);  // "[2, 64, 16]"

template <bool IsConst>
class BasicTensorView {
 public:
  using pointer = std::conditional_t<IsConst, const void*, void*>;

  constexpr BasicTensorView() = default;
  BasicTensorView(pointer data, Shape shape, DType dtype, Device device = Device::cpu())
      : data_(data), shape_(shape), dtype_(dtype), device_(device) {}
  /// A mutable view converts to a const view, never the reverse.
  template <bool C = IsConst, typename = std::enable_if_t<C>>
  BasicTensorView(const BasicTensorView<false>& v)  // NOLINT(google-explicit-constructor)
      : data_(v.data()), shape_(v.shape()), dtype_(v.dtype()), device_(v.device()) {}

  pointer data() const noexcept { return data_; }
  const Shape& shape() const noexcept { return shape_; }
  DType dtype() const noexcept { return dtype_; }
  Device device() const noexcept { return device_; }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }

  /// Typed access; throws when T does not match the view's dtype.
  template <typename T>
  auto as() const -> std::conditional_t<IsConst, const T*, T*> {
    HZP_CHECK(dtype_of_v<std::remove_const_t<T>> == dtype_, "tensor holds ", dtype_name(dtype_),
              ", accessed as ", dtype_name(dtype_of_v<std::remove_const_t<T>>));
    return static_cast<std::conditional_t<IsConst, const T*, T*>>(data_);
  }

 private:
  pointer data_ = nullptr;
  Shape shape_{};
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
};

using TensorView = BasicTensorView<false>;
using ConstTensorView = BasicTensorView<true>;

}  // namespace hzp
