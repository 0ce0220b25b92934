// Link profiles (link_profiles.hpp): the named clusters and the conversion of FLOP-per-byte ratios or a
// communication-to-compute target into emulated bandwidths.
#include "hzp/harness/link_profiles.hpp"

#include <array>
#include <cstdio>

#include "hzp/core/error.hpp"

namespace hzp::harness {
namespace {

constexpr std::array kProfiles = {kH100Dgx, kPaperNpu};

std::string mbps(double gbps) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4g MB/s", gbps * 1e3);
  return buf;
}

}  // namespace

std::span<const LinkProfile> link_profiles() { return kProfiles; }

const LinkProfile* find_link_profile(std::string_view name) {
  for (const LinkProfile& p : kProfiles)
    if (p.name == name) return &p;
  return nullptr;
}

void validate_link_profile(std::string_view name) {
  if (name == "none" || name == "custom" || find_link_profile(name) != nullptr) return;
  HZP_THROW(ConfigError, "links.profile = \"", name, "\" is not a link profile. Fix: use none, h100-dgx, paper-npu or custom");
}

bool link_plan_needs_measurement(const LinkPlanInput& in) {
  return in.given.enabled && (in.profile != "none" || in.comm_to_compute > 0);
}

LinkPlan plan_links(const LinkPlanInput& in) {
  validate_link_profile(in.profile);
  LinkPlan plan;
  plan.links = in.given;
  if (!link_plan_needs_measurement(in)) {
    plan.how = in.given.enabled ? "as given by links.intra/inter.bandwidth_gbps: intra " +
                                      mbps(in.given.intra.bandwidth_gbps) + ", inter " + mbps(in.given.inter.bandwidth_gbps)
                                : "emulation off (links.emulate = false)";
    return plan;
  }
  HZP_CHECK(in.flops_per_s > 0, "link profiles need the measured compute rate");

  double intra_fpb = 0, inter_fpb = 0;
  if (in.profile == "custom") {
    intra_fpb = in.custom_intra_flop_per_byte;
    inter_fpb = in.custom_inter_flop_per_byte;
  } else if (const LinkProfile* p = find_link_profile(in.profile)) {
    intra_fpb = p->intra_flop_per_byte();
    inter_fpb = p->inter_flop_per_byte();
  }
  // bytes/s = (FLOP/s) / (FLOP/byte); GB/s = that / 1e9.
  if (intra_fpb > 0) {
    plan.links.intra.bandwidth_gbps = in.flops_per_s / intra_fpb / 1e9;
    plan.links.inter.bandwidth_gbps = in.flops_per_s / inter_fpb / 1e9;
  }
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.4g GFLOP/s", in.flops_per_s / 1e9);
  plan.how = in.profile + " at the measured " + rate;

  if (in.comm_to_compute > 0) {
    HZP_CHECK(in.micro_batch_s > 0 && in.num_params > 0, "links.comm_to_compute needs the micro-batch time and N");
    // The ratio the profile keeps between its levels (or the configured bandwidths' when none).
    const double intra_over_inter = intra_fpb > 0 ? inter_fpb / intra_fpb
                                                  : in.given.intra.bandwidth_gbps / in.given.inter.bandwidth_gbps;
    plan.reference_bytes = 4.0 * static_cast<double>(in.num_params);  // bf16 params, gathered twice
    const double inter_bytes_per_s = plan.reference_bytes / (in.comm_to_compute * in.micro_batch_s);
    plan.links.inter.bandwidth_gbps = inter_bytes_per_s / 1e9;
    plan.links.intra.bandwidth_gbps = plan.links.inter.bandwidth_gbps * intra_over_inter;
    char buf[160];
    std::snprintf(buf, sizeof buf, ", comm_to_compute %.4g: 4N = %.4g MB per micro-batch of %.4g s", in.comm_to_compute,
                  plan.reference_bytes / 1e6, in.micro_batch_s);
    plan.how += buf;
  }
  // The ratios actually kept, whatever set them.
  plan.intra_flop_per_byte = in.flops_per_s / (plan.links.intra.bandwidth_gbps * 1e9);
  plan.inter_flop_per_byte = in.flops_per_s / (plan.links.inter.bandwidth_gbps * 1e9);
  plan.how += ": intra " + mbps(plan.links.intra.bandwidth_gbps) + ", inter " + mbps(plan.links.inter.bandwidth_gbps);
  return plan;
}

}  // namespace hzp::harness
