// CommState housekeeping: the persistent scratch pool, the failed flag, and freeing the MPI_Comm
// (and unmapping the shared-memory transport: local, no collective).
#include "comm_state.hpp"

#include <algorithm>

#include "hzp/core/error.hpp"
#include "shm_transport.hpp"

namespace hzp::coll::detail {

ScratchPool::Lease& ScratchPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    if (pool_ && buf_) pool_->give_back(std::move(buf_));
    pool_ = o.pool_;
    buf_ = std::move(o.buf_);
  }
  return *this;
}

ScratchPool::Lease::~Lease() {
  if (pool_ && buf_) pool_->give_back(std::move(buf_));
}

ScratchPool::Lease ScratchPool::acquire(std::size_t bytes) {
  std::unique_ptr<std::vector<std::byte>> buf;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest free buffer that fits; else the largest, grown (so buffers converge on the
    // sizes the workload needs and stop allocating).
    auto fit = free_.end(), largest = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      const std::size_t cap = (*it)->size();
      if (cap >= bytes && (fit == free_.end() || cap < (*fit)->size())) fit = it;
      if (largest == free_.end() || cap > (*largest)->size()) largest = it;
    }
    const auto best = fit != free_.end() ? fit : largest;
    if (best != free_.end()) {
      buf = std::move(*best);
      free_.erase(best);
    }
  }
  if (!buf) buf = std::make_unique<std::vector<std::byte>>();
  if (buf->size() < bytes) {
    const std::size_t before = buf->size();
    buf->resize(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    total_ += bytes - before;
  }
  return Lease(this, std::move(buf));
}

std::size_t ScratchPool::capacity_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

void ScratchPool::give_back(std::unique_ptr<std::vector<std::byte>> buf) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(std::move(buf));
}

CommState::~CommState() {
  shm.reset();
  // Local in practice (MPICH frees when pending operations finish); requests hold this state alive
  // through a shared_ptr, so none of ours is pending here.
  if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
}

void set_members(CommState& st, std::shared_ptr<const WorldContext> world, const MpiCommConfig& config,
                 std::vector<int> world_ranks, std::string name, std::shared_ptr<CommCounters> counters) {
  st.name = std::move(name);
  st.config = config;
  st.world = std::move(world);
  st.world_ranks = std::move(world_ranks);
  st.nodes.resize(st.world_ranks.size());
  for (std::size_t i = 0; i < st.world_ranks.size(); ++i)
    st.nodes[i] = st.world->node_of_world_rank[static_cast<std::size_t>(st.world_ranks[i])];
  st.counters = std::move(counters);
  st.group_id = st.counters->intern_group(st.name);
}

void CommState::check_usable(CollOp op) const {
  if (!failed.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(fail_mu);
  HZP_THROW(PreconditionError, coll_op_name(op), " on communicator '", name,
            "', which is unusable since an earlier call failed: ", fail_reason);
}

void CommState::mark_failed(const std::string& reason) {
  std::lock_guard<std::mutex> lock(fail_mu);
  if (failed.load(std::memory_order_relaxed)) return;  // keep the first reason
  fail_reason = reason;
  failed.store(true, std::memory_order_release);
}

}  // namespace hzp::coll::detail
