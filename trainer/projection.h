// The projection model of `trainbench project` (docs/projection.md), pure
// arithmetic so it is unit-tested without training anything:
//  - depth: each step-time category measured at two or more depths, fitted as
//    a + b·layers, evaluated at the full depth;
//  - scale: the step's gradient buckets all-reduced on a ring of N nodes ×
//    G ranks, timed with nccl-tests' bus bandwidth (busbw = algbw · 2(n−1)/n)
//    and NCCL's ring latency (one hop latency per ring step), the part not
//    hidden behind backward added to the measured step.
#pragma once

#include <cstdint>  // int64_t
#include <string>
#include <vector>

#include "trainer/train_loop.h"  // RunSummary: what a depth's run measured

namespace trainbench {

// y = intercept + slope · x.
struct LinearFit {
  double intercept = 0;
  double slope = 0;
  double at(double x) const { return intercept + slope * x; }
};

// Least squares through the points (the exact line through two). Throws
// std::invalid_argument with fewer than two distinct x or unequal lengths.
LinearFit fit_line(const std::vector<double>& x, const std::vector<double>& y);

// A step, split as DESIGN.md defines it (medians over the measured steps;
// step_s the one tokens/s divides by: measured_step_times).
struct StepTimes {
  double step_s = 0, compute_s = 0, comm_s = 0, comm_exposed_s = 0, data_stall_s = 0, ckpt_stall_s = 0,
         other_s = 0;
};

// One depth's run as the projection fits it: step_s as `run`'s tokens/s
// takes it (the largest of the ranks' median step_s), the categories the
// pacing rank's (summary.slowest_rank: the most work of its own).
StepTimes measured_step_times(const RunSummary& summary);

// The categories in report order, with their names.
struct StepCategory {
  const char* name;
  double StepTimes::*member;
};
const std::vector<StepCategory>& step_categories();

// What one depth's run measured.
struct DepthPoint {
  int64_t layers = 0;
  StepTimes times;
  double checkpoint_bytes = 0;  // one checkpoint, all ranks
};

struct DepthProjection {
  std::vector<LinearFit> fits;  // per step_categories() entry, in layers
  LinearFit checkpoint_bytes;
  StepTimes at_full;            // each fit at the full depth, negative values clamped to 0
  double checkpoint_bytes_at_full = 0;
  // step_s's line at the full depth before the clamp. At or below 0 the
  // projection has no step: no tokens/s, MFU or scale table come from it.
  double step_s_fitted = 0;
  bool has_step() const { return step_s_fitted > 0; }
};

// Fits every category across the points and evaluates at `full_layers`.
// Throws std::invalid_argument when fewer than two distinct depths are given.
DepthProjection project_depth(const std::vector<DepthPoint>& points, int64_t full_layers);

// "12.34 ms", "1.234 s", "1.234e+300 s": a time for the console, its unit always kept.
std::string seconds_text(double s);

// Why a fitted projection is not to be trusted, one line each (none: empty),
// every line ending with `remedy` (what to rerun with):
//  - a per-layer cost below zero in step_s, compute_s or comm_s (every layer
//    adds compute and gradients to all-reduce; the stalls may shrink, noise
//    near zero);
//  - a category projected above step_s, of which it is a part (tokens/s and
//    MFU come from step_s), or comm_exposed_s above comm_s;
//  - step_s at or below zero at the full depth (!has_step()).
std::vector<std::string> depth_projection_warnings(const std::vector<DepthPoint>& points,
                                                   const DepthProjection& projection, int64_t full_layers,
                                                   const std::string& remedy);

// A projected step faster than the model's FLOPs allow: MFU above 1 of the
// datasheet peak (`mfu`) or of the GEMM ceiling measured (`mfu_gemm`; NaN:
// none), as `run` warns of its own. "" when neither is.
std::string projected_mfu_warning(double mfu, double mfu_gemm, const std::string& remedy);

// A link: nccl-tests' bus bandwidth (1e9 B/s) and the latency of one ring step.
struct Link {
  double busbw_gbs = 0;
  double hop_latency_s = 0;
};

// The network between nodes, per GPU (each GPU with its own NIC, as on
// 8-NIC H100/H200 nodes). `measured`: the nodes are joined like the ranks
// measured here (the validation runs): the inter-node link is the measured one.
struct Fabric {
  std::string name;          // "ib-ndr400", "roce400", "measured" or the text given
  double gbs_per_gpu = 0;    // achieved (not line-rate) bandwidth per GPU, 1e9 B/s
  double hop_latency_s = 0;
  bool measured = false;
  std::string assumption;    // one line: where the figures come from
};

// "ib-ndr400", "roce400", "measured" or "<GB/s>,<us>" (e.g. "12.5,20").
// Throws std::invalid_argument with a one-line reason.
Fabric parse_fabric(const std::string& text);

// What makes the scale table's inputs doubtful, one line each (none: empty):
//  - a fabric given above 100 GB/s per GPU: today's fastest NICs carry 50
//    (400 Gb/s), so a line rate typed in Gb/s is the likely cause;
//  - `comm_slowdown` (the collectives in training over the same collectives
//    alone) above 2: the table keeps it at every node count, on the
//    fabric's hops too, where the sharing that caused it here (CPU ranks
//    beside their compute) may not be.
std::vector<std::string> scale_input_warnings(const Fabric& fabric, double comm_slowdown);

// The ring's busbw over `nodes` × `ranks_per_node` ranks: the intra-node
// link on one node; across nodes, the smaller of the intra-node link and
// ranks_per_node × the per-GPU fabric bandwidth (the node's NICs carry the
// rings in parallel). 0 on one rank.
double ring_busbw_gbs(int nodes, int ranks_per_node, const Link& intra, const Link& inter);

// Seconds for one ring all-reduce of `bytes` over `nodes` × `ranks_per_node`
// ranks: 2(n−1)/n · bytes / busbw (nccl-tests' busbw definition inverted)
// plus, as NCCL's tuning model counts it, 2(n−N) intra-node and 2(N−1)
// inter-node ring steps of one hop latency each; busbw is ring_busbw_gbs.
// One rank: 0.
double ring_all_reduce_s(double bytes, int nodes, int ranks_per_node, const Link& intra, const Link& inter);

// Fits t = a + b·bytes to all-reduce times measured on `ranks` ranks of one
// node, and reads the link off it: busbw = 2(n−1)/n / b, hop latency =
// a / 2(n−1). Needs ranks ≥ 2 and two distinct sizes (std::invalid_argument).
Link fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds, int ranks);

// The inputs of the scale projection: one rank's step at the depth projected.
struct ScaleInputs {
  StepTimes step;                   // measured (or depth-projected) on `ranks_per_node` ranks
  double hidden_share = 0;          // 1 − comm_exposed / comm as measured (0 when nothing was measured)
  std::vector<double> bucket_bytes; // the step's gradient buckets
  int ranks_per_node = 1;           // ranks of the measured node (G)
  double tokens_per_rank_step = 0;  // tokens each rank trains per step
  Link intra;                       // measured between the node's ranks (busbw 0: one rank, none)
  // The step's collectives measured in training over the model's time for
  // them at the measured ranks: how much sharing the host (or GPU) with
  // compute slows them. Kept at every node count (1: none measured).
  double comm_slowdown = 1;
};

struct ScalePoint {
  int nodes = 0, ranks = 0;
  double busbw_gbs = 0;         // of the ring at this size (0 on one rank)
  double comm_s = 0;            // the buckets' all-reduces, back to back
  double comm_exposed_s = 0;    // the part not hidden behind backward
  double step_s = 0;
  // Global. NaN (no figure, never 0) when step_s <= 0: a step projected
  // from fits that disagree (depth_projection_warnings) gives no rate.
  double tokens_per_s = 0;
  double scaling_efficiency = 0;  // tokens_per_s / (nodes · tokens_per_s at 1 node); NaN without both
};

// The step at each node count: compute, data stall, checkpoint stall and
// other as measured; comm = comm_slowdown × ring_all_reduce_s summed over
// the buckets (so 1 node reproduces the measured comm); hidden =
// min(hidden_share · comm, backward window), the window being 2/3 of
// compute_s (backward is twice the forward's FLOPs); exposed = the step's
// comm_exposed_s plus the change of comm − hidden from 1 node (so 1 node,
// the measured ranks, reproduces the step it was given, and the
// efficiencies compare like with like).
std::vector<ScalePoint> project_scale(const ScaleInputs& inputs, const Fabric& fabric,
                                      const std::vector<int>& nodes);

// The link between nodes the table takes: the fabric's figures, or with
// `measured` the ring fitted here, each GPU's share of it (busbw / G).
Link between_nodes(const ScaleInputs& inputs, const Fabric& fabric);

// (projected − measured) / measured, signed as perf.md's errors are (below
// 0: the projection is low; it was |…|, which hid the direction): 0 when
// both are 0, NaN (no figure) when only the measured one is (a stall
// projected where none was measured read as "0 %" error).
double relative_error(double projected, double measured);

}  // namespace trainbench
