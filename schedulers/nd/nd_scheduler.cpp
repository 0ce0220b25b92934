// nd's degrees and its factory (nd.hpp): the engines are ddp's and zero1's (with expert pieces or tp gradient shares,
// the expert optimizer's: nd_expert_optimizer.cpp), each run over the mesh's data-parallel group with the
// tensor-parallel model; what nd adds is the mesh.
#include "hzp/schedulers/nd.hpp"

#include "hzp/core/device.hpp"
#include "hzp/core/error.hpp"
#include "hzp/schedulers/common/expert_data_parallel.hpp"
#include "hzp/schedulers/data_parallel.hpp"

namespace hzp::schedulers {

ParallelDims nd_parallel_dims(const SchedulerOptions& o, int w) {
  const long long split = 1LL * o.tp * o.cp * o.pp;
  if (o.tp < 1 || o.pp < 1 || o.cp < 1 || w % split != 0)
    HZP_THROW(ConfigError, "scheduler nd: scheduler.tp = ", o.tp, " times scheduler.cp = ", o.cp,
              " times scheduler.pp = ", o.pp, " = ", split, " does not divide the world size W = ", w,
              " (tp × cp × pp × dp must be W). Fix: degrees whose product divides W, e.g. tp = ",
              (w % 2 == 0 ? 2 : 1), ", cp = 1, pp = 1");
  if (o.sequence_parallel && o.tp == 1)
    HZP_THROW(ConfigError, "scheduler nd: scheduler.sequence_parallel = true splits the sequence over the "
              "tensor-parallel group, but scheduler.tp = 1. Fix: scheduler.tp > 1, or sequence_parallel = false");
  const int dp = static_cast<int>(w / split);
  if (o.ep != 1) {
    // The expert groups are carved out of the data × context ranks (ParallelDims::expert_groups: the cp ranks of a
    // sequence first), which stay data-parallel for every weight but their experts.
    if (o.ep < 1 || (dp * o.cp) % o.ep != 0)
      HZP_THROW(ConfigError, "scheduler nd: scheduler.ep = ", o.ep, " does not divide the data × context ranks dp · cp "
                "= W / (tp · pp) = ", w, " / ", 1LL * o.tp * o.pp, " = ", dp * o.cp, " (dp = W / (tp · cp · pp) = ", dp,
                ", cp = ", o.cp, "; an ep group is ep consecutive data × context ranks). Fix: an ep that divides ",
                dp * o.cp, ", or a world of a multiple of ep · tp · pp ranks");
  }
  ParallelDims d;
  d.ep = o.ep;
  d.tp = o.tp;
  d.cp = o.cp;
  d.pp = o.pp;
  (o.distributed_optimizer ? d.dp_shard : d.dp_replicate) = dp;
  d.tp_across_nodes = o.tp_across_nodes;
  return d;
}

std::unique_ptr<Scheduler> make_nd_scheduler(const SchedulerArgs& args) {
  // The tp ranks' row shares of an MoE model's router and experts (their gradients are summed over tp).
  const bool shares = args.options.tp > 1 && args.model != nullptr && !tp_share_ranges(args.model->layout()).empty();
  // On a GPU nd is ddp's and zero1's engines, which run on the stream, and the dense tensor-parallel model, whose
  // kernels and tp collectives take the stream too. The MoE sums (ExpertDataParallel's over ep and tp, the expert
  // optimizer's two shard layouts) move host buffers, and the MoE layer has no CUDA kernels: refused here, before
  // any group is split.
  if (args.stream.device().is_cuda() && (args.options.ep > 1 || shares))
    HZP_THROW(UnsupportedError, "scheduler nd on ", to_string(args.stream.device()), " with scheduler.ep = ",
              args.options.ep, " and scheduler.tp = ", args.options.tp, (shares ? " over an MoE model" : ""),
              ": expert parallelism and an MoE model's tensor-parallel gradient shares run on the CPU backend only "
              "(their gradient sums move host buffers; docs/cuda.md). Fix: scheduler.ep = 1 and a dense model "
              "(model.experts = 0), or backend = cpu");
  if (!args.options.distributed_optimizer) return make_replicated_nd_scheduler(args);
  // Expert pieces, or the tp shares: two shard layouts (dense over data × context, experts over their expert-data
  // group) and a sum over tp first, which zero1's engine does not make.
  return args.options.ep > 1 || shares ? make_expert_optimizer_nd_scheduler(args)
                                       : make_distributed_optimizer_nd_scheduler(args);
}

}  // namespace hzp::schedulers
