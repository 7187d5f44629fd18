// A run on the CUDA engine, where a GPU is present: the header's memory line
// is what the engine allocated (the result's memory_per_rank), not the plan
// checked before allocating, which estimates cuDNN's workspace and assumes
// cuDNN's attention where train.attention auto may fall back to the GEMMs
// and their probabilities. Without a GPU it skips with the binary's reason.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

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
    if (run.exit_code == 3) GTEST_SKIP() << "no CUDA run possible here: " << run.err;
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
    const nlohmann::json result = testing::read_json(out);
    const std::string line = testing::header_memory_line(result["summary"]["memory_per_rank"]);
    EXPECT_NE(run.out.find(line), std::string::npos) << "expected:\n" << line << "in:\n" << run.out;
  }
}

}  // namespace
}  // namespace trainbench
