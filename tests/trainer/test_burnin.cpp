// Burn-in's pure parts (trainer/burnin.h) without a job: durations, the
// golden step on the CPU engine, majority, straggler, drift, degradation,
// baseline and the verdict table. The MPI tests (test_burnin_mpi.cpp) run
// the whole command.
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/engine.h"
#include "kernels/gpu_health.h"
#include "tests/support/temp_dir.h"
#include "trainer/burnin.h"
#include "trainer/config.h"  // default_model_shape

namespace trainbench {
namespace {

TEST(BurninDuration, AcceptsSecondsMinutesHours) {
  EXPECT_DOUBLE_EQ(parse_duration("45"), 45);
  EXPECT_DOUBLE_EQ(parse_duration("90s"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("30m"), 1800);
  EXPECT_DOUBLE_EQ(parse_duration("2h"), 7200);
  EXPECT_DOUBLE_EQ(parse_duration("1.5h"), 5400);
}

TEST(BurninDuration, RefusesBadValuesNamingThem) {
  for (const std::string bad : {"", "0", "-5m", "2d", "h", "abc", "5 m", "nan", "1e400"}) {
    try {
      parse_duration(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--duration " + bad + ":"), std::string::npos) << e.what();
    }
  }
}

std::unique_ptr<TrainingEngine> tiny_engine() {
  EngineOptions options;
  options.shape = default_model_shape();
  options.micro_batch = 2;
  options.device = "cpu";
  options.threads = 1;
  std::unique_ptr<TrainingEngine> engine = make_engine(options);
  engine->init_parameters(7);
  return engine;
}

TEST(BurninGolden, RepeatsBitForBitAndLeavesTheParametersAlone) {
  std::unique_ptr<TrainingEngine> engine = tiny_engine();
  std::vector<float> before(static_cast<size_t>(engine->layout().total_params()));
  engine->get_parameters(before.data());
  const GoldenValue first = compute_golden_step(*engine, 1234, false);
  const GoldenValue second = compute_golden_step(*engine, 1234, false);
  EXPECT_EQ(first, second);
  std::vector<float> after(before.size());
  engine->get_parameters(after.data());
  EXPECT_EQ(before, after) << "the training's parameters are put back";
  // Another engine, same seed: the same value (what ranks compare).
  std::unique_ptr<TrainingEngine> other = tiny_engine();
  EXPECT_EQ(compute_golden_step(*other, 1234, false), first);
  EXPECT_NE(compute_golden_step(*engine, 99, false), first) << "the seed picks the weights and the batch";
  // Weights made once and handed in: the same value.
  std::unique_ptr<TrainingEngine> maker = tiny_engine();
  maker->init_parameters(1234);
  std::vector<float> golden(before.size());
  maker->get_parameters(golden.data());
  EXPECT_EQ(compute_golden_step(*engine, 1234, false, golden.data()), first);
}

TEST(BurninGolden, OneFlippedGradientBitChangesTheChecksumOnly) {
  std::unique_ptr<TrainingEngine> engine = tiny_engine();
  const GoldenValue clean = compute_golden_step(*engine, 1234, false);
  const GoldenValue flipped = compute_golden_step(*engine, 1234, true);
  EXPECT_EQ(flipped.loss_bits, clean.loss_bits);
  EXPECT_NE(flipped.gradient_checksum, clean.gradient_checksum);
  EXPECT_EQ(compute_golden_step(*engine, 1234, false), clean) << "the flip does not stay in the engine";
}

TEST(BurninGolden, MajorityNeedsMoreThanHalf) {
  const GoldenValue a{1, 2}, b{1, 3};
  EXPECT_EQ(majority_value({a, a, b}), a);
  EXPECT_FALSE(majority_value({a, b}).has_value());
  EXPECT_EQ(majority_value({a}), a);
  EXPECT_FALSE(majority_value({a, a, b, b}).has_value());
}

TEST(BurninStraggler, ComparesWithTheOtherRanksMedian) {
  const std::vector<double> own = {0.100, 0.102, 0.099, 0.150};
  EXPECT_EQ(straggler_finding(own, 0, 10), "");
  const std::string slow = straggler_finding(own, 3, 10);
  EXPECT_NE(slow.find("straggler"), std::string::npos);
  EXPECT_NE(slow.find("150.0 ms"), std::string::npos) << slow;
  EXPECT_NE(slow.find("+50%"), std::string::npos) << slow;
  EXPECT_EQ(straggler_finding(own, 3, 60), "") << "within a looser threshold";
  EXPECT_EQ(straggler_finding({0.1}, 0, 10), "") << "one rank has no peers";
  // Two ranks: the slow one is named, not the fast one.
  EXPECT_EQ(straggler_finding({0.05, 0.10}, 0, 10), "");
  EXPECT_NE(straggler_finding({0.05, 0.10}, 1, 10), "");
}

TEST(BurninDrift, FirstAndLastTenth) {
  std::vector<double> steps(100, 0.1);
  for (size_t i = 90; i < 100; ++i) steps[i] = 0.125;  // the last tenth 20% slower in tokens/s
  const Drift drift = measure_drift(steps, 1000);
  ASSERT_TRUE(drift.judged);
  EXPECT_DOUBLE_EQ(drift.first_tokens_per_s, 10000);
  EXPECT_DOUBLE_EQ(drift.last_tokens_per_s, 8000);
  EXPECT_NEAR(drift.change, -0.2, 1e-12);
  EXPECT_FALSE(measure_drift(std::vector<double>(19, 0.1), 1000).judged);
}

TEST(BurninDegradation, FlagsADropBeyondThePercentage) {
  EXPECT_EQ(degradation_finding("busbw", 100, 95, 10, "GB/s"), "");
  EXPECT_EQ(degradation_finding("busbw", 100, 150, 10, "GB/s"), "") << "a rise is not a drop";
  const std::string drop = degradation_finding("busbw", 100, 80, 10, "GB/s");
  EXPECT_NE(drop.find("busbw fell from 100 GB/s to 80 GB/s (-20%"), std::string::npos) << drop;
  EXPECT_EQ(degradation_finding("busbw", 0, 80, 10, "GB/s"), "") << "not measured at the start";
}

TEST(BurninBaseline, ReadsRunAndBurninResultsAndNamesWhatFellBelow) {
  testing::TempDir dir("test_burnin");
  const std::string path = dir.file("known_good.json");
  std::ofstream(path) << R"({"summary": {"tokens_per_s": 1000},
                             "burnin": {"fabric": {"busbw_gbs": 100}, "storage": {"write_gbs": 2}}})";
  const BaselineFigures known = read_baseline(path);
  EXPECT_EQ(known.tokens_per_s, 1000);
  EXPECT_EQ(known.busbw_gbs, 100);
  EXPECT_EQ(known.write_gbs, 2);
  EXPECT_TRUE(compare_with_baseline({950, 95, 1.9}, known, 10).empty());
  const std::vector<std::string> below = compare_with_baseline({500, 95, 1.0}, known, 10);
  ASSERT_EQ(below.size(), 2u);
  EXPECT_NE(below[0].find("tokens/s 500 is below the baseline's 1e+03 (-50%"), std::string::npos) << below[0];
  EXPECT_NE(below[1].find("checkpoint write 1 GB/s is below the baseline's 2 GB/s"), std::string::npos) << below[1];
  EXPECT_TRUE(compare_with_baseline({0, 0, 0}, known, 10).empty()) << "figures not measured are not judged";

  std::ofstream(dir.file("empty.json")) << R"({"schema": "x"})";
  std::ofstream(dir.file("broken.json")) << "{ not json";
  for (const std::string& bad : {dir.file("missing.json"), dir.file("empty.json"), dir.file("broken.json")}) {
    try {
      read_baseline(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--baseline " + bad + ":"), std::string::npos) << e.what();
    }
  }
}

TEST(BurninVerdict, TableAndJsonSayPassOrFailAndWhy) {
  Verdict verdict;
  verdict.gpus.emplace_back("rank 0", "node-a");
  verdict.gpus.emplace_back("rank 1", "node-a");
  verdict.gpus[1].fail("silent data corruption: golden step differs");
  verdict.nodes.emplace_back("node", "node-a");
  verdict.nodes[0].fail("rank 1 failed");
  verdict.job.notes.push_back("tokens/s 12 k");
  EXPECT_FALSE(verdict.passed());
  const std::string table = verdict_table(verdict);
  EXPECT_NE(table.find("burn-in verdict: FAIL (1/2 GPUs, 0/1 nodes, job PASS)"), std::string::npos) << table;
  EXPECT_NE(table.find("rank 1  node-a  FAIL  silent data corruption"), std::string::npos) << table;
  EXPECT_NE(table.find("rank 0  node-a  PASS"), std::string::npos) << table;
  const nlohmann::json j = verdict_to_json(verdict);
  EXPECT_EQ(j["verdict"], "FAIL");
  EXPECT_EQ(j["gpus"][1]["verdict"], "FAIL");
  EXPECT_EQ(j["gpus"][1]["failures"][0], "silent data corruption: golden step differs");
  EXPECT_EQ(j["job"]["verdict"], "PASS");
}

// Without a GPU (CI) the probe is absent and says why; on a GPU machine
// (gpu_check.sh) it reads the GPU the engine would use.
TEST(BurninGpuHealth, OpensTheGpuOrSaysWhyNot) {
  std::string why_not;
  const std::unique_ptr<GpuHealthProbe> probe = open_gpu_health(0, &why_not);
  if (probe == nullptr) {
    EXPECT_FALSE(why_not.empty());
    return;
  }
  const GpuHealthSample sample = probe->sample();
  EXPECT_GT(sample.temperature_c, 0) << probe->gpu_name();
  EXPECT_GT(sample.sm_clock_mhz, 0);
  EXPECT_GE(sample.clock_event_reasons, 0);
}

}  // namespace
}  // namespace trainbench
