// HostBacking: alignment, identity, refusal of zero bytes; the byte formatter the memory errors rely
// on; and CudaBacking's error where no device is usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include <string>

#include "hzp/core/cuda_backing.hpp"
#include "hzp/core/device.hpp"
#include "hzp/core/memory_backing.hpp"

namespace hzp {
namespace {

TEST(HostBacking, SegmentsAreAlignedAndWritable) {
  HostBacking b;
  EXPECT_EQ(b.alignment(), 256u);
  EXPECT_EQ(b.device(), Device::cpu());
  EXPECT_EQ(b.name(), "host");
  for (std::size_t bytes :
       {std::size_t{1}, std::size_t{256}, std::size_t{1000}, std::size_t{2} << 20}) {
    void* p = b.allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u) << bytes;
    std::memset(p, 0xAB, bytes);
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0xAB);
    b.deallocate(p, bytes);
  }
}

TEST(HostBacking, ZeroBytesIsAPreconditionError) {
  HostBacking b;
  EXPECT_THROW(b.allocate(0), PreconditionError);
}

TEST(FormatBytes, ExactAndReadable) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB (1024 B)");
  EXPECT_EQ(format_bytes(3670016), "3.50 MiB (3670016 B)");
  EXPECT_EQ(format_bytes(std::size_t{5} << 30), "5.00 GiB (5368709120 B)");
}

TEST(RoundUp, Multiples) {
  static_assert(round_up(0, 512) == 0);
  static_assert(round_up(1, 512) == 512);
  static_assert(round_up(512, 512) == 512);
  static_assert(round_up(513, 512) == 1024);
  EXPECT_EQ(round_up(1000, 256), 1024u);
}

// CudaBacking on a machine without a usable device (CI): one clear error at construction, whatever the
// build (the no-CUDA build throws UnsupportedError, a CUDA build without a GPU CudaError).
TEST(CudaBacking, WithoutADeviceConstructionFailsClearly) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: covered by test_cuda_memory";
  try {
    CudaBacking b(0);
    FAIL() << "constructed a CudaBacking without a device";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("CUDA") != std::string::npos) << what;
  }
}

}  // namespace
}  // namespace hzp
