// The main() of the CPU benchmarks that report per-core figures: OpenBLAS is held to one thread (a
// pthread OpenBLAS would otherwise take every core and the figures would no longer be what one rank on
// one core sees), recorded in the benchmark context, then Google Benchmark runs as BENCHMARK_MAIN would.
#pragma once

#include <benchmark/benchmark.h>
#include <cblas.h>

namespace hzp::bench {

inline int run_on_one_core(int argc, char** argv) {
  openblas_set_num_threads(1);
  benchmark::AddCustomContext("openblas_threads", "1");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace hzp::bench
