// check_boundary_order (boundary_order.hpp): each link's messages listed at both ends and compared.
#include "hzp/schedulers/step/boundary_order.hpp"

#include <string>
#include <utility>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

void check_boundary_order(const PipelineLayout& l, const std::vector<std::vector<Action>>& stage_actions) {
  HZP_CHECK(static_cast<int>(stage_actions.size()) == l.pp, "boundary order: ", stage_actions.size(),
            " schedules for ", l.pp, " stages");
  // Messages named by (micro-batch, receiving chunk); index [gradient][receiving stage]. Every message into stage t
  // comes from one stage (t - 1 for activations, t + 1 for gradients, around the ring), so the receiving stage
  // names the link.
  using Message = std::pair<int, int>;
  std::vector<std::vector<Message>> sent[2], received[2];
  for (int g = 0; g < 2; ++g) {
    sent[g].resize(static_cast<std::size_t>(l.pp));
    received[g].resize(static_cast<std::size_t>(l.pp));
  }
  const int last = l.chunks() - 1;
  for (int s = 0; s < l.pp; ++s)
    for (const Action& a : stage_actions[static_cast<std::size_t>(s)]) {
      const int k = l.chunk_at(a);
      const auto on = [&](int chunk) { return static_cast<std::size_t>(chunk % l.pp); };
      if (a.kind == Action::Kind::forward) {
        if (k > 0) received[0][static_cast<std::size_t>(s)].emplace_back(a.micro_batch, k);
        if (k < last) sent[0][on(k + 1)].emplace_back(a.micro_batch, k + 1);
      } else {
        if (k < last) received[1][static_cast<std::size_t>(s)].emplace_back(a.micro_batch, k);
        if (k > 0) sent[1][on(k - 1)].emplace_back(a.micro_batch, k - 1);
      }
    }
  const auto name = [](const Message& m) {
    return "(micro-batch " + std::to_string(m.first) + ", chunk " + std::to_string(m.second) + ")";
  };
  for (int g = 0; g < 2; ++g)
    for (int t = 0; t < l.pp; ++t) {
      const std::vector<Message>& out = sent[g][static_cast<std::size_t>(t)];
      const std::vector<Message>& in = received[g][static_cast<std::size_t>(t)];
      const int from = g == 0 ? (t + l.pp - 1) % l.pp : (t + 1) % l.pp;
      HZP_CHECK(out.size() == in.size(), "boundary order: stage ", from, " sends ", out.size(), " ",
                g == 0 ? "activations" : "gradients", " to stage ", t, ", which receives ", in.size());
      for (std::size_t i = 0; i < out.size(); ++i)
        HZP_CHECK(out[i] == in[i], "boundary order: the ", g == 0 ? "activations" : "gradients", " from stage ", from,
                  " to stage ", t, " differ at message ", i, ": sent ", name(out[i]), ", received ", name(in[i]),
                  "; NCCL matches a send with a receive by order, so this schedule would swap them");
    }
}

}  // namespace hzp::schedulers
