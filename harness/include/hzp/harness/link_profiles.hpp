// Link profiles (`links.profile`, `links.comm_to_compute`): a real cluster's links expressed as FLOPs
// per byte, turned into emulated bandwidths with the compute rate this run measures, so that a CPU run
// keeps the cluster's communication-to-compute ratio (why: docs/environment.md, "Keeping a cluster's
// communication-to-compute ratio"). Pure arithmetic; the measurement itself is compute_rate.hpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "hzp/collectives/link_emulator.hpp"

namespace hzp::harness {

/// One cluster: its accelerator's dense bf16 peak and its per-device link bandwidths.
struct LinkProfile {
  std::string_view name;
  double peak_tflops = 0;  ///< dense bf16 per device
  double intra_gbps = 0;   ///< GB/s per device inside a node
  double inter_gbps = 0;   ///< GB/s per device between nodes
  int cards_per_node = 0;  ///< devices a node holds (what `hzpbench simulate` lays ranks out by when asked to)
  std::string_view source;
  /// Per-message latency inside a node and between nodes, for `hzpbench simulate`'s profile calibration (the
  /// emulator's links.*.latency_us are sized for CPU ranks, two orders of magnitude above a cluster's). Assumed: the
  /// sources give bandwidths only.
  double intra_latency_us = 0, inter_latency_us = 0;
  /// Each device has its own inter-node interface (a NIC per card): the copies of a group that a node's ranks run
  /// at the same time do not queue on one interface.
  bool nic_per_device = false;
  std::string_view latency_source;

  constexpr double intra_flop_per_byte() const noexcept { return peak_tflops * 1e12 / (intra_gbps * 1e9); }
  constexpr double inter_flop_per_byte() const noexcept { return peak_tflops * 1e12 / (inter_gbps * 1e9); }
};

/// H100 SXM in a DGX: 989 TFLOP/s dense bf16, NVLink 450 GB/s per direction, 400 Gb/s InfiniBand
/// (50 GB/s) per GPU: ~2.2k FLOP per byte inside a node, ~19.8k across nodes.
inline constexpr LinkProfile kH100Dgx{"h100-dgx", 989, 450, 50, 8,
                                      "NVIDIA H100 SXM datasheet; DGX H100: 8 GPUs, NVLink 4 (900 GB/s "
                                      "bidirectional) and one 400 Gb/s NIC per GPU",
                                      2, 5, true,
                                      "assumed: a ring step's latency of a few microseconds over NVLink (2 us) and "
                                      "InfiniBand NDR (5 us)"};
/// The AsyncHZP paper's accelerator: 300 TFLOP/s, ~400 GB/s inside an 8-card full mesh, 200 Gb/s RoCE
/// (25 GB/s) per card: 750 FLOP per byte inside a node, 12k across; 16 cards a node.
inline constexpr LinkProfile kPaperNpu{"paper-npu", 300, 400, 25, 16,
                                       "AsyncHZP, arXiv 2510.20111 §5.1: 8-card mesh, 16 cards a node, 200 Gb/s "
                                       "RoCE per card",
                                       2, 10, true,
                                       "assumed (the paper gives none): 2 us inside the mesh, 10 us over RoCE"};

/// The named profiles (h100-dgx, paper-npu).
std::span<const LinkProfile> link_profiles();
/// The named profile, or nullptr (none, custom, or a name that is not one).
const LinkProfile* find_link_profile(std::string_view name);

/// Everything the conversion needs.
struct LinkPlanInput {
  std::string profile = "none";        ///< links.profile
  double custom_intra_flop_per_byte = kH100Dgx.intra_flop_per_byte();
  double custom_inter_flop_per_byte = kH100Dgx.inter_flop_per_byte();
  double comm_to_compute = 0;          ///< links.comm_to_compute
  coll::LinkEmulationConfig given;     ///< links.emulate and links.{intra,inter}.* as configured
  double flops_per_s = 0;              ///< the measured model compute rate of one rank (> 0 when needed)
  double micro_batch_s = 0;            ///< the measured compute time of one micro-batch (forward+backward)
  std::int64_t num_params = 0;         ///< N, for the comm_to_compute reference volume
};

/// The links a run uses, with how they were derived (recorded in the results file).
struct LinkPlan {
  coll::LinkEmulationConfig links;  ///< what the communicators get
  double intra_flop_per_byte = 0;   ///< the ratios the bandwidths keep (0 when taken as given)
  double inter_flop_per_byte = 0;
  double reference_bytes = 0;       ///< comm_to_compute: 4N bytes per micro-batch (0 otherwise)
  std::string how;                  ///< one line: "h100-dgx at 61.2 GFLOP/s: intra 27.8 MB/s, inter 3.09 MB/s"
};

/// Whether the plan needs a measured compute rate (a profile or comm_to_compute on, emulation on).
bool link_plan_needs_measurement(const LinkPlanInput& in);

/// Derives the bandwidths. Profile p: bandwidth = flops_per_s / (p's FLOP per byte) per level.
/// comm_to_compute r > 0: inter = 4N bytes / (r × micro_batch_s), intra = inter × (profile's intra/inter
/// bandwidth ratio; links.*.bandwidth_gbps's ratio when the profile is none). Latencies stay as given.
/// Throws ConfigError for an unknown profile or a missing measurement.
LinkPlan plan_links(const LinkPlanInput& in);

/// The ConfigError (or nothing) for a profile name, checked before anything runs.
void validate_link_profile(std::string_view name);

}  // namespace hzp::harness
