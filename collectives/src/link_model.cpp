// Dry replay of a call's algorithm: who sends how many bytes to whom in each round, without MPI.
// Feeds the link model (every rank's rounds) and the modelled bytes of native collectives (this
// rank's sends), so both come from the same algorithm code that the live engine runs.
#include <vector>

#include "comm_state.hpp"

namespace hzp::coll::detail {
namespace {

/// Records, per round, the sends of rank `me` (and optionally its receives, charged to the sender).
class DryPoster final : public Poster {
 public:
  DryPoster(const CommState& st, int me, std::vector<std::vector<RoundLoad>>& loads, bool receives_too)
      : st_(st), me_(me), loads_(loads), receives_too_(receives_too) {}

  void begin_round(int k) { round_ = k; }
  void send(const void*, std::size_t bytes, int peer) override { add(me_, peer, bytes); }
  void recv(void*, std::size_t bytes, int peer) override {
    if (receives_too_) add(peer, me_, bytes);
  }
  bool dry() const noexcept override { return true; }

  std::array<std::uint64_t, kNumLinkLevels> sent{};

 private:
  void add(int from, int to, std::size_t bytes) {
    auto& rounds = loads_[static_cast<std::size_t>(from)];
    if (rounds.size() <= static_cast<std::size_t>(round_)) rounds.resize(static_cast<std::size_t>(round_) + 1);
    RoundLoad& l = rounds[static_cast<std::size_t>(round_)];
    const bool intra = st_.nodes[static_cast<std::size_t>(from)] == st_.nodes[static_cast<std::size_t>(to)];
    if (intra) {
      l.intra_bytes += bytes;
      ++l.intra_messages;
    } else {
      l.inter_bytes += bytes;
      ++l.inter_messages;
    }
    if (from == me_) sent[intra ? 0 : 1] += bytes;
  }

  const CommState& st_;
  int me_;
  std::vector<std::vector<RoundLoad>>& loads_;
  bool receives_too_;
  int round_ = 0;
};

void replay(Algorithm& alg, DryPoster& poster) {
  for (int k = 0;; ++k) {
    poster.begin_round(k);
    if (!alg.step(k, poster)) break;
  }
}

}  // namespace

CollectiveModel model_call(const CommState& st, const DryFactory& dry, bool all_ranks) {
  std::vector<std::vector<RoundLoad>> loads(static_cast<std::size_t>(st.size));
  if (all_ranks) {
    for (int q = 0; q < st.size; ++q) {
      auto alg = dry(q);
      DryPoster poster(st, q, loads, /*receives_too=*/false);
      replay(*alg, poster);
    }
  } else {
    auto alg = dry(st.rank);
    DryPoster poster(st, st.rank, loads, /*receives_too=*/true);
    replay(*alg, poster);
  }
  return st.world->links->model(loads, st.nodes, st.rank);
}

std::array<std::uint64_t, kNumLinkLevels> replay_bytes(const CommState& st, Algorithm& dry_self) {
  std::vector<std::vector<RoundLoad>> loads(static_cast<std::size_t>(st.size));
  DryPoster poster(st, st.rank, loads, /*receives_too=*/false);
  replay(dry_self, poster);
  return poster.sent;
}

}  // namespace hzp::coll::detail
