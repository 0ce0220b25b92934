// Phantom worlds (docs/phantom.md): one process plays one rank of a W-rank world. Its communicators know every
// member's world rank and node, as a real run's do, but were built without asking anyone: the world from the
// topology, each child from split_by's slot function evaluated for every parent rank. Their calls are phantom
// operations (phantom_operation.cpp, and the phantom branches of mpi_communicator.cpp).
#include <algorithm>
#include <numeric>
#include <tuple>

#include "comm_state.hpp"
#include "hzp/collectives/mpi_communicator.hpp"
#include "hzp/collectives/phantom_peers.hpp"
#include "hzp/core/error.hpp"
#include "shm_transport.hpp"  // CommState's transport member must be complete where a state is made

namespace hzp::coll {

using detail::CommState;

std::unique_ptr<MpiCommunicator> make_phantom_world(const Topology& topology, const MpiCommConfig& config, int rank,
                                                    std::string name) {
  config.validate();
  const int w = topology.world_size();
  HZP_CHECK(rank >= 0 && rank < w, "phantom world '", name, "': rank ", rank, " outside 0..", w - 1);
  auto ctx = std::make_shared<detail::WorldContext>();
  ctx->node_of_world_rank.resize(static_cast<std::size_t>(w));
  for (int r = 0; r < w; ++r) ctx->node_of_world_rank[static_cast<std::size_t>(r)] = topology.node_of(r);
  // Links: this process's own clocks. Its node's other ranks are phantoms, so the interface is shared only with
  // this rank's own concurrent calls (docs/phantom.md, "What the link model covers").
  if (config.links.enabled) ctx->links = std::make_shared<LinkEmulator>(config.links);
  auto st = std::make_shared<CommState>();
  st->phantom = true;
  st->rank = rank;
  st->size = w;
  std::vector<int> members(static_cast<std::size_t>(w));
  std::iota(members.begin(), members.end(), 0);
  detail::set_members(*st, ctx, config, std::move(members), std::move(name), std::make_shared<CommCounters>());
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(st)));
}

bool MpiCommunicator::phantom() const noexcept { return state_->phantom; }

bool phantom_peers(const Communicator& c) noexcept {
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&c);
  return mpi != nullptr && mpi->phantom();
}

std::unique_ptr<Communicator> MpiCommunicator::phantom_child(std::vector<int> world_ranks, int rank, std::string name,
                                                             bool share_counters) {
  const CommState& parent = *state_;
  auto st = std::make_shared<CommState>();
  st->phantom = true;
  st->rank = rank;
  st->size = static_cast<int>(world_ranks.size());
  detail::set_members(*st, parent.world, parent.config, std::move(world_ranks), std::move(name),
                      share_counters ? parent.counters : std::make_shared<CommCounters>());
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(st)));
}

std::unique_ptr<Communicator> MpiCommunicator::split_by(const SlotOf& slot_of, std::string name,
                                                        bool share_counters) {
  CommState& st = *state_;
  if (!st.phantom) return Communicator::split_by(slot_of, std::move(name), share_counters);
  st.check_usable(CollOp::barrier);
  const GroupSlot mine = slot_of(st.rank);
  if (mine.color < 0) return nullptr;
  // MPI_Comm_split's order: by key, ties by rank in the parent.
  std::vector<std::tuple<int, int>> members;  // (key, parent rank)
  for (int q = 0; q < st.size; ++q) {
    const GroupSlot s = q == st.rank ? mine : slot_of(q);
    if (s.color == mine.color) members.emplace_back(s.key, q);
  }
  std::sort(members.begin(), members.end());
  std::vector<int> world_ranks;
  int rank = -1;
  for (const auto& [key, q] : members) {
    if (q == st.rank) rank = static_cast<int>(world_ranks.size());
    world_ranks.push_back(st.world_ranks[static_cast<std::size_t>(q)]);
  }
  return phantom_child(std::move(world_ranks), rank, std::move(name), share_counters);
}

}  // namespace hzp::coll
