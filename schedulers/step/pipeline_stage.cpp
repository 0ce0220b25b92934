// PipelineStage (pipeline_stage.hpp): the schedule's actions over per-(micro-batch, chunk) contexts, with the
// boundary tensors sent to and received from the neighbouring stages.
#include "hzp/schedulers/step/pipeline_stage.hpp"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <thread>

#include "hzp/core/clock.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/phase_timer.hpp"
#include "hzp/core/trace_sink.hpp"
#include "hzp/schedulers/step/boundary_order.hpp"

namespace hzp::schedulers {

namespace {

// One trace event per action ("F3.1": micro-batch 3's forward on chunk 1), category "pipeline", so the timeline
// shows each stage's schedule above its units' spans. Not a phase: the units inside are timed already.
class ActionSpan {
 public:
  ActionSpan(const Action& a, int chunk) : sink_(trace::active()), start_(sink_ ? wall_seconds() : 0) {
    if (sink_) name_ = (a.kind == Action::Kind::forward ? "F" : "B") + std::to_string(a.micro_batch) + "." + std::to_string(chunk);
  }
  ~ActionSpan() {
    if (sink_ == nullptr) return;
    trace::Event e;
    e.name = std::move(name_);
    e.category = "pipeline";
    e.start_s = start_;
    e.duration_s = wall_seconds() - start_;
    e.thread_id = trace::current_thread_id();
    sink_->record(std::move(e));
  }
  ActionSpan(const ActionSpan&) = delete;
  ActionSpan& operator=(const ActionSpan&) = delete;

 private:
  trace::Sink* sink_;
  double start_;
  std::string name_;
};

}  // namespace

struct PipelineStage::InFlight {
  std::vector<std::int32_t> inputs, targets, first;  // first: document starts (empty without packing)
  std::unique_ptr<workloads::MicroBatchContext> ctx;
  std::vector<coll::Request> sends;  // buffers held by ctx until these complete
  std::vector<coll::Request> recvs;  // on a device: arrived on the compute stream, completion not yet seen
  std::optional<PipelineLinks::Posted> incoming;  // on a device: posted ahead, the compute stream not yet ordered
  bool backward_done = false;                     // then only its input gradient's send keeps it
};

// Shared-memory transfers move only while their requests are polled, so a stage that waits for one message
// keeps all of its own sends moving: otherwise two stages could each wait for the other's data. Contexts whose
// backward ran and whose sends completed are freed here.
void PipelineStage::progress() {
  for (auto it = live_.begin(); it != live_.end();) {
    InFlight& f = *it->second;
    std::erase_if(f.sends, [](coll::Request& r) { return r.test(); });
    std::erase_if(f.recvs, [](coll::Request& r) { return r.test(); });
    it = f.backward_done && f.sends.empty() && f.recvs.empty() ? live_.erase(it) : std::next(it);
  }
}

void PipelineStage::wait_until(const std::function<bool()>& done) {
  if (done()) return;
  const Stopwatch wait;
  {
    const profile::ScopedPhase phase(profile::Phase::pipeline_wait);
    while (!done()) {
      progress();
      std::this_thread::yield();
    }
  }
  wait_s_ += wait.wall();
}

void PipelineStage::drain(std::vector<coll::Request>& requests) {
  if (!links_.on_device()) {
    wait_until([&] { return requests.empty(); });  // progress() completes them
    return;
  }
  if (requests.empty()) return;
  // NCCL moves its messages without the host: waiting on one request at a time is enough, each under the deadline.
  const Stopwatch wait;
  {
    const profile::ScopedPhase phase(profile::Phase::pipeline_wait);
    for (coll::Request& r : requests) r.wait();
    requests.clear();
  }
  wait_s_ += wait.wall();
}

void PipelineStage::settle_receives() {
  for (auto& [key, f] : live_) drain(f->recvs);
}

PipelineStage::PipelineStage(const workloads::Workload& model, const PipelineLayout& layout, coll::Communicator& pp,
                             CachingAllocator& alloc, workloads::ContextOptions base)
    : model_(model), layout_(layout), pp_(pp), alloc_(alloc), base_(base), stage_(pp.rank()),
      links_(pp, base.stream, alloc) {
  HZP_CHECK(pp.size() == layout.pp && layout.units() == model.layout().num_units(), "pipeline stage: a group of ",
            pp.size(), " ranks for ", layout.pp, " stages, a layout of ", layout.units(), " units for a model of ",
            model.layout().num_units());
  const workloads::ContextShard* shard = model.context_shard();
  if (links_.on_device() && shard != nullptr && shard->cp() > 1) {
    ring_lane_ = std::make_unique<workloads::RingExchangeLane>(base_.stream.device());
    // The stage's one host thread issues every ring pass in turn, so they queue on the lane in order (the
    // contract in ContextOptions::ring_lane); their requests may be kept to the step's end.
    base_.ring_lane = ring_lane_.get();
  }
}

PipelineStage::~PipelineStage() = default;


// One tag per (micro-batch, receiving chunk, direction): messages between two ranks never match the wrong one,
// whatever order the schedule posts them in.
int PipelineStage::tag(int micro_batch, int chunk, bool gradient) const {
  return (micro_batch * layout_.chunks() + chunk) * 2 + (gradient ? 1 : 0);
}

void PipelineStage::model_peer_stages(PipelineScheduleKind kind) {
  peers_ = std::make_unique<PhantomPeerStages>(kind, layout_, stage_);
}

// A modelled peer's time: slept in short slices (the process is alone, its cores belong to its own threads),
// polling the stage's sends between them, and timed as pipeline wait.
void PipelineStage::wait_for_time(double wall_s) {
  wait_until([&] {
    const double left = wall_s - wall_seconds();
    if (left <= 0) return true;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, 1e-4)));
    return false;
  });
}

void PipelineStage::receive(TensorView into, int peer, int t, const Action& a) {
  // Phantom: the message cannot leave before the absent stage has run the action that sends it; its transfer is
  // then the communicator's (the link model's time, as for any phantom receive).
  if (peers_) wait_for_time(peers_->input_sent_at(a));
  coll::Request r = links_.receive(into, peer, t, a.kind == Action::Kind::backward).request;
  wait_until([&] { return r.test(); });  // test() enforces the communicator's deadline
}

void PipelineStage::post(const ReceivePost& p, const std::vector<Action>& actions, double normaliser, Hooks& hooks) {
  const Action& a = actions[p.consumer];
  const int k = layout_.chunk_at(a);
  // Phantom: as receive() above; posts are not ahead there (run()), so the device is idle here, as the model wants.
  if (peers_) wait_for_time(peers_->input_sent_at(a));
  if (!p.gradient) {  // the reader's context begins now, so that its input slot is held from the post on
    InFlight& f = begin_chunk(a, k, normaliser, hooks);
    f.incoming = links_.receive(f.ctx->input_slot(), (k + layout_.pp - 1) % layout_.pp, tag(a.micro_batch, k, false),
                                false);
    return;
  }
  const auto it = live_.find({a.micro_batch, k});
  HZP_CHECK(it != live_.end(), "pipeline stage ", stage_, ": ", to_string(a), "'s gradient is posted for no forward");
  InFlight& f = *it->second;
  // The output may still be on its way out: it stays held until the backward starts (drained before it).
  f.incoming = links_.receive(f.ctx->output_grad_slot_keeping_output(), (k + 1) % layout_.pp,
                              tag(a.micro_batch, k, true), true);
}

void PipelineStage::arrive(InFlight& f, const Action& a) {
  HZP_CHECK(f.incoming.has_value(), "pipeline stage ", stage_, ": ", to_string(a), " reads a receive never posted");
  links_.arrive(*f.incoming);
  f.recvs.push_back(std::move(f.incoming->request));
  f.incoming.reset();
}

PipelineStage::InFlight& PipelineStage::begin_chunk(const Action& a, int chunk, double normaliser, Hooks& hooks) {
  auto f = std::make_unique<InFlight>();
  const auto n = static_cast<std::size_t>(base_.micro_batch_size * model_.local_seq_len());
  f->inputs.resize(n);
  f->targets.resize(n);
  hooks.tokens(a.micro_batch, f->inputs, f->targets, f->first);
  workloads::ContextOptions o = base_;
  o.first_unit = a.first_unit;
  o.end_unit = a.end_unit;
  f->ctx = model_.make_context(alloc_, o);
  f->ctx->begin(f->inputs, f->targets, normaliser, f->first);
  InFlight& ref = *f;
  live_[{a.micro_batch, chunk}] = std::move(f);
  return ref;
}

std::vector<double> PipelineStage::run(const std::vector<Action>& actions, int micro_batches, double normaliser,
                                       Hooks& hooks) {
  check_stage_schedule(actions, layout_, stage_, micro_batches);
  wait_s_ = 0;
  if (peers_) peers_->begin(wall_seconds(), micro_batches);
  const int units = layout_.units(), last = layout_.chunks() - 1;
  const bool device = links_.on_device();
  // On a device every receive is posted ahead of its reader (receive_posts; check_boundary_order has checked the
  // order these posts give every link), except in a phantom world, where each is posted right before its reader
  // after the modelled peer's time, with the device idle.
  std::vector<ReceivePost> posts;
  if (device) posts = receive_posts(layout_, actions);
  if (peers_)
    for (ReceivePost& p : posts) p.at = p.consumer;  // still in the readers' order, which is the posts' order
  std::size_t next_post = 0;
  std::vector<double> losses(static_cast<std::size_t>(micro_batches), 0.0);
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const int k = layout_.chunk_at(a);  // one of this stage's: check_stage_schedule held
    const ActionSpan span(a, k);
    const double action_start = wall_seconds(), waited_before = wait_s_;
    for (; next_post < posts.size() && posts[next_post].at == i; ++next_post)
      post(posts[next_post], actions, normaliser, hooks);
    // Chunk k's neighbours: chunk k − 1 (input side) and k + 1 (output side), on their stages.
    const int prev = (k + layout_.pp - 1) % layout_.pp, next = (k + 1) % layout_.pp;
    if (a.kind == Action::Kind::forward) {
      const auto posted = device && k > 0 ? live_.find({a.micro_batch, k}) : live_.end();
      InFlight& f = posted != live_.end() ? *posted->second : begin_chunk(a, k, normaliser, hooks);
      if (k > 0 && device) arrive(f, a);
      if (k > 0 && !device) receive(f.ctx->input_slot(), prev, tag(a.micro_batch, k, false), a);
      // The head's loss reaches the host through a synchronisation, which waits for every receive before it.
      if (a.end_unit == units && device) settle_receives();
      if (hooks.mark) hooks.mark(i, false);
      for (int u = a.first_unit; u < a.end_unit; ++u) {
        model_.forward(u, hooks.params(u, a), *f.ctx);
        unit_sleep_.after(u, units);
        if (hooks.forward_done) hooks.forward_done(u, a);
      }
      if (hooks.mark) hooks.mark(i, true);
      if (a.end_unit == units)
        losses[static_cast<std::size_t>(a.micro_batch)] = f.ctx->loss();
      else
        f.sends.push_back(links_.send(f.ctx->output(), next, tag(a.micro_batch, k + 1, false), false));
    } else {
      const auto it = live_.find({a.micro_batch, k});
      HZP_CHECK(it != live_.end(), "pipeline stage ", stage_, ": ", to_string(a), " has no forward in flight");
      InFlight& f = *it->second;
      drain(f.sends);  // the output's buffer is about to be replaced by its gradient's (freed, on a device)
      if (k < last && device) arrive(f, a);
      if (k < last && !device) receive(f.ctx->output_grad_slot(), next, tag(a.micro_batch, k, true), a);
      if (hooks.mark) hooks.mark(i, false);
      for (int u = a.end_unit - 1; u >= a.first_unit; --u) {
        // Parameters first, then gradient buffers: an engine with rings hands them out in that order.
        const workloads::UnitParams params = hooks.params(u, a);
        const workloads::UnitGrads grads = hooks.grads(u, a);
        model_.backward(u, params, *f.ctx, grads);
        unit_sleep_.after(u, units);
        if (hooks.backward_done) hooks.backward_done(u, a);
      }
      if (hooks.mark) hooks.mark(i, true);
      if (k > 0) f.sends.push_back(links_.send(f.ctx->input_grad(), prev, tag(a.micro_batch, k - 1, true), true));
      f.backward_done = true;
    }
    // Phantom on a device: the host waits for the action's kernels, so the wall time is the device's.
    if (peers_ && device) base_.stream.synchronize();
    if (peers_) peers_->measured(a, wall_seconds() - action_start - (wait_s_ - waited_before));
    // On a device nothing polls while the host runs ahead: free here the contexts whose messages have completed.
    if (device) progress();
  }
  HZP_CHECK(next_post == posts.size(), "pipeline stage ", stage_, ": ", posts.size() - next_post,
            " receives were never posted");
  // The input gradients still in flight hold their contexts until the previous stage has them.
  if (device)  // (on the host, drain() polls progress(), which frees contexts: not inside this loop)
    for (auto& [key, f] : live_) {
      drain(f->recvs);
      drain(f->sends);
    }
  wait_until([&] { return live_.empty(); });
  // Phantom: the stages meet after the run (the losses' sum), where a stage that finished early waits for the last.
  if (peers_) wait_for_time(peers_->end_at());
  return losses;
}

}  // namespace hzp::schedulers
