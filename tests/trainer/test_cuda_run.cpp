// A run on the CUDA engine, where a GPU is present: the header's memory line
// is what the engine allocated (the result's memory_per_rank), not the plan
// checked before allocating, which estimates cuDNN's workspace and assumes
// cuDNN's attention where train.attention auto may fall back to the GEMMs
// and their probabilities. Without a GPU it skips with the binary's reason.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/no_gpu_run.h"  // no_gpu_run_possible: the one reason to skip
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/checkpoint_runs.h"  // read_json
#include "tests/trainer/header_memory.h"

namespace trainbench {
namespace {

using testing::CommandResult;
using testing::run_command;

TEST(CudaRun, TheHeadersMemoryIsWhatTheEngineAllocated) {
  testing::TempDir dir("test_cuda_run");
  for (const std::string attention : {"auto", "gemm"}) {
    SCOPED_TRACE("train.attention=" + attention);
    const std::string out = dir.file(attention + ".json");
    const CommandResult run =
        run_command(std::string(TRAINBENCH_BINARY) + " run tiny --steps 4 --set train.device=cuda" +
                    " --set train.warmup_steps=1 --set train.attention=" + attention +
                    " --set checkpoint.every_steps=0 --set report.progress_every=0 --out " + out);
    if (testing::no_gpu_run_possible(run)) GTEST_SKIP() << "no CUDA run possible here: " << run.err;
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
    const nlohmann::json result = testing::read_json(out);
    const std::string line = testing::header_memory_line(result["summary"]["memory_per_rank"]);
    EXPECT_NE(run.out.find(line), std::string::npos) << "expected:\n" << line << "in:\n" << run.out;
  }
}

// The GPU CLI tests skip only where no GPU run is possible at all: any
// other exit 3 of a GPU run is the failure they exist to catch.
TEST(CudaRun, OnlyAnExitThreeSayingNoGpuRunIsPossibleSkips) {
  const auto ended = [](int code, const std::string& err) { return CommandResult{code, "", err}; };
  for (const char* line : {"trainbench: train.device=cuda: no 'cuda' engine in this build (backends: cpu)\n",
                           "trainbench: train.device=cuda: CUDA reports no usable GPU: CUDA driver version is "
                           "insufficient for CUDA runtime version\n",
                           "trainbench: train.device=cuda: no GPU visible\n",
                           "trainbench: comm.backend=nccl: this build has no NCCL backend (...)\n"})
    EXPECT_TRUE(testing::no_gpu_run_possible(ended(3, line))) << line;
  for (const char* line : {"trainbench: train.device=cuda: cudaMalloc of 80.00 GiB failed: out of memory\n",
                           "trainbench: train.attention=cudnn: cuDNN's fused attention is unavailable: ...\n",
                           "trainbench: comm.timeout_s: the all-reduce of step 3 took longer than 300 s\n",
                           "rank 1: trainbench: train.device=cuda: CUDA reports no usable GPU\n"})
    EXPECT_FALSE(testing::no_gpu_run_possible(ended(3, line))) << line;
  EXPECT_FALSE(testing::no_gpu_run_possible(ended(2, "trainbench: train.device=cuda: no GPU visible\n")));
  // And this binary's own line, whichever it is here, is one of them or a run.
  testing::TempDir dir("test_cuda_run_probe");
  const CommandResult here = run_command(std::string(TRAINBENCH_BINARY) + " run tiny --steps 2 --set "
                                         "train.warmup_steps=1 --set train.device=cuda --set checkpoint.every_steps=0"
                                         " --set report.gemm_ceiling_s=0 --out " + dir.file("r.json"));
  EXPECT_TRUE(here.exit_code == 0 || testing::no_gpu_run_possible(here)) << here.exit_code << ": " << here.err;
}

}  // namespace
}  // namespace trainbench
