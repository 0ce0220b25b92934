// Allocation tags: which training component a block of memory belongs to, so that memory by
// component (the paper's 2+4+4+4+4 bytes per parameter, activations, communication buffers) is read
// from the allocator's statistics rather than recomputed from formulas that may drift from the
// code.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hzp {

/// The component an allocation serves. `adam_m`/`adam_v` are named "m"/"v" in results files, to
/// match the paper's notation and the results file's (docs/results-schema.md).
enum class AllocationTag : std::uint8_t {
  param,       // working parameters (bf16 in bf16-mixed)
  grad,        // gradients (fp32)
  master,      // fp32 master weights
  adam_m,      // Adam first moment
  adam_v,      // Adam second moment
  activation,  // saved activations and their gradients
  comm,        // communication buffers (the ring pool, bucket staging)
  workspace,   // kernel scratch
  other,
};

inline constexpr std::size_t kNumAllocationTags = 9;

inline constexpr std::array<AllocationTag, kNumAllocationTags> kAllAllocationTags = {
    AllocationTag::param,  AllocationTag::grad,      AllocationTag::master,
    AllocationTag::adam_m, AllocationTag::adam_v,    AllocationTag::activation,
    AllocationTag::comm,   AllocationTag::workspace, AllocationTag::other};

/// Stable names used in statistics and results files.
constexpr std::string_view allocation_tag_name(AllocationTag tag) noexcept {
  switch (tag) {
    case AllocationTag::param:
      return "param";
    case AllocationTag::grad:
      return "grad";
    case AllocationTag::master:
      return "master";
    case AllocationTag::adam_m:
      return "m";
    case AllocationTag::adam_v:
      return "v";
    case AllocationTag::activation:
      return "activation";
    case AllocationTag::comm:
      return "comm";
    case AllocationTag::workspace:
      return "workspace";
    case AllocationTag::other:
      return "other";
  }
  return "unknown";
}

/// Inverse of allocation_tag_name; nullopt for an unknown name.
constexpr std::optional<AllocationTag> allocation_tag_from_name(std::string_view name) noexcept {
  for (AllocationTag t : kAllAllocationTags)
    if (allocation_tag_name(t) == name) return t;
  return std::nullopt;
}

constexpr std::size_t tag_index(AllocationTag tag) noexcept {
  return static_cast<std::size_t>(tag);
}

}  // namespace hzp
