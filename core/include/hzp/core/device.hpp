// Device identity (CPU or one CUDA device) and queries about what this build and machine offer.
#pragma once

#include <cstdint>
#include <string>

namespace hzp {

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static constexpr Device cpu() noexcept { return {DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int i) noexcept { return {DeviceKind::cuda, i}; }
  constexpr bool is_cpu() const noexcept { return kind == DeviceKind::cpu; }
  constexpr bool is_cuda() const noexcept { return kind == DeviceKind::cuda; }
  friend constexpr bool operator==(Device, Device) = default;
};

std::string to_string(Device d);

/// Whether this build has the CUDA backend compiled in.
bool cuda_compiled() noexcept;
/// Number of usable CUDA devices: 0 when CUDA is not compiled in, no driver is present or the
/// runtime reports any error (without a GPU the runtime returns cudaErrorInsufficientDriver).
int cuda_device_count() noexcept;
/// CUDA runtime version as "major.minor", or "none".
std::string cuda_runtime_version();
/// Name of CUDA device i, or "" when unavailable.
std::string cuda_device_name(int i);
/// CPU model string from /proc/cpuinfo ("unknown" when absent).
std::string cpu_model_name();
/// Makes `d` the calling thread's current CUDA device (a no-op for the CPU). CUDA's current device is per
/// thread: a thread other than the one that opened the device (asynchzp's background threads) must call it
/// before it launches work on that device's streams.
void make_device_current(Device d);

}  // namespace hzp
