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
#include <cstdint>
#include <cstdio>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

// One `project --verify` run: its JSON, its tokens/s error, and the largest
// middle-three spread of the rounds of any depth (the host's noise), printed.
struct Attempt {
  nlohmann::json projection;
  double error = 0;
  double noise = 0;
  std::string noise_depth;
};

Attempt project_and_verify(const std::string& out) {
  const testing::CommandResult r = testing::run_command(
      std::string("timeout 500 ") + TRAINBENCH_BINARY +
      " project cpu-small --layers 2,4 --verify --repeats 5 --steps 4 --set train.warmup_steps=1"
      " --set train.micro_batch=1 --set model.seq_len=128 --set train.threads=1 --set data.readers=1"
      " --set checkpoint.every_steps=0 --set report.progress_every=0 --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  Attempt a;
  if (r.exit_code != 0) return a;
  a.projection = nlohmann::json::parse(testing::read_whole_file(out));
  const nlohmann::json& p = a.projection;
  EXPECT_TRUE(p.contains("verify")) << r.out;
  if (!p.contains("verify")) return a;
  const nlohmann::json& verify = p.at("verify");
  a.error = verify.at("tokens_per_s_error").get<double>();
  std::printf("depth projection 2,4 -> 8 layers of cpu-small: tokens/s projected %.2f, measured %.2f, error %.1f%%\n",
              p.at("depth").at("tokens_per_s").get<double>(), verify.at("tokens_per_s").get<double>(), 100 * a.error);
  for (const auto& [name, e] : verify.at("errors").items())
    std::printf("  %-15s error %.1f%%\n", name.c_str(), 100 * e.get<double>());
  const auto spread = [&](const nlohmann::json& rounds, const std::string& depth) {
    std::vector<double> v = rounds.get<std::vector<double>>();
    std::sort(v.begin(), v.end());
    const size_t mid = v.size() / 2;
    const double s = v.size() >= 3 ? (v[mid + 1] - v[mid - 1]) / v[mid] : 0.0;
    std::printf("  %s layers: rounds' step_s middle-three spread %.1f%%\n", depth.c_str(), 100 * s);
    if (s > a.noise) {
      a.noise = s;
      a.noise_depth = depth;
    }
  };
  for (const nlohmann::json& m : p.at("measured")) spread(m.at("round_step_s"), std::to_string(m.at("layers").get<int>()));
  spread(verify.at("round_step_s"), "8");
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
    if (a.error <= 0.10 || a.noise <= 0.10) break;
    std::printf("attempt %d of %d: host too noisy to judge (rounds at %s layers %.0f%% apart)\n", attempt,
                kAttempts, a.noise_depth.c_str(), 100 * a.noise);
    if (attempt == kAttempts)
      GTEST_SKIP() << "host too noisy to judge a 10% error in " << kAttempts << " attempts: the middle rounds at "
                   << a.noise_depth << " layers differ by " << static_cast<int>(100 * a.noise)
                   << "% (projection error was " << static_cast<int>(100 * a.error) << "%)";
  }
  const nlohmann::json& p = a.projection;
  const nlohmann::json& verify = p.at("verify");
  EXPECT_LE(a.error, 0.10);
  EXPECT_LE(verify.at("errors").at("compute_s").get<double>(), 0.10);
  // State is affine in depth: the checkpoint size is projected exactly.
  EXPECT_NEAR(p.at("depth").at("checkpoint_bytes").get<double>(), verify.at("checkpoint_bytes").get<double>(), 1.0);
  // Memory per GPU at 8 layers is the plan the 8-layer engine reported.
  EXPECT_EQ(p.at("depth").at("memory_per_gpu_bytes").get<int64_t>(),
            verify.at("result").at("summary").at("memory_per_rank").at("total_bytes").get<int64_t>());
}

}  // namespace
}  // namespace trainbench
