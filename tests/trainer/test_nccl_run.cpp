// The NCCL backend in a real run, where a GPU is present: tiny on the CUDA
// engine with comm.backend=nccl at world size 1 (the gradient buckets are
// all-reduced through NCCL even so: trainer/train_loop.cpp) trains like the
// same run with comm.backend=local, which has no all-reduce at all, and
// passes its checks (step_time_accounted: the end of backward is taken on
// the device, not when it was enqueued). Small buckets, so that several
// all-reduces each wait for their own compute-stream event. Without a GPU,
// or without the NCCL backend, it skips with the binary's own reason.
#include <gtest/gtest.h>

#include <cmath>   // std::abs
#include <cstdio>  // std::printf
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/no_gpu_run.h"  // no_gpu_run_possible: the one reason to skip
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/checkpoint_runs.h"  // read_json, losses_by_step

namespace trainbench {
namespace {

using testing::CommandResult;
using testing::run_command;

// bf16 compute: the two runs differ only in what the one-rank all-reduce
// does (nothing), so they should agree far closer than this.
constexpr double kRelativeTolerance = 2e-2;

std::string cuda_run(const std::string& backend, const std::string& out) {
  return std::string(TRAINBENCH_BINARY) + " run tiny --steps 10 --set train.device=cuda" +
         " --set comm.backend=" + backend + " --set comm.bucket_mb=0.0625" +
         " --set checkpoint.every_steps=0 --set report.progress_every=0 --out " + out;
}

TEST(NcclRun, OneGpuTrainsLikeTheLocalBackendAndTimesItsAllReduces) {
  testing::TempDir dir("test_nccl_run");
  const CommandResult nccl = run_command(cuda_run("nccl", dir.file("nccl.json")));
  // Exit 3: no GPU visible, or a build without the NCCL backend; one line says which.
  if (testing::no_gpu_run_possible(nccl)) GTEST_SKIP() << "no NCCL run possible here: " << nccl.err;
  ASSERT_EQ(nccl.exit_code, 0) << nccl.out << nccl.err;
  const CommandResult local = run_command(cuda_run("local", dir.file("local.json")));
  ASSERT_EQ(local.exit_code, 0) << local.out << local.err;

  const nlohmann::json result = testing::read_json(dir.file("nccl.json"));
  const nlohmann::json& env = result.at("environment");
  EXPECT_EQ(env.at("comm_backend"), "nccl");
  EXPECT_EQ(env.at("compute_backend"), "cuda");
  // Which attention ran, and why when it is not cuDNN's (auto falls back).
  const std::string kernel = env.at("attention").at("kernel");
  EXPECT_TRUE(kernel == "cudnn-sdpa" || kernel == "gemm") << kernel;
  EXPECT_FALSE(env.at("attention").at("detail").get<std::string>().empty());
  // train.deterministic (the default): cuBLASLt's first choice, not timed.
  EXPECT_EQ(env.at("gemm").at("algorithms"), "heuristic") << env.at("gemm").at("detail");
  EXPECT_FALSE(env.at("nccl").is_null()) << "the NCCL version is missing from the environment";
  double comm_total = 0;
  for (const auto& step : result.at("steps")) {
    const double comm_s = step.at("comm_s").get<double>();
    EXPECT_GE(comm_s, 0.0) << "step " << step.at("step");
    EXPECT_GE(step.at("comm_exposed_s").get<double>(), 0.0) << "step " << step.at("step");
    comm_total += comm_s;
  }
  // comm_s is the device time between CUDA events around each bucket's
  // ncclAllReduce. On one rank an in-place sum enqueues no work at all (NCCL's
  // ncclLaunchOneRank returns at once), so the sum may honestly be 0 here; it
  // is printed for the log, and only its sign is checked.
  EXPECT_GE(comm_total, 0.0);
  std::printf("nccl, 1 rank: comm_s summed over %zu steps = %.3g s\n", result.at("steps").size(), comm_total);
  for (const auto& check : result.at("checks"))
    EXPECT_TRUE(check.at("passed").get<bool>()) << check.dump();

  const std::map<int64_t, double> nccl_losses = testing::losses_by_step(dir.file("nccl.json"));
  const std::map<int64_t, double> local_losses = testing::losses_by_step(dir.file("local.json"));
  ASSERT_EQ(nccl_losses.size(), 10u);
  ASSERT_EQ(local_losses.size(), 10u);
  for (const auto& [step, loss] : nccl_losses) {
    const double reference = local_losses.at(step);
    EXPECT_LE(std::abs(loss - reference), kRelativeTolerance * std::abs(reference))
        << "step " << step << ": nccl " << loss << ", local " << reference;
  }
}

}  // namespace
}  // namespace trainbench
