// The synthetic Markov chain's parameters in one call, shared by the chain's tests (test_markov_chain.cpp) and
// its source's (test_markov_source.cpp), which build many small chains of a given order, vocabulary,
// successor count, concentration and seed.
#pragma once

#include <cstdint>

#include "hzp/workloads/data/markov_chain.hpp"

namespace hzp::test {

inline workloads::MarkovChainParams markov_params(int order, std::int64_t vocab, std::int64_t s, double alpha,
                                                  std::uint64_t seed) {
  workloads::MarkovChainParams p;
  p.order = order;
  p.vocab = vocab;
  p.successors = s;
  p.concentration = alpha;
  p.seed = seed;
  return p;
}

}  // namespace hzp::test
