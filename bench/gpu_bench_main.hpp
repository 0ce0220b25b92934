// main() of the GPU benchmark programs: exits 77 (CTest's skip code for them) when no CUDA device is
// usable, else runs Google Benchmark as usual. Include once, in the program's only source file.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>

#include "hzp/core/device.hpp"

int main(int argc, char** argv) {
  if (!hzp::cuda_compiled() || hzp::cuda_device_count() == 0) {
    std::printf("no usable CUDA device: GPU benchmark skipped\n");
    return 77;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
