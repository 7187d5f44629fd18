#include "trainer/projection.h"

#include <algorithm>  // std::min, std::max
#include <cmath>      // std::fabs
#include <cstdio>     // std::snprintf: seconds in the warnings
#include <limits>     // quiet_NaN: a rate with no step
#include <optional>   // decimal_number
#include <stdexcept>  // std::invalid_argument

#include "comm/collective_bench.h"  // bus_bandwidth_factor: nccl-tests' busbw / algbw
#include "trainer/config.h"          // excerpt: a typed value in a message

namespace trainbench {

LinearFit fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) throw std::invalid_argument("fit_line: x and y differ in length");
  const double n = static_cast<double>(x.size());
  double mean_x = 0, mean_y = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mean_x += x[i] / n;
    mean_y += y[i] / n;
  }
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mean_x) * (x[i] - mean_x);
    sxy += (x[i] - mean_x) * (y[i] - mean_y);
  }
  if (x.size() < 2 || sxx <= 0) throw std::invalid_argument("fit_line: needs at least two distinct x");
  LinearFit fit;
  fit.slope = sxy / sxx;
  fit.intercept = mean_y - fit.slope * mean_x;
  return fit;
}

const std::vector<StepCategory>& step_categories() {
  static const std::vector<StepCategory> categories = {
      {"step_s", &StepTimes::step_s},
      {"compute_s", &StepTimes::compute_s},
      {"comm_s", &StepTimes::comm_s},
      {"comm_exposed_s", &StepTimes::comm_exposed_s},
      {"data_stall_s", &StepTimes::data_stall_s},
      {"ckpt_stall_s", &StepTimes::ckpt_stall_s},
      {"other_s", &StepTimes::other_s},
  };
  return categories;
}

DepthProjection project_depth(const std::vector<DepthPoint>& points, int64_t full_layers) {
  std::vector<double> layers, checkpoint;
  for (const DepthPoint& p : points) {
    layers.push_back(static_cast<double>(p.layers));
    checkpoint.push_back(p.checkpoint_bytes);
  }
  DepthProjection projection;
  const double full = static_cast<double>(full_layers);
  for (const StepCategory& category : step_categories()) {
    std::vector<double> values;
    for (const DepthPoint& p : points) values.push_back(p.times.*category.member);
    projection.fits.push_back(fit_line(layers, values));
    // A category that shrinks with depth (noise in a near-zero stall) must
    // not project below zero.
    projection.at_full.*category.member = std::max(0.0, projection.fits.back().at(full));
  }
  projection.checkpoint_bytes = fit_line(layers, checkpoint);
  projection.checkpoint_bytes_at_full = std::max(0.0, projection.checkpoint_bytes.at(full));
  projection.step_s_fitted = projection.fits.front().at(full);  // step_categories() starts with step_s
  return projection;
}

std::string seconds_text(double s) {
  char text[48];
  const double magnitude = std::fabs(s);
  if (magnitude >= 1e6) {
    // %.3f of a fabric's 1e300 s (--fabric 1e-300,0) ran past the buffer
    // and lost its unit.
    std::snprintf(text, sizeof text, "%.3e s", s);
  } else if (magnitude >= 1) {
    std::snprintf(text, sizeof text, "%.3f s", s);
  } else {
    std::snprintf(text, sizeof text, "%.2f ms", s * 1e3);
  }
  return text;
}

std::vector<std::string> depth_projection_warnings(const std::vector<DepthPoint>& points,
                                                   const DepthProjection& projection, int64_t full_layers,
                                                   const std::string& remedy) {
  std::vector<std::string> warnings;
  if (points.size() < 2 || projection.fits.size() != step_categories().size()) return warnings;
  int64_t shallowest = points.front().layers, deepest = points.front().layers;
  for (const DepthPoint& p : points) {
    shallowest = std::min(shallowest, p.layers);
    deepest = std::max(deepest, p.layers);
  }
  const std::string depths = std::to_string(shallowest) + " and " + std::to_string(deepest) + " layers";
  const std::string full = std::to_string(full_layers) + " layers";
  for (size_t c = 0; c < step_categories().size(); ++c) {
    const std::string name = step_categories()[c].name;
    const bool grows_with_depth = name == "step_s" || name == "compute_s" || name == "comm_s";
    if (grows_with_depth && projection.fits[c].slope < 0)
      warnings.push_back(name + " falls with depth between " + depths + " (" +
                         seconds_text(projection.fits[c].slope) +
                         " per layer): a layer cannot cost less than nothing, so the runs were too noisy to fit; " +
                         remedy);
  }
  if (!projection.has_step()) {
    warnings.push_back("step_s at " + full + " fits to " + seconds_text(projection.step_s_fitted) +
                       " (<= 0): no tokens/s, MFU or scale table can come from it (null in the JSON); " + remedy);
    return warnings;
  }
  const double step_s = projection.at_full.step_s;
  for (const StepCategory& category : step_categories()) {
    const double value = projection.at_full.*category.member;
    if (category.member != &StepTimes::step_s && value > step_s)
      warnings.push_back(std::string(category.name) + " at " + full + " (" + seconds_text(value) +
                         ") exceeds step_s (" + seconds_text(step_s) +
                         "), of which it is a part: the fits disagree, so tokens/s and MFU, which come from "
                         "step_s, are not to be trusted; " + remedy);
  }
  const StepTimes& at = projection.at_full;
  if (at.comm_exposed_s > at.comm_s)
    warnings.push_back("comm_exposed_s at " + full + " (" + seconds_text(at.comm_exposed_s) + ") exceeds comm_s (" +
                       seconds_text(at.comm_s) + "), of which it is a part: the fits disagree; the scale table "
                       "takes the excess as time the network does not change; " + remedy);
  return warnings;
}

std::string projected_mfu_warning(double mfu, double mfu_gemm, const std::string& remedy) {
  const bool past_peak = mfu > 1.0;
  if (!past_peak && !(mfu_gemm > 1.0)) return "";
  // %.3g: a step fitted near zero gives any share (an int cast overflowed).
  char share[32];
  std::snprintf(share, sizeof share, "%.3g%%", 100 * (past_peak ? mfu : mfu_gemm));
  return "the projected step is faster than the " +
         std::string(past_peak ? "GPU's datasheet peak" : "GEMM ceiling measured here") + " allows (" + share +
         " of it): the fitted step_s is too low; " + remedy;
}

Fabric parse_fabric(const std::string& text) {
  // Achieved bandwidth = line rate × an efficiency; latency per ring step.
  // docs/projection.md states where each figure comes from.
  if (text == "ib-ndr400")
    return {text, 47.0, 9.6e-6, false,
            "400 Gb/s NDR InfiniBand per GPU (50 GB/s line rate) at 94% = 47 GB/s, the 46-48 GB/s per NIC "
            "nccl-tests report on such nodes (8 NICs: ~390 GB/s busbw); 9.6 us per ring step, NCCL's "
            "tuning model for a network hop (ring, Simple protocol)"};
  if (text == "roce400")
    return {text, 45.0, 12.0e-6, false,
            "400 Gb/s RoCEv2 Ethernet per GPU (50 GB/s line rate) at an assumed 90% = 45 GB/s (no measured "
            "nccl-tests figure to hand; Ethernet/UDP/IP framing and congestion control cost a little more than "
            "InfiniBand); 12 us per ring step, NCCL's 9.6 us network hop plus an assumed 2.4 us for the "
            "Ethernet switches"};
  if (text == "measured")
    return {text, 0, 0, true,
            "the nodes are joined like the ranks measured here: the ring's busbw and hop latency fitted on "
            "this node are used between nodes too (for validating the model, not for a real cluster)"};
  const size_t comma = text.find(',');
  const auto number = [&text](const std::string& part, const char* what) {
    // Decimal only, as the config's numbers: strtod read "0x10" as 16.
    bool out_of_range = false;
    const std::optional<double> value = decimal_number(part, &out_of_range);
    if (!value)
      throw std::invalid_argument("'" + excerpt(text) + "': " + what + " '" + excerpt(part) + "' is " +
                                  (out_of_range ? "out of range" : "not a number"));
    return *value + 0.0;  // -0 becomes 0 (it was printed "-0 us" and written -0.0 to the JSON)
  };
  if (comma == std::string::npos)
    throw std::invalid_argument("'" + excerpt(text) +
                                "' is not ib-ndr400, roce400, measured or <GB/s>,<us> (e.g. 25,10)");
  const double gbs = number(text.substr(0, comma), "the bandwidth");
  const double us = number(text.substr(comma + 1), "the latency");
  // Bounded: 1e-320 GB/s made every transfer take "inf s" and the table
  // show 100% scaling (the inf dropped as null); 1e308 printed 300 digits.
  // 1 MB/s to 1 PB/s per GPU and up to a second a hop cover any fabric.
  if (gbs <= 0) throw std::invalid_argument("'" + text + "': the bandwidth must be > 0 GB/s");
  if (gbs < 1e-3 || gbs > 1e6)
    throw std::invalid_argument("'" + text + "': the bandwidth must be between 0.001 and 1e6 GB/s per GPU");
  if (us < 0) throw std::invalid_argument("'" + text + "': the latency must be >= 0 us");
  if (us > 1e6) throw std::invalid_argument("'" + text + "': the latency must be at most 1e6 us (a second a hop)");
  return {text, gbs, us * 1e-6, false, "as given: " + format_double(gbs) + " GB/s per GPU achieved, " +
                                           format_double(us) + " us per ring step"};
}

std::vector<std::string> scale_input_warnings(const Fabric& fabric, double comm_slowdown) {
  constexpr double kFastestNicGbs = 100;  // per GPU: twice a 400 Gb/s NIC's 50 GB/s
  constexpr double kNotedSlowdown = 2;
  std::vector<std::string> warnings;
  if (!fabric.measured && fabric.gbs_per_gpu > kFastestNicGbs) {
    char text[64];
    std::snprintf(text, sizeof text, "%g", fabric.gbs_per_gpu);
    warnings.push_back("--fabric " + fabric.name + ": " + text + " GB/s per GPU is above any network "
                       "NIC's rate (a 400 Gb/s NIC carries 50 GB/s): the bandwidth is achieved GB/s (bytes), not a "
                       "line rate in Gb/s (an NVLink domain across nodes, such as NVL72's, is the exception)");
  }
  if (comm_slowdown > kNotedSlowdown) {
    char text[32];
    std::snprintf(text, sizeof text, "x%.2f", comm_slowdown);
    warnings.push_back(std::string("training slowed the all-reduce here ") + text +
                       " against the model of the link measured alone (ranks sharing the host with their "
                       "compute); the scale table keeps that factor at every node count, on the fabric's hops "
                       "too: its comm_s is an upper bound. Measured on the GPUs, one rank each, it is near 1");
  }
  return warnings;
}

double ring_busbw_gbs(int nodes, int ranks_per_node, const Link& intra, const Link& inter) {
  if (nodes * ranks_per_node <= 1) return 0.0;
  if (nodes == 1) return intra.busbw_gbs;
  const double across = ranks_per_node * inter.busbw_gbs;
  return ranks_per_node > 1 && intra.busbw_gbs > 0 ? std::min(across, intra.busbw_gbs) : across;
}

double ring_all_reduce_s(double bytes, int nodes, int ranks_per_node, const Link& intra, const Link& inter) {
  const int ranks = nodes * ranks_per_node;
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double busbw = ring_busbw_gbs(nodes, ranks_per_node, intra, inter);
  if (busbw <= 0) throw std::invalid_argument("ring_all_reduce_s: no bandwidth for this ring");
  const double bus_bytes = bus_bandwidth_factor("all_reduce", ranks) * bytes;
  const double intra_steps = 2.0 * (ranks - nodes);
  const double inter_steps = 2.0 * (nodes - 1);
  return bus_bytes / (busbw * 1e9) + intra_steps * intra.hop_latency_s + inter_steps * inter.hop_latency_s;
}

Link fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds, int ranks) {
  if (ranks < 2) throw std::invalid_argument("fit_link: a link needs at least two ranks");
  const LinearFit fit = fit_line(bytes, seconds);
  Link link;
  // A slope of zero or below (noise on sizes too small to see bandwidth)
  // leaves the bandwidth unknown rather than infinite.
  if (fit.slope > 0) link.busbw_gbs = bus_bandwidth_factor("all_reduce", ranks) / fit.slope * 1e-9;
  link.hop_latency_s = std::max(0.0, fit.intercept) / (2.0 * (ranks - 1));
  return link;
}

Link between_nodes(const ScaleInputs& in, const Fabric& fabric) {
  // `measured`: G ranks per node share the node's measured ring, so each
  // GPU's share of it is busbw / G (ring_all_reduce_s multiplies back by G).
  if (fabric.measured) return Link{in.intra.busbw_gbs / std::max(1, in.ranks_per_node), in.intra.hop_latency_s};
  return Link{fabric.gbs_per_gpu, fabric.hop_latency_s};
}

std::vector<ScalePoint> project_scale(const ScaleInputs& in, const Fabric& fabric, const std::vector<int>& nodes) {
  constexpr double kNoFigure = std::numeric_limits<double>::quiet_NaN();
  const int g = std::max(1, in.ranks_per_node);
  const Link inter = between_nodes(in, fabric);
  const double backward_window_s = 2.0 / 3.0 * in.step.compute_s;
  const auto comm_at = [&](int n) {
    double comm_s = 0;
    for (const double bytes : in.bucket_bytes) comm_s += ring_all_reduce_s(bytes, n, g, in.intra, inter);
    return comm_s * in.comm_slowdown;
  };
  // The exposed part of the 1-node collectives, at most all of them: depth
  // fits may put comm_exposed_s above comm_s (depth_projection_warnings says
  // so), and the rows below cap it at comm_s, so the 1-node row came out
  // below the step it was given (25 % more tokens/s than the headline).
  const double exposed_at_one_s = std::min(in.step.comm_exposed_s, comm_at(1));
  // Everything but the network stays as measured.
  const double fixed_s = in.step.step_s - exposed_at_one_s;
  const auto modelled_exposed_s = [&](double comm_s) {
    return std::max(0.0, comm_s - std::min(in.hidden_share * comm_s, backward_window_s));
  };
  // The model's exposure at 1 node (the measured ranks) next to the
  // measured one: h is a ratio of sums and the measured exposure a median,
  // so the model alone put 0.16 ms exposed where 0 was measured, and the
  // 1-node row missed the run it came from. The rows add the model's change.
  const double exposed_here_s = modelled_exposed_s(comm_at(1));
  std::vector<ScalePoint> points;
  for (const int n : nodes) {
    ScalePoint p;
    p.nodes = n;
    p.ranks = n * g;
    p.comm_s = comm_at(n);
    p.busbw_gbs = ring_busbw_gbs(n, g, in.intra, inter);
    // Exposed is a part of comm_s, never more (the measured median and the
    // model's change need not add up to at most it).
    p.comm_exposed_s =
        std::min(p.comm_s, std::max(0.0, exposed_at_one_s + modelled_exposed_s(p.comm_s) - exposed_here_s));
    p.step_s = fixed_s + p.comm_exposed_s;
    p.tokens_per_s = p.step_s > 0 ? in.tokens_per_rank_step * p.ranks / p.step_s : kNoFigure;
    points.push_back(p);
  }
  // Efficiency against one node, N/N0 as DESIGN.md defines it.
  double one_node = kNoFigure;
  bool one_node_given = false;
  for (const ScalePoint& p : points)
    if (p.nodes == 1) {
      one_node = p.tokens_per_s;
      one_node_given = true;
    }
  if (!one_node_given && !nodes.empty()) one_node = project_scale(in, fabric, {1}).front().tokens_per_s;
  for (ScalePoint& p : points)
    p.scaling_efficiency = one_node > 0 && p.tokens_per_s > 0 ? p.tokens_per_s / (p.nodes * one_node) : kNoFigure;
  return points;
}

double relative_error(double projected, double measured) {
  if (measured != 0) return (projected - measured) / std::fabs(measured);
  return projected == 0 ? 0.0 : std::numeric_limits<double>::quiet_NaN();
}

// step_s as `run`'s tokens/s takes it, the largest of the ranks' medians;
// the categories are the pacing rank's medians (the one with the most work
// of its own, which explains the pace); comm_s from the summary, which is
// that rank's too (the per-rank summary does not keep it). The pacing
// rank's own step_s was fitted before: 12.92 ms where `run` divided by
// 14.07 ms, a projection 9 % above the runs it was fitted to.
StepTimes measured_step_times(const RunSummary& s) {
  const RankSummary& slowest = s.ranks.at(static_cast<size_t>(s.slowest_rank));
  StepTimes t;
  for (const RankSummary& rank : s.ranks) t.step_s = std::max(t.step_s, rank.step_s);
  t.compute_s = slowest.compute_s;
  t.comm_s = s.comm_s.median;
  t.comm_exposed_s = slowest.comm_exposed_s;
  t.data_stall_s = slowest.data_stall_s;
  t.ckpt_stall_s = slowest.ckpt_stall_s;
  t.other_s = slowest.other_s;
  return t;
}

}  // namespace trainbench
