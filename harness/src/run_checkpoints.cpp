// The run's checkpoints (run_checkpoints.hpp): naming, the keep-K rule and the refusals made before anything runs.
#include "run_checkpoints.hpp"

#include "h5_handle.hpp"

#include <cstdio>
#include <mutex>
#include <system_error>

#include "hzp/core/error.hpp"

namespace hzp::harness {

std::string checkpoint_unsupported(const RunSetup& s) {
  if (s.opt.collective_only)
    return "debug.collective_only = true: the stand-in scheduler has no training state. Fix: debug.collective_only "
           "= false";
  return {};
}

void check_checkpoint_support(const RunSetup& s, std::string_view why) {
  if (const std::string no = checkpoint_unsupported(s); !no.empty())
    HZP_THROW(ConfigError, why, " with ", no, ", or output.checkpoint_every = 0, output.checkpoint_on_signal = "
              "false (and no --resume)");
}

RunCheckpoints::RunCheckpoints(const RunOptions& o, const std::filesystem::path& results, bool root)
    : every_(o.checkpoint_every), keep_(o.checkpoint_keep), on_(o.checkpoints_on()), results_(results), root_(root) {
  dir_ = o.checkpoint_dir.empty() ? results.parent_path() : std::filesystem::path(o.checkpoint_dir);
  if (dir_.empty()) dir_ = ".";
}

std::filesystem::path RunCheckpoints::write(MPI_Comm comm, schedulers::Scheduler& scheduler,
                                            const workloads::ParamLayout& layout, const std::string& model,
                                            const CheckpointMeta& meta) {
  const std::filesystem::path path = checkpoint_path_for(dir_, results_, meta.step);
  {
    // The results thread may be writing the results file meanwhile (h5_handle.hpp, calls_mutex).
    const std::lock_guard<std::timed_mutex> lock(h5::calls_mutex());
    write_checkpoint(comm, path, scheduler, layout, model, meta);
  }
  last_ = path;
  if (!root_) return path;
  // Only this run's own files, only after the newer one is whole: a kill at any moment leaves one loadable.
  if (written_.empty() || written_.back() != path) written_.push_back(path);
  while (keep_ > 0 && static_cast<std::int64_t>(written_.size()) > keep_) {
    std::error_code ec;
    std::filesystem::remove(written_.front(), ec);
    if (ec)
      std::fprintf(stderr, "hzpbench: could not remove the older checkpoint %s (%s); it is left in place\n",
                   written_.front().c_str(), ec.message().c_str());
    written_.pop_front();
  }
  return path;
}

}  // namespace hzp::harness
