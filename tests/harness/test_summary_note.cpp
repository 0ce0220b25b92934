// The run summary's MFU line and its note: an MFU median above 100% (a peak below what the run reached) is said
// with its cause and fix; at or below 100% there is no note.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "summary.hpp"

namespace hzp::harness {
namespace {

std::vector<StepRecord> steps_with_mfu(std::vector<double> mfu) {
  std::vector<StepRecord> v;
  for (std::size_t i = 0; i < mfu.size(); ++i) {
    StepRecord r;
    r.step = static_cast<std::int64_t>(i);
    r.step_time_s = 1;
    r.tokens_per_s = 100;
    r.mfu = mfu[i];
    r.mfu_causal = mfu[i];
    v.push_back(r);
  }
  return v;
}

SummaryContext context() {
  SummaryContext c;
  c.peak_text = "43.7 GFLOP/s per rank (measured sgemm 256x256x256, 2 intra-op thread(s), mean over ranks)";
  return c;
}

TEST(SummaryNote, MfuAboveTheMeasuredPeakIsExplained) {
  // The median (1.2) is above 1, though one step is not.
  const std::string s = format_summary(steps_with_mfu({0.9, 1.2, 1.25}), context());
  EXPECT_NE(s.find("MFU            median 120.00%"), std::string::npos) << s;
  EXPECT_NE(s.find("note           MFU above 100%"), std::string::npos) << s;
  EXPECT_NE(s.find("device.peak_tflops"), std::string::npos) << s;
}

TEST(SummaryNote, NoNoteAtOrBelowThePeak) {
  // One step above 1 does not move the median (0.8).
  const std::string s = format_summary(steps_with_mfu({0.8, 0.7, 1.05}), context());
  EXPECT_NE(s.find("MFU            median 80.00%"), std::string::npos) << s;
  EXPECT_EQ(s.find("MFU above 100%"), std::string::npos) << s;
}

}  // namespace
}  // namespace hzp::harness
