// Validation (a) of issue 10: the depth projection against a run it could
// have predicted. `trainbench project cpu-small --layers 2,4 --verify`
// trains 2 and 4 layers, projects cpu-small's 8, then trains 8 layers: the
// projected tokens/s must be within 10% of the measured. Shrunk for CI (one
// thread, micro-batch 1 × 128 tokens, 3 measured steps) but the per-layer
// cost still dominates: at 8 layers the layers are ~80% of the step.
// --repeats 5 interleaves the depths so a shared host's drifting speed
// (other builds on the same two cores) hits every depth alike, and shows the
// noise: an error over 10% while the middle three rounds of one depth
// differ by more than 10% cannot be told from the host's noise: the test
// runs it once more, and skips, saying so, when the second is as noisy,
// rather than fail at random (on a quiet CI runner the rounds agree within a
// few %); with quiet rounds it fails.
#include <gtest/gtest.h>

#include <algorithm>  // std::sort for the rounds
#include <cmath>      // std::fabs: the JSON's error is signed
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

// One `project --verify` run: its JSON, its tokens/s error, and the host's
// noise as it reaches the projection, printed: 8 layers from 2 and 4 is
// 3·T4 − 2·T2, which amplifies the rounds' noise, so the middle-three
// spreads of the depths (each about twice its median's error) count as
// (1.8·s4 + 0.8·s2 + s8) / 2 — the largest spread alone let rounds that each
// spread under 10% be judged on a projection 10% off by noise.
struct Attempt {
  nlohmann::json projection;
  double error = 0;
  double noise = 0;
  std::string noise_depth;
};

Attempt project_and_verify(const std::string& out) {
  const testing::CommandResult r = testing::run_command(
      // Two attempts of at most 280 s stay inside ctest's 600 s (two of 500 did not).
      std::string("timeout 280 ") + TRAINBENCH_BINARY +
      " project cpu-small --layers 2,4 --verify --repeats 5 --steps 4 --set train.warmup_steps=1"
      " --set train.micro_batch=1 --set model.seq_len=128 --set train.threads=1 --set data.readers=1"
      " --set checkpoint.every_steps=0 --set report.progress_every=0"
      // Each of the 15 runs times the GEMM ceiling first, which no check here reads.
      " --set report.gemm_ceiling_s=0.2 --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  Attempt a;
  std::map<std::string, double> spreads;
  if (r.exit_code != 0) return a;
  a.projection = nlohmann::json::parse(testing::read_whole_file(out));
  const nlohmann::json& p = a.projection;
  // The options the config does not hold, as run's result records its own.
  EXPECT_NE(p.value("command", "").find(" project cpu-small --layers 2,4 --verify --repeats 5"), std::string::npos)
      << p.value("command", "(none)");
  EXPECT_TRUE(p.contains("verify")) << r.out;
  if (!p.contains("verify")) return a;
  const nlohmann::json& verify = p.at("verify");
  a.error = std::fabs(verify.at("tokens_per_s_error").get<double>());  // signed in the JSON
  std::printf("depth projection 2,4 -> 8 layers of cpu-small: tokens/s projected %.2f, measured %.2f, error %.1f%%\n",
              p.at("depth").at("tokens_per_s").get<double>(), verify.at("tokens_per_s").get<double>(), 100 * a.error);
  for (const auto& [name, e] : verify.at("errors").items()) {
    if (e.is_null())  // projected where nothing was measured: no relative error
      std::printf("  %-15s error n/a (measured 0)\n", name.c_str());
    else
      std::printf("  %-15s error %.1f%%\n", name.c_str(), 100 * e.get<double>());
  }
  const auto spread = [&](const nlohmann::json& rounds, const std::string& depth) {
    std::vector<double> v = rounds.get<std::vector<double>>();
    std::sort(v.begin(), v.end());
    const size_t mid = v.size() / 2;
    const double s = v.size() >= 3 ? (v[mid + 1] - v[mid - 1]) / v[mid] : 0.0;
    std::printf("  %s layers: rounds' step_s middle-three spread %.1f%%\n", depth.c_str(), 100 * s);
    spreads[depth] = s;
    if (a.noise_depth.empty() || s > spreads[a.noise_depth]) a.noise_depth = depth;
  };
  for (const nlohmann::json& m : p.at("measured")) spread(m.at("round_step_s"), std::to_string(m.at("layers").get<int>()));
  spread(verify.at("round_step_s"), "8");
  a.noise = (1.8 * spreads["4"] + 0.8 * spreads["2"] + spreads["8"]) / 2;
  std::printf("  noise reaching the 8-layer projection %.1f%%\n", 100 * a.noise);
  return a;
}

TEST(DepthProjection, EightLayersOfCpuSmallFromTwoAndFourWithinTenPercent) {
  testing::TempDir dir("test_projection_depth");
  const std::string out = dir.file("projection.json");
  // A second attempt only when the first could not be judged: a run whose
  // rounds are quiet is judged at once, pass or fail.
  constexpr int kAttempts = 2;
  Attempt a;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    a = project_and_verify(out);
    if (::testing::Test::HasFailure()) return;
    // What no timing moves, judged whatever the noise (a noisy host's skip
    // below left these out too).
    const nlohmann::json& p = a.projection;
    const nlohmann::json& verify = p.at("verify");
    // State is affine in depth: the checkpoint size is projected exactly.
    EXPECT_NEAR(p.at("depth").at("checkpoint_bytes").get<double>(), verify.at("checkpoint_bytes").get<double>(),
                1.0);
    // The memory per rank at 8 layers is the plan the 8-layer engine reported.
    EXPECT_EQ(p.at("depth").at("memory_per_gpu_bytes").get<int64_t>(),
              verify.at("result").at("summary").at("memory_per_rank").at("total_bytes").get<int64_t>());
    if (a.error <= 0.10 || a.noise <= 0.10) break;
    std::printf("attempt %d of %d: host too noisy to judge (%.0f%% of noise reaches the projection; the "
                "noisiest rounds at %s layers)\n", attempt, kAttempts, 100 * a.noise, a.noise_depth.c_str());
    if (attempt == kAttempts)
      GTEST_SKIP() << "host too noisy to judge a 10% error in " << kAttempts << " attempts: "
                   << static_cast<int>(100 * a.noise) << "% of the rounds' noise reaches the projection (noisiest at "
                   << a.noise_depth << " layers; projection error was " << static_cast<int>(100 * a.error) << "%)";
  }
  const nlohmann::json& verify = a.projection.at("verify");
  EXPECT_LE(a.error, 0.10);
  // compute_s within 10%, or within the noise that reaches the projection
  // where that is larger (the loop above also ends on a small tokens/s error
  // from noisy rounds; compute_s then came out 11.5% off with 30% of noise).
  EXPECT_LE(std::fabs(verify.at("errors").at("compute_s").get<double>()), std::max(0.10, a.noise))
      << 100 * a.noise << "% of noise reaches the projection";
}

}  // namespace
}  // namespace trainbench
