// One pipeline stage running its schedule (issue 18): the actions of pipeline_schedule() over a model cut by a
// PipelineLayout, one context per (micro-batch, chunk) in flight, and the boundary activations and their
// gradients exchanged with the neighbouring stages by point-to-point messages over the pipeline group. Sends are
// non-blocking and complete before the context holding their buffer is reused; a receive blocks (polling the
// stage's own sends meanwhile), and the time the compute thread spends blocked on its peers is the stage's pipeline
// wait (a trace span of its own). Parameters, gradient buffers and the tokens come from the caller (a parameter
// engine, or a test), so the stage knows nothing of data parallelism.
//
// On a CUDA compute stream (docs/cuda.md, "Pipeline on the GPU") the boundary tensors are device buffers from the
// run's allocator and the messages go over PipelineLinks (one communicator per directed link, sends and receives on
// their own streams: why that cannot deadlock is argued there). A receive is posted an action ahead of its reader
// (receive_posts) into a slot its reader's context holds, and the compute stream waits for it right before the
// reader, without the host waiting. The host still waits (each timed as pipeline wait, each under the communicator's deadline): for an
// output's send before its gradient slot is taken (the slot reuses the output's memory, and the caching allocator
// knows one stream only; the backward needs that message received anyway), for every pending receive before the
// head's forward (its loss reaches the host through a synchronisation that would wait for them anyway, and this
// way a peer that never sends is a TimeoutError, not a hang), and at the end of the run for every message.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "hzp/collectives/communicator.hpp"
#include "hzp/core/caching_allocator.hpp"
#include "hzp/schedulers/step/boundary_order.hpp"
#include "hzp/schedulers/step/phantom_stages.hpp"
#include "hzp/schedulers/step/pipeline_links.hpp"
#include "hzp/schedulers/step/pipeline_schedule.hpp"
#include "hzp/schedulers/step/unit_sleep.hpp"
#include "hzp/workloads/ring_exchange_lane.hpp"
#include "hzp/workloads/workload.hpp"

namespace hzp::schedulers {

class PipelineStage {
 public:
  /// What the stage asks its caller for.
  struct Hooks {
    /// Unit u's parameters for action a (valid until the matching *_done call).
    std::function<workloads::UnitParams(int u, const Action& a)> params;
    /// The gradient buffers unit u's backward for a writes.
    std::function<workloads::UnitGrads(int u, const Action& a)> grads;
    /// Unit u's forward / backward for a is done (optional).
    std::function<void(int u, const Action& a)> forward_done, backward_done;
    /// Fills micro-batch `mb`'s inputs and targets ([micro_batch_size · local_seq_len] each) and `first`: with
    /// document packing resized to the tokens and filled with their document starts (every stage needs them: each
    /// runs attention), without packing left empty.
    std::function<void(int mb, std::span<std::int32_t> inputs, std::span<std::int32_t> targets,
                       std::vector<std::int32_t>& first)>
        tokens;
    /// Called right before action i's first kernel and right after its last (`end`), with the compute stream's
    /// receive already ordered before it (optional): the step driver's device timing of each action.
    std::function<void(std::size_t i, bool end)> mark;
  };

  /// Stage `pp.rank()` of `layout` (pp.size() stages). `base`'s micro-batch size, recompute and stream apply to
  /// every context; its unit range is the chunk's. The model, group and allocator must outlive the stage.
  PipelineStage(const workloads::Workload& model, const PipelineLayout& layout, coll::Communicator& pp,
                CachingAllocator& alloc, workloads::ContextOptions base);
  ~PipelineStage();

  int stage() const noexcept { return stage_; }
  /// Runs `actions` (this stage's schedule over `micro_batches` micro-batches; check_stage_schedule holds) with
  /// `normaliser` target tokens in the global batch. Returns each micro-batch's loss (loss_sum / normaliser)
  /// on the stage holding the last unit, zeros elsewhere. Collective over the pipeline group.
  std::vector<double> run(const std::vector<Action>& actions, int micro_batches, double normaliser, Hooks& hooks);
  /// Seconds the last run() waited on its peers: for a receive, for its own sends to drain before their buffer
  /// is reused, and at the end for the last input gradients to leave (the pipeline wait).
  double wait_seconds() const noexcept { return wait_s_; }
  /// A benchmark hook (scheduler.debug_unit_sleep_ms, unit_sleep.hpp): sleep after every block's forward and
  /// backward, so that the bubble is measured against a known, balanced unit time.
  void set_unit_sleep(UnitSleep sleep) noexcept { unit_sleep_ = sleep; }
  /// A phantom world's pipeline group (docs/phantom.md): the other stages are absent, so each receive first waits
  /// for the modelled end of the peer action that sends it (PhantomPeerStages, the `kind` schedule on every stage),
  /// and the run ends no earlier than the modelled last stage. On a CUDA stream the stage then synchronises the
  /// compute stream after each action, so that the time it measures is the device's (the host does not run ahead).
  void model_peer_stages(PipelineScheduleKind kind);

 private:
  struct InFlight;  // a micro-batch's context on one chunk, its tokens and its pending sends
  InFlight& begin_chunk(const Action& a, int chunk, double normaliser, Hooks& hooks);
  // On the host: posts the receive of `into` for a and waits for it (polling the stage's sends).
  void receive(TensorView into, int peer, int tag, const Action& a);
  // On a device: posts p's receive into its reader's slot (a forward's context begins here), on the link's receive
  // stream; arrive() orders the compute stream after it, right before the reader's kernels.
  void post(const ReceivePost& p, const std::vector<Action>& actions, double normaliser, Hooks& hooks);
  void arrive(InFlight& f, const Action& a);
  void wait_for_time(double wall_s);
  void progress();
  void wait_until(const std::function<bool()>& done);
  // Completes `requests` (on a device: each waited for under its deadline), timed as pipeline wait.
  void drain(std::vector<coll::Request>& requests);
  // On a device: every receive still pending on the compute stream, waited for (before the loss's synchronisation).
  void settle_receives();
  int tag(int micro_batch, int chunk, bool gradient) const;

  const workloads::Workload& model_;
  PipelineLayout layout_;
  coll::Communicator& pp_;
  CachingAllocator& alloc_;
  workloads::ContextOptions base_;
  int stage_;
  std::map<std::pair<int, int>, std::unique_ptr<InFlight>> live_;  // by (micro-batch, chunk)
  double wait_s_ = 0;
  UnitSleep unit_sleep_;
  PipelineLinks links_;
  // Context parallelism on a device: the one exchange lane every context's ring uses (base_.ring_lane), made once:
  // a context per (micro-batch, chunk) would otherwise create a stream and two events each.
  std::unique_ptr<workloads::RingExchangeLane> ring_lane_;
  std::unique_ptr<PhantomPeerStages> peers_;  // set in a phantom world only
};

}  // namespace hzp::schedulers
