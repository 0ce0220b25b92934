// The names counters record for calls that some other carrier moves (MPI's own collectives, phantom peers) while
// the bytes and the link hold were modelled on one of our algorithms: "native(model: ring)", "phantom(model: ring)".
// One table serves every carrier, so a new algorithm gets its names everywhere at once.
#pragma once

#include <array>
#include <string_view>

namespace hzp::coll::detail {

enum class Carrier { native, phantom };

/// A static name (counter records keep a string_view) saying who carried the call and which algorithm its bytes
/// were modelled on; the bare carrier name for an algorithm the table does not know.
constexpr std::string_view carried_algorithm_name(Carrier carrier, std::string_view modelled) noexcept {
  struct Row {
    std::string_view modelled, native, phantom;
  };
  constexpr std::array<Row, 9> rows{{
      {"ring", "native(model: ring)", "phantom(model: ring)"},
      {"bruck", "native(model: bruck)", "phantom(model: bruck)"},
      {"direct", "native(model: direct)", "phantom(model: direct)"},
      {"recursive_doubling", "native(model: recursive_doubling)", "phantom(model: recursive_doubling)"},
      {"pairwise", "native(model: pairwise)", "phantom(model: pairwise)"},
      {"pairwise_all_at_once", "native(model: pairwise_all_at_once)", "phantom(model: pairwise_all_at_once)"},
      {"binomial_tree", "native(model: binomial_tree)", "phantom(model: binomial_tree)"},
      {"dissemination", "native(model: dissemination)", "phantom(model: dissemination)"},
      {"p2p", "native(model: p2p)", "phantom(model: p2p)"},
  }};
  for (const Row& r : rows)
    if (r.modelled == modelled) return carrier == Carrier::native ? r.native : r.phantom;
  return carrier == Carrier::native ? "native" : "phantom";
}

}  // namespace hzp::coll::detail
