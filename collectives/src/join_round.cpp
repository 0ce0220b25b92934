// The join round put in front of an emulated call's algorithm (join_round.hpp).
#include "join_round.hpp"

#include <utility>

namespace hzp::coll::detail {
namespace {

class JoinRoundFirst final : public Algorithm {
 public:
  JoinRoundFirst(std::unique_ptr<Algorithm> inner, int rank, int p) : inner_(std::move(inner)), rank_(rank), p_(p) {}
  std::string_view name() const noexcept override { return inner_->name(); }
  bool step(int round, Poster& post) override {
    if (round > 0) return inner_->step(round - 1, post);
    // The header carries this rank's join; the receiver merges it as it merges every round's headers.
    for (int q = 0; q < p_; ++q)
      if (q != rank_) post.send(nullptr, 0, q);
    for (int q = 0; q < p_; ++q)
      if (q != rank_) post.recv(nullptr, 0, q);
    return true;
  }

 private:
  std::unique_ptr<Algorithm> inner_;
  int rank_, p_;
};

}  // namespace

std::unique_ptr<Algorithm> with_join_round(std::unique_ptr<Algorithm> inner, int rank, int p) {
  return std::make_unique<JoinRoundFirst>(std::move(inner), rank, p);
}

}  // namespace hzp::coll::detail
