// TrainConfig validation (train_config.hpp): every problem at once, each naming its keys and values.
#include "hzp/workloads/train_config.hpp"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "hzp/core/error.hpp"

namespace hzp::workloads {

void TrainConfig::validate() const {
  std::vector<std::string> problems;
  auto add = [&](auto&&... parts) { problems.push_back(detail::concat(parts...)); };
  if (global_batch <= 0) add("train.global_batch = ", global_batch, " must be positive");
  if (micro_batch_size <= 0) add("train.micro_batch_size = ", micro_batch_size, " must be positive");
  if (global_batch > 0 && micro_batch_size > 0 && global_batch % micro_batch_size != 0)
    add("train.global_batch = ", global_batch, " is not a multiple of train.micro_batch_size = ", micro_batch_size);
  if (steps <= 0) add("train.steps = ", steps, " must be positive");
  if (warmup_steps < 0) add("train.warmup_steps = ", warmup_steps, " must be >= 0");
  if (steps > 0 && warmup_steps > steps)
    add("train.warmup_steps = ", warmup_steps, " exceeds train.steps = ", steps);
  auto finite_nonneg = [&](const char* key, double v) {
    if (!std::isfinite(v) || v < 0) add(key, " = ", v, " must be finite and >= 0");
  };
  finite_nonneg("train.lr", lr);
  finite_nonneg("train.lr_min", lr_min);
  finite_nonneg("train.clip", clip);
  finite_nonneg("train.weight_decay", weight_decay);
  if (std::isfinite(lr) && std::isfinite(lr_min) && lr_min > lr)
    add("train.lr_min = ", lr_min, " exceeds train.lr = ", lr);
  for (auto [key, b] : {std::pair{"train.beta1", beta1}, std::pair{"train.beta2", beta2}})
    if (!(b >= 0 && b < 1)) add(key, " = ", b, " must lie in [0, 1)");
  if (!(eps > 0) || !std::isfinite(eps)) add("train.eps = ", eps, " must be finite and > 0");
  if (deterministic && precision == Precision::fp64)
    add("train.deterministic = true needs fp32 gradients; train.precision = fp64 (the test-only precision) has none: "
        "use fp32 or bf16-mixed");
  if (problems.empty()) return;
  std::ostringstream os;
  os << "invalid training configuration:";
  for (const auto& p : problems) os << "\n  - " << p;
  os << "\n  fix: change the train.* values named above so that each rule stated there holds";
  HZP_THROW(ConfigError, os.str());
}

}  // namespace hzp::workloads
