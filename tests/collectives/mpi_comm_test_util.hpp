// Helpers shared by the MPI backend's tests: building a world communicator (machine nodes or
// virtual nodes), exactly representable input values, typed buffers of fp32/bf16, and the expected
// ring/tree hop levels computed from the group shape alone (never from the library's model).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/shared_buffer.hpp"
#include "hzp/collectives/topology.hpp"
#include "hzp/collectives/topology_mpi.hpp"
#include "hzp/core/clock.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/core/tensor.hpp"
#include "mpi_test.hpp"

namespace hzp::coll::test {

/// A config for tests: a deadline well below the CTest timeout, so a hang fails with a message.
inline MpiCommConfig test_config() {
  MpiCommConfig c;
  c.timeout_s = 60;
  return c;
}

/// World communicator over MPI_COMM_WORLD: machine nodes (ranks_per_node = 0) or virtual nodes.
inline std::unique_ptr<MpiCommunicator> make_world(const MpiCommConfig& config, int ranks_per_node = 0,
                                                   std::string name = "world") {
  if (ranks_per_node > 0) {
    const Topology topo = Topology::virtual_nodes(hzp::test::world_size(), ranks_per_node, hzp::test::world_rank());
    return make_mpi_world(topo, config, MPI_COMM_WORLD, std::move(name));
  }
  // Discovered once per process: its blocking MPI calls cost ~0.3 s at 8 ranks on 2 cores. The
  // first make_world is collective on every rank alike, so the static is initialised in step.
  static const Topology machine = discover_topology(MPI_COMM_WORLD, 0);
  return make_mpi_world(machine, config, MPI_COMM_WORLD, std::move(name));
}

/// Where a Buffer's bytes live: private memory, or a SharedBuffer (machine peers map it: mapped messages).
enum class Memory { plain, shared };

/// A host buffer of n elements of fp32 or bf16, filled from float values (exactly representable
/// in bf16 when the tests choose them so), read back as floats or raw bits.
class Buffer {
 public:
  Buffer(DType dtype, std::int64_t n, Memory memory = Memory::plain)
      : dtype_(dtype), n_(n), bytes_(static_cast<std::size_t>(n) * dtype_size(dtype)) {
    if (memory == Memory::shared) {
      shared_ = SharedBuffer::allocate(bytes_ + 1);  // zeroed
      data_ptr_ = shared_.data();
    } else {
      data_.assign(bytes_ + 1, std::byte{0});  // +1: a valid pointer even when empty
      data_ptr_ = data_.data();
    }
  }
  template <typename F>
  void fill(F&& value_of_index) {
    for (std::int64_t i = 0; i < n_; ++i) set(i, static_cast<float>(value_of_index(i)));
  }
  void set(std::int64_t i, float v) {
    if (dtype_ == DType::f32) {
      std::memcpy(data_ptr_ + 4 * i, &v, 4);
    } else {
      const bf16 b = bf16::from_float(v);
      std::memcpy(data_ptr_ + 2 * i, &b.bits, 2);
    }
  }
  float get(std::int64_t i) const {
    if (dtype_ == DType::f32) {
      float v;
      std::memcpy(&v, data_ptr_ + 4 * i, 4);
      return v;
    }
    bf16 b;
    std::memcpy(&b.bits, data_ptr_ + 2 * i, 2);
    return b.to_float();
  }
  /// Raw bits of element i (bitwise comparisons).
  std::uint32_t bits(std::int64_t i) const {
    std::uint32_t u = 0;
    std::memcpy(&u, data_ptr_ + dtype_size(dtype_) * i, dtype_size(dtype_));
    return u;
  }
  TensorView view() { return TensorView(data_ptr_, Shape{n_}, dtype_); }
  ConstTensorView cview() const { return ConstTensorView(data_ptr_, Shape{n_}, dtype_); }
  TensorView slice(std::int64_t offset, std::int64_t n) {
    return TensorView(data_ptr_ + dtype_size(dtype_) * offset, Shape{n}, dtype_);
  }
  std::int64_t size() const { return n_; }
  DType dtype() const { return dtype_; }

 private:
  DType dtype_;
  std::int64_t n_;
  std::size_t bytes_;
  std::vector<std::byte> data_;
  SharedBuffer shared_;
  std::byte* data_ptr_ = nullptr;  // into data_ or shared_
};

/// The float an exact expected value has after storing it as `dtype` (one rounding for bf16).
inline float stored(DType dtype, double exact) {
  return dtype == DType::bf16 ? bf16::from_float(static_cast<float>(exact)).to_float() : static_cast<float>(exact);
}

/// Node of world rank r for virtual nodes of `rpn` ranks (0 = one machine node for all).
inline int vnode(int r, int rpn) { return rpn > 0 ? r / rpn : 0; }

}  // namespace hzp::coll::test
