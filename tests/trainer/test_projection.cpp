// The projection model (trainer/projection.h) on synthetic numbers with
// hand-computed answers, and `trainbench project`'s refusals of bad input.
#include "trainer/projection.h"

#include <gtest/gtest.h>

#include <unistd.h>  // getpid: the projection JSON's name

#include <cmath>  // std::isnan, std::signbit
#include <cstdio>  // std::remove
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace trainbench {
namespace {

// The fit takes step_s where `run`'s tokens/s does, the largest of the
// ranks' medians, and the categories from the pacing rank (the most work of
// its own), which need not be the same rank: it took the pacing rank's own
// step_s, 12.92 ms where `run` divided by 14.07 ms (a 9 % higher rate).
TEST(MeasuredStepTimes, StepIsTheLargestRanksAndTheCategoriesThePacingRanks) {
  RunSummary s;
  s.ranks = {RankSummary{0, "a", 0.01407, 0.006, 0.005, 0.0, 0.0, 0.003, 0.009},
             RankSummary{1, "a", 0.01292, 0.009, 0.001, 0.0, 0.0, 0.003, 0.012}};
  s.slowest_rank = 1;
  s.comm_s.median = 0.002;
  const StepTimes t = measured_step_times(s);
  EXPECT_EQ(t.step_s, 0.01407);
  EXPECT_EQ(t.compute_s, 0.009);
  EXPECT_EQ(t.comm_exposed_s, 0.001);
  EXPECT_EQ(t.comm_s, 0.002);
}

TEST(FitLine, TwoPointsGiveTheLineThroughThem) {
  // 1.0 s at 2 layers, 1.6 s at 4: 0.3 s per layer on top of 0.4 s.
  const LinearFit fit = fit_line({2, 4}, {1.0, 1.6});
  EXPECT_NEAR(fit.slope, 0.3, 1e-12);
  EXPECT_NEAR(fit.intercept, 0.4, 1e-12);
  EXPECT_NEAR(fit.at(8), 2.8, 1e-12);
}

TEST(FitLine, MorePointsAreLeastSquares) {
  // (1,1) (2,2) (3,2): mean x 2, mean y 5/3, Sxx 2, Sxy 1 -> slope 1/2, intercept 2/3.
  const LinearFit fit = fit_line({1, 2, 3}, {1, 2, 2});
  EXPECT_NEAR(fit.slope, 0.5, 1e-12);
  EXPECT_NEAR(fit.intercept, 2.0 / 3.0, 1e-12);
}

TEST(FitLine, RefusesWhatCannotBeFitted) {
  EXPECT_THROW(fit_line({2}, {1.0}), std::invalid_argument);
  EXPECT_THROW(fit_line({2, 2}, {1.0, 1.1}), std::invalid_argument);
  EXPECT_THROW(fit_line({2, 4}, {1.0}), std::invalid_argument);
}

TEST(ProjectDepth, EachCategoryIsFittedAndEvaluatedAtTheFullDepth) {
  // compute 0.1 + 0.05 L, exposed comm 0.01 L, data stall constant 0.02,
  // other shrinking 0.03 -> 0.01 (would be negative at 80 layers: clamped),
  // checkpoint 1000 + 500 L bytes.
  DepthPoint two{2, {}, 2000}, four{4, {}, 3000};
  two.times = {.step_s = 0.27, .compute_s = 0.2, .comm_s = 0.04, .comm_exposed_s = 0.02, .data_stall_s = 0.02,
               .ckpt_stall_s = 0, .other_s = 0.03};
  four.times = {.step_s = 0.37, .compute_s = 0.3, .comm_s = 0.08, .comm_exposed_s = 0.04, .data_stall_s = 0.02,
                .ckpt_stall_s = 0, .other_s = 0.01};
  const DepthProjection p = project_depth({two, four}, 80);
  EXPECT_NEAR(p.at_full.compute_s, 0.1 + 0.05 * 80, 1e-9);
  EXPECT_NEAR(p.at_full.comm_exposed_s, 0.01 * 80, 1e-9);
  EXPECT_NEAR(p.at_full.comm_s, 0.02 * 80, 1e-9);
  EXPECT_NEAR(p.at_full.data_stall_s, 0.02, 1e-9);
  EXPECT_EQ(p.at_full.other_s, 0.0);  // 0.05 - 0.01 L < 0
  EXPECT_NEAR(p.at_full.step_s, 0.17 + 0.05 * 80, 1e-9);
  EXPECT_NEAR(p.checkpoint_bytes_at_full, 1000 + 500 * 80, 1e-6);
  ASSERT_EQ(p.fits.size(), step_categories().size());
  EXPECT_NEAR(p.fits[1].slope, 0.05, 1e-12);  // compute_s
  EXPECT_THROW(project_depth({two}, 80), std::invalid_argument);
}

// Why a fit is not to be trusted (docs/projection.md, "Implausible fits").
const std::string kRemedy = "rerun with --repeats 3";

DepthPoint depth_point(int64_t layers, double step_s, double compute_s, double other_s = 0) {
  DepthPoint p{layers, {}, 1000.0 * static_cast<double>(layers)};
  p.times = {.step_s = step_s, .compute_s = compute_s, .other_s = other_s};
  return p;
}

bool any_starts_with(const std::vector<std::string>& lines, const std::string& prefix) {
  for (const std::string& line : lines)
    if (line.rfind(prefix, 0) == 0) return true;
  return false;
}

TEST(ProjectDepth, APlausibleFitHasNoWarnings) {
  // The fit above: every per-layer cost >= 0 but other_s's (a stall may
  // shrink), every category at 80 layers below the step.
  DepthPoint two = depth_point(2, 0.27, 0.2, 0.03), four = depth_point(4, 0.37, 0.3, 0.01);
  two.times.comm_s = 0.04;
  four.times.comm_s = 0.08;
  const std::vector<DepthPoint> points = {two, four};
  const DepthProjection p = project_depth(points, 80);
  EXPECT_TRUE(p.has_step());
  EXPECT_TRUE(depth_projection_warnings(points, p, 80, kRemedy).empty());
}

TEST(ProjectDepth, APerLayerCostBelowZeroIsAWarningWithTheRemedy) {
  // The probe's fit: 426 ms at 1 layer, 43.9 ms at 3: -191 ms per layer,
  // still 234.95 ms at 2. other_s falling too is a stall's noise: no warning.
  const std::vector<DepthPoint> points = {depth_point(1, 0.426, 0.42, 0.006), depth_point(3, 0.0439, 0.043, 0.0009)};
  const DepthProjection p = project_depth(points, 2);
  ASSERT_TRUE(p.has_step());
  const std::vector<std::string> warnings = depth_projection_warnings(points, p, 2, kRemedy);
  ASSERT_EQ(warnings.size(), 2u) << ::testing::PrintToString(warnings);
  EXPECT_EQ(warnings[0].rfind("step_s falls with depth between 1 and 3 layers (-191.05 ms per layer)", 0), 0u)
      << warnings[0];
  EXPECT_EQ(warnings[1].rfind("compute_s falls with depth between 1 and 3 layers", 0), 0u) << warnings[1];
  for (const std::string& w : warnings) EXPECT_EQ(w.substr(w.size() - kRemedy.size()), kRemedy) << w;
}

TEST(ProjectDepth, ACategoryAboveTheStepIsAWarning) {
  // compute 0.1 + 0.1 L against a step of 0.17 + 0.05 L: 8.1 s of compute in
  // a 4.17 s step at 80 layers.
  const std::vector<DepthPoint> points = {depth_point(2, 0.27, 0.3), depth_point(4, 0.37, 0.5)};
  const DepthProjection p = project_depth(points, 80);
  const std::vector<std::string> warnings = depth_projection_warnings(points, p, 80, kRemedy);
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(warnings);
  EXPECT_EQ(warnings[0].rfind("compute_s at 80 layers (8.100 s) exceeds step_s (4.170 s)", 0), 0u) << warnings[0];
}

TEST(ProjectDepth, ExposedCommAboveTheCommItIsPartOfIsAWarning) {
  // Two independent fits: comm 0.01 s flat, exposed 0.01 + 0.005 L, so
  // 0.05 s exposed of 0.01 s at 8 layers (both below the step).
  std::vector<DepthPoint> points = {depth_point(2, 0.3, 0.2), depth_point(4, 0.5, 0.4)};
  points[0].times.comm_s = points[1].times.comm_s = 0.01;
  points[0].times.comm_exposed_s = 0.02;
  points[1].times.comm_exposed_s = 0.03;
  const DepthProjection p = project_depth(points, 8);
  const std::vector<std::string> warnings = depth_projection_warnings(points, p, 8, kRemedy);
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(warnings);
  EXPECT_EQ(warnings[0].rfind("comm_exposed_s at 8 layers (50.00 ms) exceeds comm_s (10.00 ms)", 0), 0u)
      << warnings[0];
}

// A step fitted faster than the FLOPs allow had an MFU above 100 % and no word.
TEST(ProjectDepth, AProjectedMfuAboveOneIsAWarning) {
  const double none = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(projected_mfu_warning(0.45, 0.7, kRemedy), "");
  EXPECT_EQ(projected_mfu_warning(0.0, none, kRemedy), "");
  EXPECT_EQ(projected_mfu_warning(1.3, 1.9, kRemedy),
            "the projected step is faster than the GPU's datasheet peak allows (130% of it): the fitted step_s is "
            "too low; " + kRemedy);
  EXPECT_NE(projected_mfu_warning(3e9, none, kRemedy).find("(3e+11% of it)"), std::string::npos)
      << "a step fitted near zero: any share, said (an int overflowed)";
  EXPECT_EQ(projected_mfu_warning(0.0, 1.25, kRemedy),
            "the projected step is faster than the GEMM ceiling measured here allows (125% of it): the fitted "
            "step_s is too low; " + kRemedy);
}

TEST(ProjectDepth, AStepFittedAtOrBelowZeroIsNoStep) {
  // 0.4 s at 2 layers, 0.2 s at 4: -0.2 s at 8, not a step of 0.
  const std::vector<DepthPoint> points = {depth_point(2, 0.4, 0.35), depth_point(4, 0.2, 0.15)};
  const DepthProjection p = project_depth(points, 8);
  EXPECT_FALSE(p.has_step());
  EXPECT_NEAR(p.step_s_fitted, -0.2, 1e-12);
  EXPECT_EQ(p.at_full.step_s, 0.0);  // clamped like the stalls; has_step() says it is none
  const std::vector<std::string> warnings = depth_projection_warnings(points, p, 8, kRemedy);
  EXPECT_TRUE(any_starts_with(warnings, "step_s at 8 layers fits to -200.00 ms (<= 0): no tokens/s, MFU or scale"))
      << ::testing::PrintToString(warnings);
  // Nothing compared with a step that is not there.
  EXPECT_FALSE(any_starts_with(warnings, "compute_s at 8 layers")) << ::testing::PrintToString(warnings);
}

// nccl-tests: algbw = bytes / time, busbw = algbw * 2(n-1)/n. With no
// latency the model's time must give back exactly the busbw it was given.
TEST(RingModel, BusBandwidthIsNcclTestsFormula) {
  for (const int n : {2, 3, 4, 8, 64}) {
    const double bytes = 256e6;
    const double t = ring_all_reduce_s(bytes, 1, n, Link{12.5, 0}, Link{});
    const double algbw = bytes / t;
    EXPECT_NEAR(algbw * 2.0 * (n - 1) / n / 1e9, 12.5, 1e-9) << n << " ranks";
  }
  EXPECT_EQ(ring_all_reduce_s(1e9, 1, 1, Link{12.5, 1e-6}, Link{}), 0.0);  // one rank moves nothing
}

TEST(RingModel, AcrossNodesTheNicsOrTheNodeLimitAndEveryStepPaysItsHop) {
  // 4 nodes x 8 GPUs, NVLink ring 370 GB/s 3.4 us, NICs 47 GB/s 9.6 us:
  // busbw = min(370, 8 * 47 = 376) = 370; 2(32-4) = 56 intra steps, 2(4-1) = 6 inter.
  const Link nvlink{370, 3.4e-6}, nic{47, 9.6e-6};
  EXPECT_DOUBLE_EQ(ring_busbw_gbs(4, 8, nvlink, nic), 370);
  const double expected = 2.0 * 31 / 32 * 1e9 / 370e9 + 56 * 3.4e-6 + 6 * 9.6e-6;
  EXPECT_NEAR(ring_all_reduce_s(1e9, 4, 8, nvlink, nic), expected, 1e-12);
  // Slower NICs limit: 8 * 25 = 200 GB/s.
  EXPECT_DOUBLE_EQ(ring_busbw_gbs(2, 8, nvlink, Link{25, 0}), 200);
  // One GPU per node: the NIC alone.
  EXPECT_DOUBLE_EQ(ring_busbw_gbs(2, 1, Link{}, Link{25, 0}), 25);
  EXPECT_THROW(ring_all_reduce_s(1e6, 1, 2, Link{}, Link{25, 0}), std::invalid_argument);
}

TEST(RingModel, FitLinkRecoversBandwidthAndLatency) {
  // 4 ranks, busbw 5 GB/s, 20 us per step: t = 6 * 20 us + 1.5 * bytes / 5e9.
  std::vector<double> bytes, seconds;
  for (const double b : {65536.0, 262144.0, 1048576.0, 4194304.0}) {
    bytes.push_back(b);
    seconds.push_back(ring_all_reduce_s(b, 1, 4, Link{5, 20e-6}, Link{}));
  }
  const Link link = fit_link(bytes, seconds, 4);
  EXPECT_NEAR(link.busbw_gbs, 5, 1e-9);
  EXPECT_NEAR(link.hop_latency_s, 20e-6, 1e-12);
  EXPECT_THROW(fit_link(bytes, seconds, 1), std::invalid_argument);
}

TEST(Fabric, PresetsAndGivenFigures) {
  const Fabric ib = parse_fabric("ib-ndr400");
  EXPECT_DOUBLE_EQ(ib.gbs_per_gpu, 47);
  EXPECT_DOUBLE_EQ(ib.hop_latency_s, 9.6e-6);
  EXPECT_FALSE(ib.assumption.empty());
  const Fabric roce = parse_fabric("roce400");
  EXPECT_LT(roce.gbs_per_gpu, ib.gbs_per_gpu);
  EXPECT_TRUE(parse_fabric("measured").measured);
  const Fabric given = parse_fabric("12.5,20");
  EXPECT_DOUBLE_EQ(given.gbs_per_gpu, 12.5);
  EXPECT_DOUBLE_EQ(given.hop_latency_s, 20e-6);
  EXPECT_DOUBLE_EQ(parse_fabric("0.03125,0").hop_latency_s, 0);
  // -0 is 0, not "-0 us" in the report and -0.0 in the JSON.
  const Fabric negative_zero = parse_fabric("+5,-0");
  EXPECT_FALSE(std::signbit(negative_zero.hop_latency_s));
  EXPECT_EQ(negative_zero.assumption, "as given: 5 GB/s per GPU achieved, 0 us per ring step");
}

TEST(Fabric, BadTextNamesWhatIsWrong) {
  const std::pair<const char*, const char*> cases[] = {
      {"ib-ndr800", "is not ib-ndr400, roce400, measured or <GB/s>,<us>"},
      {"", "is not ib-ndr400"},
      {"25", "is not ib-ndr400"},
      {"fast,1", "the bandwidth 'fast' is not a number"},
      {"25,", "the latency '' is not a number"},
      {"25,1us", "the latency '1us' is not a number"},
      {"0,1", "the bandwidth must be > 0"},
      {"-3,1", "the bandwidth must be > 0"},
      {"25,-1", "the latency must be >= 0"},
      {"1e-320,0", "the bandwidth must be between 0.001 and 1e6 GB/s"},
      {"1e308,1e308", "the bandwidth must be between 0.001 and 1e6 GB/s"},
      {"25,1e308", "the latency must be at most 1e6 us"},
      {"inf,1", "is not a number"},
      {"0x10,1", "the bandwidth '0x10' is not a number"},  // strtod read hex: 16 GB/s
      {"+-5,1", "the bandwidth '+-5' is not a number"},     // read as -5: "must be > 0"
      {"1e400,1", "the bandwidth '1e400' is out of range"},  // a number, past a double
      {"5,1e-400", "the latency '1e-400' is out of range"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      parse_fabric(text);
      ADD_FAILURE() << "'" << text << "' was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << text << ": " << e.what();
    }
  }
}

TEST(ProjectScale, ExposedCommAddsToTheStepAndOverlapIsCappedByBackward) {
  ScaleInputs in;
  in.step = {.step_s = 1.1, .compute_s = 1.0, .other_s = 0.1};
  in.bucket_bytes = {1e9};
  in.ranks_per_node = 1;
  in.tokens_per_rank_step = 1000;
  const Fabric fabric = parse_fabric("10,0");
  // No overlap: 2 nodes add 2*1/2 * 1e9 / 10e9 = 0.1 s.
  std::vector<ScalePoint> t = project_scale(in, fabric, {1, 2, 4});
  ASSERT_EQ(t.size(), 3u);
  EXPECT_DOUBLE_EQ(t[0].step_s, 1.1);
  EXPECT_NEAR(t[0].tokens_per_s, 1000 / 1.1, 1e-9);
  EXPECT_NEAR(t[1].comm_s, 0.1, 1e-12);
  EXPECT_NEAR(t[1].step_s, 1.2, 1e-12);
  EXPECT_NEAR(t[1].tokens_per_s, 2000 / 1.2, 1e-9);
  EXPECT_NEAR(t[1].scaling_efficiency, 1.1 / 1.2, 1e-12);
  EXPECT_NEAR(t[2].comm_s, 0.15, 1e-12);  // 2*3/4 * 0.1 s
  EXPECT_DOUBLE_EQ(t[2].busbw_gbs, 10);

  // Half the all-reduce hidden, but backward (2/3 of 0.3 s compute) hides
  // at most 0.2 s of the 1 s all-reduce of 1e10 bytes at 2 nodes.
  in.step = {.step_s = 0.3, .compute_s = 0.3};
  in.hidden_share = 0.5;
  in.bucket_bytes = {1e10};
  t = project_scale(in, fabric, {2});
  EXPECT_NEAR(t[0].comm_s, 1.0, 1e-12);
  EXPECT_NEAR(t[0].comm_exposed_s, 0.8, 1e-12);
  EXPECT_NEAR(t[0].step_s, 1.1, 1e-12);
  EXPECT_NEAR(t[0].scaling_efficiency, 0.3 / 1.1, 1e-12);  // against 1 node, even when not in the table
}

// The 1-node row is the run it came from: the model's own exposure at the
// measured ranks (h is a ratio of sums, the measured exposure a median)
// replaced the measured one, 0.16 ms exposed where 0 was measured.
TEST(ProjectScale, OneNodeReproducesTheGivenStepAndTheRowsAddTheModelsChange) {
  ScaleInputs in;
  in.step = {.step_s = 1.0, .compute_s = 0.9, .comm_s = 0.2, .comm_exposed_s = 0.0};
  in.hidden_share = 0.5;
  in.bucket_bytes = {4e8};
  in.ranks_per_node = 2;
  in.tokens_per_rank_step = 100;
  in.intra = Link{4, 0};
  const Fabric fabric = parse_fabric("2,0");
  const std::vector<ScalePoint> t = project_scale(in, fabric, {1, 2});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_DOUBLE_EQ(t[0].comm_exposed_s, 0.0);
  EXPECT_DOUBLE_EQ(t[0].step_s, 1.0);
  EXPECT_DOUBLE_EQ(t[0].tokens_per_s, 200.0);
  // The model's exposure, half the all-reduce, at 2 nodes less at 1.
  const double one = ring_all_reduce_s(4e8, 1, 2, in.intra, Link{4, 0});
  const double two = ring_all_reduce_s(4e8, 2, 2, in.intra, Link{2, 0});
  EXPECT_NEAR(t[1].comm_exposed_s, 0.5 * two - 0.5 * one, 1e-12);
  EXPECT_NEAR(t[1].step_s, 1.0 + 0.5 * two - 0.5 * one, 1e-12);
}

// Fitted exposure above the collectives it is part of: the rows cap it at
// comm_s, and the 1-node row came out below the step it was given (80 ms of
// 100: 25 % more tokens/s than the headline). It is the given step still.
TEST(ProjectScale, OneNodeIsTheGivenStepWhenTheFitsPutExposureAboveComm) {
  ScaleInputs in;
  in.bucket_bytes = {4e8};
  in.ranks_per_node = 2;
  in.tokens_per_rank_step = 100;
  in.intra = Link{4, 0};
  const double comm_one = ring_all_reduce_s(4e8, 1, 2, in.intra, Link{2, 0});
  in.step = {.step_s = 1.0, .compute_s = 0.8, .comm_s = comm_one, .comm_exposed_s = 3 * comm_one};
  const std::vector<ScalePoint> t = project_scale(in, parse_fabric("2,0"), {1, 2});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_DOUBLE_EQ(t[0].comm_exposed_s, comm_one);
  EXPECT_DOUBLE_EQ(t[0].step_s, 1.0);
  EXPECT_DOUBLE_EQ(t[0].tokens_per_s, 200.0);
  EXPECT_LE(t[1].comm_exposed_s, t[1].comm_s);
  EXPECT_GE(t[1].step_s, t[0].step_s) << "more nodes, no less network time";
}

// A line rate typed as Gb/s (400 for NDR: 8.5 times the fabric) and a
// slowdown measured on shared CPU cores (x108 here) kept at every node count
// were taken without a word.
TEST(ProjectScale, DoubtfulInputsOfTheTableAreWarnings) {
  EXPECT_TRUE(scale_input_warnings(parse_fabric("ib-ndr400"), 1.1).empty());
  EXPECT_TRUE(scale_input_warnings(parse_fabric("100,5"), 2.0).empty());
  const std::vector<std::string> gbits = scale_input_warnings(parse_fabric("400,5"), 1.0);
  ASSERT_EQ(gbits.size(), 1u) << ::testing::PrintToString(gbits);
  EXPECT_EQ(gbits[0].rfind("--fabric 400,5: 400 GB/s per GPU is above any network NIC's rate", 0), 0u) << gbits[0];
  const std::vector<std::string> slowed = scale_input_warnings(parse_fabric("measured"), 108.85);
  ASSERT_EQ(slowed.size(), 1u) << ::testing::PrintToString(slowed);
  EXPECT_EQ(slowed[0].rfind("training slowed the all-reduce here x108.85 against the model", 0), 0u) << slowed[0];
}

// A stall projected where none was measured has no relative error: it read
// "0 %" under --verify.
TEST(Projection, RelativeErrorAgainstAMeasuredZeroIsNoFigure) {
  EXPECT_NEAR(relative_error(1.1, 1.0), 0.1, 1e-12);
  EXPECT_NEAR(relative_error(0.9, 1.0), -0.1, 1e-12) << "signed: a projection below the measured figure";
  EXPECT_EQ(relative_error(0.0, 0.0), 0.0);
  EXPECT_TRUE(std::isnan(relative_error(0.002, 0.0)));
}

TEST(ProjectScale, AStepNotAboveZeroHasNoRateRatherThanZero) {
  // A step fitted below zero (depth fits that disagree): no rate at any
  // node count, tokens/s and the efficiencies no figures (NaN: null in the
  // JSON), never 0.
  ScaleInputs in;
  in.step = {.step_s = -0.01, .compute_s = 0.005, .comm_exposed_s = 0.02};
  in.tokens_per_rank_step = 1000;
  const std::vector<ScalePoint> t = project_scale(in, parse_fabric("10,0"), {1, 2});
  ASSERT_EQ(t.size(), 2u);
  for (const ScalePoint& p : t) {
    EXPECT_LE(p.step_s, 0.0);
    EXPECT_TRUE(std::isnan(p.tokens_per_s)) << p.tokens_per_s;
    EXPECT_TRUE(std::isnan(p.scaling_efficiency)) << p.scaling_efficiency;
  }
}

TEST(ProjectScale, TrainingsSlowdownOfTheCollectivesIsKept) {
  // Training measured its all-reduce at 1.5x the model's time alone: 2 nodes
  // at 10 GB/s take 1.5 * 0.1 s, and 1 node of one rank still none.
  ScaleInputs in;
  in.step = {.step_s = 1.0, .compute_s = 1.0};
  in.bucket_bytes = {1e9};
  in.tokens_per_rank_step = 1000;
  in.comm_slowdown = 1.5;
  const std::vector<ScalePoint> t = project_scale(in, parse_fabric("10,0"), {1, 2});
  EXPECT_EQ(t[0].comm_s, 0.0);
  EXPECT_NEAR(t[1].comm_s, 0.15, 1e-12);
  EXPECT_NEAR(t[1].step_s, 1.15, 1e-12);
}

TEST(ProjectScale, MeasuredFabricJoinsNodesLikeTheRanksHere) {
  // 2 ranks measured at 4 GB/s, 50 us per step; 2 "nodes" of them = a ring of 4.
  ScaleInputs in;
  in.step = {.step_s = 1.0, .compute_s = 0.9, .comm_exposed_s = 0.0};
  in.bucket_bytes = {4e8};
  in.ranks_per_node = 2;
  in.tokens_per_rank_step = 100;
  in.intra = Link{4, 50e-6};
  const std::vector<ScalePoint> t = project_scale(in, parse_fabric("measured"), {2});
  EXPECT_NEAR(t[0].comm_s, ring_all_reduce_s(4e8, 1, 4, in.intra, in.intra), 1e-12);
  EXPECT_NEAR(t[0].busbw_gbs, 4, 1e-12);
}

// A fabric of 1e-300 GB/s makes 1e300-second collectives: "%.3f s" of that
// ran past the text's buffer and printed digits without a unit.
TEST(SecondsText, KeepsItsUnitAtAnyMagnitude) {
  EXPECT_EQ(seconds_text(0.01234), "12.34 ms");
  EXPECT_EQ(seconds_text(1.5), "1.500 s");
  EXPECT_EQ(seconds_text(-2.0), "-2.000 s");
  EXPECT_EQ(seconds_text(1e300), "1.000e+300 s");
  EXPECT_EQ(seconds_text(-3e7), "-3.000e+07 s");
}

TEST(ProjectCommand, BadInputIsOneLineAndExitTwo) {
  using testing::run_command;
  const std::string bin = TRAINBENCH_BINARY;
  const std::pair<std::string, std::string> cases[] = {
      {" project tiny --fabric ib-ndr800", "--fabric 'ib-ndr800' is not ib-ndr400, roce400, measured"},
      {" project tiny --fabric 10,-2", "--fabric '10,-2': the latency must be >= 0 us"},
      {" project tiny --layers 2,2", "--layers: each depth once"},
      {" project tiny --nodes 1,2,1", "--nodes: each node count once"},  // was dropped without a word
      {" project tiny --layers 0,2", "--layers"},
      {" project tiny --fabric measured --layers 2", "--fabric measured: needs at least 2 ranks"},
      {" project tiny --layers 2 --set model.n_layers_full=8", "one depth cannot be fitted"},
      {" project tiny --set model.n_layers_full=-1", "model.n_layers_full: must be >= 0"},
      {" project tiny --out /nonexistent-dir/p.json", "--out /nonexistent-dir/p.json: directory"},
      {" project tiny --set report.instrument=false", "report.instrument=false: project fits each depth's per-step"},
      // The option typed, as `run` names it, not the config layer's --set.
      {" project tiny --steps 2", "trainbench: --steps 2: train.warmup_steps: 5 must be < train.steps (2)"},
  };
  for (const auto& [args, expected] : cases) {
    const testing::CommandResult r = run_command("timeout 60 " + bin + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": more than one line: " << r.err;
  }
}

// A depth that cannot fit is refused before the first depth trains: a
// --verify full depth (or a deep --layers) ended the command after the other
// depths had trained, with no projection written. (65536 layers of tiny at
// micro-batch 1024 want ~26 TiB: no machine's memory.)
TEST(ProjectCommand, ADepthThatDoesNotFitIsRefusedBeforeAnyTrains) {
  using testing::run_command;
  const std::string bin = TRAINBENCH_BINARY;
  const testing::CommandResult verify = run_command(
      "timeout 60 " + bin + " project tiny --layers 2,4 --set model.n_layers_full=65536 --set train.micro_batch=1024 --verify --steps 7");
  EXPECT_EQ(verify.exit_code, 3) << verify.err;
  EXPECT_EQ(verify.err.rfind("trainbench: project: 65536 layers (--verify, the full depth): model needs ", 0), 0u)
      << verify.err;
  EXPECT_NE(verify.err.find("; or leave out --verify"), std::string::npos) << verify.err;
  EXPECT_EQ(verify.out.find("=== project: training"), std::string::npos) << "nothing trained: " << verify.out;
  const testing::CommandResult deep = run_command("timeout 60 " + bin + " project tiny --layers 2,65536 --set train.micro_batch=1024 --steps 7");
  EXPECT_EQ(deep.exit_code, 3) << deep.err;
  EXPECT_EQ(deep.err.rfind("trainbench: project: 65536 layers: model needs ", 0), 0u) << deep.err;
  EXPECT_EQ(deep.out.find("=== project: training"), std::string::npos) << deep.out;
}

// A short run at two depths: whatever its noise fits, the JSON has its
// warnings (printed too), and tokens/s is a positive figure or null with
// exit 4, never 0.
TEST(ProjectCommand, WarningsAreInTheJsonAndTokensPerSecondIsNeverZero) {
  using testing::run_command;
  const std::string out = "/tmp/trainbench_test_projection_" + std::to_string(::getpid()) + ".json";
  const testing::CommandResult r =
      run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                  " project tiny --steps 5 --set train.warmup_steps=2 --layers 1,2 --nodes 1,2 --out " + out);
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 4) << r.out << r.err;
  std::ifstream file(out);
  const nlohmann::json p = nlohmann::json::parse(file);
  std::remove(out.c_str());
  ASSERT_TRUE(p.at("warnings").is_array()) << p.dump();
  for (const nlohmann::json& warning : p.at("warnings"))
    EXPECT_NE(r.out.find("warning    " + warning.get<std::string>()), std::string::npos) << r.out;
  const nlohmann::json& tokens_per_s = p.at("depth").at("tokens_per_s");
  if (tokens_per_s.is_null()) {
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_FALSE(p.at("warnings").empty());
    EXPECT_TRUE(p.at("scale").at("table").is_null());
    EXPECT_EQ(r.err.rfind("trainbench: project: step_s at ", 0), 0u) << r.err;
  } else {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_GT(tokens_per_s.get<double>(), 0.0);
    ASSERT_FALSE(p.at("scale").at("table").empty()) << "no row to judge: " << p.at("scale").dump();
    for (const nlohmann::json& row : p.at("scale").at("table"))
      EXPECT_TRUE(row.at("tokens_per_s").is_null() || row.at("tokens_per_s").get<double>() > 0) << row.dump();
  }
}

// report.gemm_ceiling_s=0: the projection's MFU against the GEMM ceiling is
// null and n/a, not 0 % of a 0 FLOP/s ceiling.
TEST(ProjectCommand, NoGemmCeilingIsNotAnMfuOfZero) {
  using testing::run_command;
  const std::string out = "/tmp/trainbench_test_projection_nogemm_" + std::to_string(::getpid()) + ".json";
  const testing::CommandResult r =
      run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                  " project tiny --steps 5 --set train.warmup_steps=2 --layers 1,2 --set report.gemm_ceiling_s=0"
                  " --out " + out);
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 4) << r.out << r.err;
  std::ifstream file(out);
  const nlohmann::json p = nlohmann::json::parse(file);
  std::remove(out.c_str());
  EXPECT_TRUE(p.at("depth").at("mfu_vs_gemm_ceiling").is_null()) << p.at("depth").dump();
  if (r.exit_code == 0) {
    EXPECT_NE(r.out.find("n/a against the GEMM ceiling (not timed)"), std::string::npos) << r.out;
  }
  EXPECT_EQ(r.out.find("% of the GEMM ceiling"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace trainbench
