// A rank's checkpoint runs in the unsharded model's flat order (docs/checkpoints.md, "nd"): the runs a scheduler
// describes over its own layout (a tensor-parallel piece, an expert group's experts, a pipeline stage's units) moved
// to where those elements sit in the whole model, which is what a checkpoint stores, so that any layout reads them.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "hzp/schedulers/state_archive.hpp"
#include "hzp/schedulers/step/process_groups.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

/// Which of this rank's tensors it writes: exactly one rank writes each element of the whole model.
using TensorWriter = std::function<bool(const workloads::Unit&, const workloads::ParamTensor&)>;

/// `runs` over `layout`'s flat order (Run::global = an offset in `layout`, Run::local = one in the caller's buffer)
/// mapped to the unsharded model's flat order: split at tensor ends and wherever a piece's elements stop being
/// consecutive in the whole tensor (a column piece: once per row), adjacent results merged. Tensors `keep` refuses
/// are left out (their buffer elements skipped). A layout of the unsharded model maps every run to itself.
std::vector<StateArchive::Run> model_runs(const workloads::ParamLayout& layout, std::span<const StateArchive::Run> runs,
                                          const TensorWriter& keep);

/// The writer rule of nd's pieces on top of a data-parallel engine's: a tensor-parallel piece on every tp rank and a
/// whole tensor on tp rank 0 only; context-parallel rank 0; the pipeline stage that runs a unit (not the last stage's
/// copy of a tied table); and `dense_writer` (the engine's choice for a replicated tensor) or, for an expert piece,
/// `expert_writer` (the first rank of the ranks holding the same experts).
TensorWriter piece_writer(const ProcessGroups& groups, bool dense_writer, bool expert_writer);

}  // namespace hzp::schedulers
