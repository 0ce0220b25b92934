// The request of every MPI-backend call: polls its Operation under the wait policy until done or
// past the deadline (a TimeoutError that also marks the communicator failed), then sleeps what the
// link model leaves of the call's modelled time (never spinning), then records the call's counters,
// splitting the time it waited into waiting for the last peer to join and waiting for the transfer.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

#include "comm_state.hpp"
#include "hzp/collectives/comm_wait_observer.hpp"
#include "hzp/core/clock.hpp"
#include "wait_policy.hpp"

namespace hzp::coll::detail {
namespace {

std::uint64_t this_thread_id() noexcept { return static_cast<std::uint64_t>(syscall(SYS_gettid)); }

class MpiRequest final : public Request::Impl {
 public:
  MpiRequest(std::shared_ptr<CommState> st, const CallInfo& info, std::unique_ptr<Operation> op,
             const CollectiveModel* model, std::shared_ptr<const LinkReservation> booked)
      : st_(std::move(st)), info_(info), op_(std::move(op)), emulate_(model != nullptr), booked_(std::move(booked)),
        deadline_(info.join + st_->config.timeout_s), thread_(this_thread_id()) {
    if (model) model_ = *model;
  }

  bool test() override { return test_impl(/*timed=*/true); }
  bool test_untimed() override { return test_impl(/*timed=*/false); }

  // One progress attempt (test()); `timed` adds its own duration to the request's wait.
  bool test_impl(bool timed) {
    if (done_) return true;
    const double t0 = begin_blocking();
    if (!transfer_done_) {
      poll();
      if (!transfer_done_ && wall_seconds() > deadline_) fail_timeout();
    }
    const double now = wall_seconds();
    if (timed) wait_s_ += now - t0;
    if (!transfer_done_ || now < model_end_) return false;
    finish(now);
    return true;
  }

  void pause() override {
    if (!pacer_) pacer_.emplace(st_->config.wait_policy, st_->config.backoff_max_us);
    if (op_ && op_->moved()) {
      pacer_->reset();  // a transfer under way: poll again at once, as wait() does
      return;
    }
    pacer_->pause();
  }

  void add_wait(double seconds) override {
    if (done_) return;
    if (first_block_ < 0) first_block_ = wall_seconds() - seconds;
    wait_s_ += seconds;
  }

  void wait() override {
    if (done_) return;
    const double t0 = begin_blocking();
    const CommWaitScope waiting;
    WaitPacer pacer(st_->config.wait_policy, st_->config.backoff_max_us);
    while (!transfer_done_) {
      if (poll()) break;
      if (wall_seconds() > deadline_) {
        wait_s_ += wall_seconds() - t0;
        fail_timeout();
      }
      // Data moved (shared memory moves only while polled): poll again at once, and start the
      // policy afresh when it stalls next, so a long transfer never sleeps between its chunks.
      if (op_->moved()) {
        pacer.reset();
        continue;
      }
      pacer.pause();
    }
    const double before_sleep = wall_seconds();
    if (model_end_ > before_sleep) {
      // The remainder of the modelled time is slept, never spun: the core goes to the peers (or to
      // the compute thread that this wait is overlapping with).
      LinkEmulator::sleep_until(model_end_);
      emulated_s_ += wall_seconds() - before_sleep;
    }
    const double now = wall_seconds();
    wait_s_ += now - t0;
    finish(now);
  }

 private:
  double begin_blocking() {
    const double t = wall_seconds();
    if (first_block_ < 0) first_block_ = t;
    return t;
  }

  // One progress attempt; true once the transfer is complete.
  bool poll() {
    try {
      if (op_->progress()) on_transfer_done();
    } catch (const std::exception& e) {
      st_->mark_failed(std::string(coll_op_name(info_.op)) + " #" + std::to_string(info_.seq) + " failed: " +
                       e.what());
      op_->abandon();
      throw;
    }
    return transfer_done_;
  }

  void on_transfer_done() {
    transfer_done_ = true;
    if (!emulate_) return;
    if (op_->held_on_stream()) {
      // The link model's time was held on the device stream (booked when the stream reached the call): nothing
      // is left to sleep here.
      emulated_s_ = op_->held_s();
      return;
    }
    if (info_.op == CollOp::recv && !st_->phantom) {
      // A message is in once its sender's modelled transfer is done (the sender's ready, the only one the receive
      // hears, plus the message's time), and a receive posted later finds it there: it books no link of its own.
      model_end_ = std::max(info_.join, op_->known().ready + model_.duration_s);
      return;
    }
    // The modelled time starts when the last rank is ready (joined and its links free).
    const double start = std::max(op_->known().ready, info_.join);
    st_->world->links->settle(*booked_, start, model_);
    model_end_ = start + model_.duration_s;
  }

  void finish(double now) {
    CallRecord r;
    r.op = info_.op;
    r.dtype = info_.dtype;
    r.count = info_.count;
    r.group = st_->group_id;
    r.group_size = st_->size;
    r.peer = info_.peer;
    r.thread_id = thread_;
    r.seq = info_.seq;
    r.start_s = info_.join;
    r.end_s = now;
    const Header known = op_->known();
    r.last_join_s = std::max(known.join, info_.join);
    r.wait_s = wait_s_;
    // Blocked time before the last peer joined: on an oversubscribed machine a descheduled peer
    // looks like slow communication, this tells them apart.
    r.join_wait_s = first_block_ < 0 ? 0.0 : std::clamp(r.last_join_s - first_block_, 0.0, wait_s_);
    r.transfer_wait_s = wait_s_ - r.join_wait_s;
    r.emulated_s = emulated_s_;
    r.modelled_s = emulate_ ? model_.duration_s : 0.0;
    r.bytes = op_->bytes();
    r.bytes_modelled = op_->bytes_modelled();
    r.algorithm = op_->algorithm();
    done_ = true;
    op_.reset();  // returns the scratch lease before the record is published
    st_->counters->record(r);
  }

  [[noreturn]] void fail_timeout() {
    const double waited = wall_seconds() - info_.join;
    std::ostringstream os;
    os.precision(3);
    os << coll_op_name(info_.op) << " timed out on rank " << st_->rank << " (world rank "
       << st_->world_ranks[static_cast<std::size_t>(st_->rank)] << ") of group '" << st_->name << "' (size "
       << st_->size << "), sequence number " << info_.seq
       << (info_.op == CollOp::send || info_.op == CollOp::recv ? " (point-to-point)" : "") << ": waited "
       << std::fixed << waited << " s since joining, past collectives.timeout_s = " << st_->config.timeout_s
       << " s; " << op_->pending() << ". The communicator '" << st_->name
       << "' is now unusable (its peers may be mid-protocol)";
    const std::string msg = os.str();
    st_->mark_failed(msg);
    op_->abandon();
    done_ = true;
    op_.reset();
    HZP_THROW(TimeoutError, msg);
  }

  std::shared_ptr<CommState> st_;
  CallInfo info_;
  std::unique_ptr<Operation> op_;
  bool emulate_;
  std::shared_ptr<const LinkReservation> booked_;  // filled before the transfer can be done
  CollectiveModel model_{};
  double deadline_;
  std::uint64_t thread_;
  bool transfer_done_ = false;
  bool done_ = false;
  double model_end_ = 0;
  double first_block_ = -1;
  double wait_s_ = 0;
  std::optional<WaitPacer> pacer_;  // wait_all's pauses (pause()), made at the first
  double emulated_s_ = 0;
};

}  // namespace

Request make_request(std::shared_ptr<CommState> st, const CallInfo& info, std::unique_ptr<Operation> op,
                     const CollectiveModel* model, std::shared_ptr<const LinkReservation> booked) {
  return Request(std::make_unique<MpiRequest>(std::move(st), info, std::move(op), model, std::move(booked)));
}

}  // namespace hzp::coll::detail
