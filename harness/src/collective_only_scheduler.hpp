// `debug.collective_only`: a stand-in scheduler for testing the run loop at any world size while only the
// single-rank `none` is registered. Each step all-reduces one buffer per micro-batch of this rank over
// the world communicator and computes nothing; its loss is a fixed function of the step. It exercises the
// multi-rank paths (metrics gathered from every rank, comm/* series, failure reports, the watchdog)
// without pretending to train. Not a registered scheduler: the harness builds it only for this hook.
#pragma once

#include <memory>

#include "hzp/collectives/communicator.hpp"
#include "hzp/schedulers/scheduler.hpp"

namespace hzp::harness {

/// `world` must outlive the scheduler. Every rank processes train.global_batch / (micro_batch_size ·
/// world size) micro-batches (the batch split is checked like a data-parallel scheduler's).
std::unique_ptr<schedulers::Scheduler> make_collective_only_scheduler(const schedulers::SchedulerArgs& args);

}  // namespace hzp::harness
