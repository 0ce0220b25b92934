// check_boundary_order and receive_posts (boundary_order.hpp): where a stage posts its receives, and each link's
// messages listed at both ends and compared.
#include "hzp/schedulers/step/boundary_order.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

std::vector<ReceivePost> receive_posts(const PipelineLayout& l, const std::vector<Action>& actions) {
  std::vector<ReceivePost> posts;
  std::map<std::pair<int, int>, std::size_t> forward_at;  // (micro-batch, chunk) -> its forward's index
  const int last = l.chunks() - 1;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const int k = l.chunk_at(a);
    const std::size_t ahead = i == 0 ? 0 : i - 1;
    if (a.kind == Action::Kind::forward) {
      forward_at[{a.micro_batch, k}] = i;
      if (k > 0) posts.push_back({ahead, i, false});
    } else if (k < last) {
      const auto f = forward_at.find({a.micro_batch, k});
      HZP_CHECK(f != forward_at.end(), "receive posts: ", to_string(a), " has no forward before it");
      posts.push_back({std::max(ahead, f->second + 1), i, true});
    }
  }
  std::stable_sort(posts.begin(), posts.end(), [](const ReceivePost& x, const ReceivePost& y) {
    return x.at != y.at ? x.at < y.at : x.consumer < y.consumer;
  });
  return posts;
}

void check_boundary_order(const PipelineLayout& l, const std::vector<std::vector<Action>>& stage_actions) {
  std::vector<std::vector<ReceivePost>> posts;
  for (const std::vector<Action>& actions : stage_actions) posts.push_back(receive_posts(l, actions));
  check_boundary_order(l, stage_actions, posts);
}

void check_boundary_order(const PipelineLayout& l, const std::vector<std::vector<Action>>& stage_actions,
                          const std::vector<std::vector<ReceivePost>>& stage_posts) {
  HZP_CHECK(static_cast<int>(stage_actions.size()) == l.pp && static_cast<int>(stage_posts.size()) == l.pp,
            "boundary order: ", stage_actions.size(), " schedules and ", stage_posts.size(), " post lists for ", l.pp,
            " stages");
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
  for (int s = 0; s < l.pp; ++s) {
    const std::vector<Action>& actions = stage_actions[static_cast<std::size_t>(s)];
    std::size_t receives = 0;
    std::map<std::pair<int, int>, std::size_t> forward_at;  // where each output is made: its gradient's slot after
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      const int k = l.chunk_at(a);
      if (a.kind == Action::Kind::forward) forward_at[{a.micro_batch, k}] = i;
      const auto on = [&](int chunk) { return static_cast<std::size_t>(chunk % l.pp); };
      if (a.kind == Action::Kind::forward) {
        receives += k > 0 ? 1 : 0;
        if (k < last) sent[0][on(k + 1)].emplace_back(a.micro_batch, k + 1);
      } else {
        receives += k < last ? 1 : 0;
        if (k > 0) sent[1][on(k - 1)].emplace_back(a.micro_batch, k - 1);
      }
    }
    // The receiving end: in the order the stage posts them, which must name each receive of its schedule once.
    const std::vector<ReceivePost>& posts = stage_posts[static_cast<std::size_t>(s)];
    std::vector<bool> posted(actions.size(), false);
    for (const ReceivePost& p : posts) {
      HZP_CHECK(p.consumer < actions.size() && p.at <= p.consumer && !posted[p.consumer], "boundary order: stage ", s,
                " posts a receive before action ", p.at, " for action ", p.consumer, ", which is ",
                p.consumer < actions.size() && posted[p.consumer] ? "posted twice" : "not a later action of its schedule");
      posted[p.consumer] = true;
      const Action& a = actions[p.consumer];
      const int k = l.chunk_at(a);
      const bool gradient = a.kind == Action::Kind::backward;
      HZP_CHECK(gradient == p.gradient && (gradient ? k < last : k > 0), "boundary order: stage ", s,
                " posts a receive for ", to_string(a), ", which receives ", gradient ? (k < last ? "a gradient" : "nothing")
                                                                                   : (k > 0 ? "an activation" : "nothing"));
      const auto made = forward_at.find({a.micro_batch, k});
      HZP_CHECK(!gradient || (made != forward_at.end() && made->second < p.at), "boundary order: stage ", s,
                " posts the gradient for ", to_string(a), " before action ", p.at, ", before the forward that makes the "
                "output it is the gradient of has run");
      received[gradient ? 1 : 0][static_cast<std::size_t>(s)].emplace_back(a.micro_batch, k);
    }
    HZP_CHECK(posts.size() == receives, "boundary order: stage ", s, " posts ", posts.size(), " receives for a "
              "schedule that receives ", receives, " messages");
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
