// The real binary under mpirun: `mpirun -np 2 trainbench run tiny` (the
// README's command) trains data-parallel and rank 0 reports it; a rank
// killed mid-run takes the job down with a non-zero exit instead of leaving
// the others waiting.
#include <gtest/gtest.h>

#include <sched.h>  // sched_getaffinity: the CPUs the oversubscription test may use

#include <algorithm>  // std::max
#include <chrono>
#include <filesystem>  // the wrapper script's mode
#include <fstream>
#include <string>
#include <thread>   // hardware_concurrency: the oversubscription warning
#include <utility>  // std::pair
#include <vector>

#include <nlohmann/json.hpp>

#include "dataloader/shard_assignment.h"  // shards_for_reader: which rank reads the corrupt shard
#include "dataloader/shard_writer.h"      // TarShardWriter
#include "tests/dataloader/read_test_tars.h"  // copy_without_end_marker
#include "tests/support/mem_available.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

using testing::CommandResult;
using testing::read_whole_file;
using testing::run_command;

void write_executable(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

const std::string kMpirun = std::string("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") +
                            TRAINBENCH_MPIEXEC + " --oversubscribe ";

// `trainbench ARGS` on two ranks, rank 1 given `rank1_extra` as well (and
// rank 0 `rank0_extra`: an option both must give, valued apart); the result
// and how long the job took.
struct TimedResult {
  CommandResult result;
  double seconds = 0;
};
TimedResult run_with_rank1_extra(const testing::TempDir& dir, const std::string& args, const std::string& rank1_extra,
                                 const std::string& rank0_extra = "") {
  const std::string wrapper = dir.file("rank1_differs.sh");
  write_executable(wrapper, "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exec \"$@\" " + rank1_extra +
                                "; fi\nexec \"$@\" " + rank0_extra + "\n");
  const auto begin = std::chrono::steady_clock::now();
  TimedResult timed;
  timed.result = run_command("timeout 120 " + kMpirun + "-np 2 " + wrapper + " " + TRAINBENCH_BINARY + " " + args);
  timed.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return timed;
}

// data.source synthetic gives each rank batches of its own, as data
// parallelism has: every rank drew the same ones, so two ranks' gradient
// was one rank's, bit for bit (the global batch was copies of one
// micro-batch). Rank 0's batches are still the one-rank run's.
TEST(MpiCli, SyntheticDataGivesEachRankItsOwnBatches) {
  testing::TempDir dir("test_mpi_cli");
  const std::string args = " run tiny --steps 4 --set train.warmup_steps=1 --set data.source=synthetic"
                           " --set checkpoint.every_steps=0 --set report.progress_every=0 --out ";
  const CommandResult one = run_command(std::string(TRAINBENCH_BINARY) + args + dir.file("one.json"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const CommandResult two = run_command(kMpirun + "-np 2 " + TRAINBENCH_BINARY + args + dir.file("two.json"));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const nlohmann::json first_one = nlohmann::json::parse(read_whole_file(dir.file("one.json")))["steps"][0];
  const nlohmann::json first_two = nlohmann::json::parse(read_whole_file(dir.file("two.json")))["steps"][0];
  EXPECT_NE(first_one["grad_norm"], first_two["grad_norm"]) << "the two ranks' batches are the same";
  // Independent batches: the mean of two gradients is shorter than either.
  EXPECT_LT(first_two["grad_norm"].get<double>(), first_one["grad_norm"].get<double>());
}

TEST(MpiCli, TwoRanksTrainTinyAndRankZeroReports) {
  testing::TempDir dir("test_mpi_cli");
  const CommandResult r = run_command(kMpirun + "-np 2 " + TRAINBENCH_BINARY + " run tiny --steps 12 --out " +
                                      dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // One report, not one per rank.
  const size_t first = r.out.find("summary:");
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("summary:", first + 1), std::string::npos) << r.out;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  EXPECT_EQ(result["environment"]["ranks"], 2);
  EXPECT_EQ(result["summary"]["global_tokens_per_step"], 2 * 8 * 64);
  bool consistent = false;
  for (const auto& c : result["checks"])
    if (c["name"] == "ranks_consistent") consistent = c["passed"].get<bool>();
  EXPECT_TRUE(consistent) << result["checks"].dump();
  double comm_s = 0;
  for (const auto& s : result["steps"]) comm_s += s["comm_s"].get<double>();
  EXPECT_GT(comm_s, 0.0) << "gradients were all-reduced";
  // Each rank read its own shards: twice the samples of one rank at least.
  EXPECT_GT(result["summary"]["storage_read"]["samples"].get<int64_t>(), 0);
}

// The compute ceiling trains each rank alone (a local communicator): an
// engine built for ZeRO-1 updates its own shard there, without collectives
// ("optimizer_step on a sharded optimizer" was an internal error, exit 1),
// and the run after it trains as one without --ceilings does.
TEST(MpiCli, CeilingsOfAZeroOneRunAreMeasuredAndLeaveItsTrainingAsItWas) {
  testing::TempDir dir("test_mpi_cli");
  const std::string common = " run tiny --steps 6 --set comm.zero=1 --set train.threads=1 --set report.progress_every=0 "
                             "--set checkpoint.every_steps=0 --set data.source=synthetic --set data.shards= ";
  const CommandResult with = run_command("timeout 300 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY + common +
                                         "--ceilings --out " + dir.file("with.json"));
  ASSERT_EQ(with.exit_code, 0) << with.out << with.err;
  const CommandResult without = run_command("timeout 300 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY + common +
                                            "--out " + dir.file("without.json"));
  ASSERT_EQ(without.exit_code, 0) << without.out << without.err;
  const nlohmann::json a = nlohmann::json::parse(read_whole_file(dir.file("with.json")));
  const nlohmann::json b = nlohmann::json::parse(read_whole_file(dir.file("without.json")));
  EXPECT_GT(a.at("ceilings").at("compute").at("tokens_per_s").get<double>(), 0.0);
  ASSERT_EQ(a.at("steps").size(), b.at("steps").size());
  for (size_t i = 0; i < a.at("steps").size(); ++i)
    EXPECT_EQ(a["steps"][i]["loss"], b["steps"][i]["loss"]) << "step " << i + 1;
  const CommandResult bench = run_command("timeout 300 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                          " bench compute tiny --set comm.zero=1 --set train.threads=1");
  ASSERT_EQ(bench.exit_code, 0) << bench.out << bench.err;
  EXPECT_NE(bench.out.find("compute ceiling: "), std::string::npos) << bench.out;
}

// A rank stopped during set-up (here while it writes its synthetic shards,
// before the collectives that come before step 1) ends the job after
// comm.timeout_s, not after the communicator's default 300 s. Rank 0, whose
// collective timed out, removes its temporary folders before its abort
// (they stayed in its TMPDIR: the abort does not unwind).
TEST(MpiCli, ARankStoppedBeforeStepOneTimesOutAfterCommTimeout) {
  testing::TempDir dir("test_mpi_cli");
  const std::string wrapper = dir.file("stop_rank1.sh");
  write_executable(wrapper, "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n  export TMPDIR=" + dir.file("t1") +
                                "\n  mkdir -p $TMPDIR\n  \"$@\" & pid=$!\n"
                                "  while ! ls $TMPDIR | grep -q trainbench-shards; do sleep 0.01; done\n"
                                "  kill -STOP $pid\n"
                                // mpirun's SIGTERM at the abort ends the wait, and the stopped rank with it.
                                "  trap 'kill -KILL $pid; exit 1' TERM INT\n  sleep 100 & wait $!\n  kill -KILL $pid\n  exit 1\n"
                                "fi\nexport TMPDIR=" + dir.file("t0") + "\nmkdir -p $TMPDIR\nexec \"$@\"\n");
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command("timeout 90 " + kMpirun + "-np 2 " + wrapper + " " + TRAINBENCH_BINARY +
                                      " run tiny --steps 20 --set train.threads=1 --set comm.timeout_s=5 --out " +
                                      dir.file("r.json"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("timed out after 5 s"), std::string::npos) << r.err;
  EXPECT_LT(seconds, 60.0);
  ASSERT_TRUE(std::filesystem::is_directory(dir.file("t0")));
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("t0")))
    left.push_back(entry.path().filename().string());
  EXPECT_TRUE(left.empty()) << "rank 0 left " << ::testing::PrintToString(left);
}

// A rank frozen mid-run (a hung node, a wedged GPU): rank 0's all-reduce
// times out and the job ends, exit 3 — with every step it had trained
// lost. Rank 0 now writes them beside the result, r.aborted.json
// (trainbench.aborted_run/v1), with the timeout's message as the reason.
TEST(MpiCli, ARankFrozenMidRunLeavesRankZerosStepsBesideTheResult) {
  testing::TempDir dir("test_mpi_cli");
  const std::string console = dir.file("console.txt");
  const std::string wrapper = dir.file("freeze_rank1.sh");
  write_executable(wrapper, "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n  \"$@\" & pid=$!\n"
                            "  for i in $(seq 600); do grep -qE '^step +5/' " + console + " && break; sleep 0.05; done\n"
                            "  kill -STOP $pid\n"
                            "  trap 'kill -KILL $pid; exit 1' TERM INT\n  sleep 100 & wait $!\n  kill -KILL $pid\n  exit 1\n"
                            "fi\nexec \"$@\"\n");
  // In a subshell: run_command's own redirections come after it.
  const CommandResult r = run_command("( timeout 90 " + kMpirun + "-np 2 " + wrapper + " " + TRAINBENCH_BINARY +
                                      " run tiny --steps 100000 --set train.threads=1 --set data.source=synthetic "
                                      "--set data.shards= --set checkpoint.every_steps=0 --set "
                                      "report.progress_every=5 --set comm.timeout_s=5 --out " + dir.file("r.json") +
                                      " > " + console + " 2>&1 )");
  const std::string output = testing::read_whole_file(console);
  EXPECT_NE(r.exit_code, 0) << output;
  ASSERT_TRUE(std::filesystem::exists(dir.file("r.aborted.json"))) << output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.json")));
  const nlohmann::json partial = nlohmann::json::parse(read_whole_file(dir.file("r.aborted.json")));
  EXPECT_EQ(partial.at("schema"), "trainbench.aborted_run/v1");
  EXPECT_EQ(partial.at("aborted").at("exit_code"), 3);
  EXPECT_NE(partial.at("aborted").at("reason").get<std::string>().find("timed out after 5 s"), std::string::npos)
      << partial.at("aborted").dump();
  const nlohmann::json& steps = partial.at("steps");
  ASSERT_GE(steps.size(), 5u) << "progress was printed at step 5";
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i].at("step"), i + 1);
  // (Its stderr line, said after the abort's, may be cut by mpirun ending
  // the job: the one-rank test checks it.)
}

// Rank 0's own error mid-run (here its GPU failing) ended the job through
// the abort after the partial result had been let go: nothing was kept.
TEST(MpiCli, RankZerosGpuFailingMidRunKeepsItsStepsWithTheReason) {
  testing::TempDir dir("test_mpi_cli");
  const CommandResult r = run_command("TRAINBENCH_TEST_DEVICE_ERROR=6@0 timeout 90 " + kMpirun +
                                      "-np 2 -x TRAINBENCH_TEST_DEVICE_ERROR " + TRAINBENCH_BINARY +
                                      " run tiny --steps 12 --set train.threads=1 --set data.source=synthetic "
                                      "--set data.shards= --set checkpoint.every_steps=0 --out " + dir.file("r.json"));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("trainbench: rank 0: device error: TRAINBENCH_TEST_DEVICE_ERROR"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.json")));
  ASSERT_TRUE(std::filesystem::exists(dir.file("r.aborted.json"))) << r.err;
  const nlohmann::json partial = nlohmann::json::parse(read_whole_file(dir.file("r.aborted.json")));
  EXPECT_EQ(partial.at("aborted").at("exit_code"), 3);
  EXPECT_EQ(partial.at("aborted").at("reason").get<std::string>().rfind("rank 0: device error: ", 0), 0u)
      << partial.at("aborted").dump();
  ASSERT_EQ(partial.at("steps").size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(partial.at("steps")[i].at("step"), i + 1);
}

// A rank that never starts (its host down, or stuck before main on storage
// that stopped responding) held the others in MPI_Init for ever: comm.timeout_s
// bounds the start-up too, and mpirun then ends the job.
TEST(MpiCli, ARankThatNeverStartsEndsTheJobAtCommTimeout) {
  testing::TempDir dir("test_mpi_cli");
  const std::string wrapper = dir.file("rank1_never_starts.sh");
  write_executable(wrapper, "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n"
                            "  trap 'exit 1' TERM INT\n  sleep 100 & wait $!\n  exit 1\nfi\nexec \"$@\"\n");
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command("timeout 90 " + kMpirun + "-np 2 " + wrapper + " " + TRAINBENCH_BINARY +
                                      " run tiny --steps 8 --set train.threads=1 --set comm.timeout_s=3 --out " +
                                      dir.file("r.json"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("trainbench: comm: MPI start-up did not finish within comm.timeout_s=3 s (rank 0 of 2): "
                       "a rank never joined it"),
            std::string::npos)
      << r.err;
  EXPECT_GE(seconds, 3.0);
  EXPECT_LT(seconds, 60.0);
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.json")));
}

// The network fault injections under ZeRO-1: a slow network holds its
// reduce-scatter and all-gather too (they ran at full speed, the injection
// silently ignored); a divergence, which its all-gather would overwrite, is
// refused rather than passed as caught.
TEST(MpiCli, ZeroOneTakesTheSlowNetworkAndRefusesTheDivergenceInjection) {
  testing::TempDir dir("test_mpi_cli");
  const std::string common = " run tiny --steps 6 --set comm.zero=1 --set train.threads=1 --set report.progress_every=0 "
                             "--set checkpoint.every_steps=0 --set data.source=synthetic --set data.shards= ";
  const CommandResult slow = run_command("timeout 300 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY + common +
                                         "--set comm.inject_delay_ms=60 --out " + dir.file("slow.json"));
  ASSERT_EQ(slow.exit_code, 0) << slow.out << slow.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("slow.json")));
  ASSERT_FALSE(result.at("steps").empty());
  for (const auto& step : result.at("steps"))
    EXPECT_GE(step.at("comm_s").get<double>(), 0.12) << "two collectives held 60 ms each: " << step.dump();
  const CommandResult diverge = run_command("timeout 300 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY + common +
                                            "--set comm.inject_divergence_step=3 --out " + dir.file("d.json"));
  EXPECT_EQ(diverge.exit_code, 2) << diverge.out << diverge.err;
  EXPECT_NE(diverge.err.find("comm.inject_divergence_step: under comm.zero 1"), std::string::npos) << diverge.err;
  // ~5B parameters: each of 2 ranks' blocks is past MPI's int count. Refused
  // before anything is allocated (it ended the job at step 1, exit 3).
  const CommandResult large = run_command(
      "timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY + common +
      "--set model.d_model=8192 --set model.vocab=270000 --set data.field=u32 --set model.n_layers=1 "
      "--set model.n_heads=64 --set model.n_kv_heads=8 --set model.ffn_hidden=16384 --out " + dir.file("large.json"));
  EXPECT_EQ(large.exit_code, 2) << large.out << large.err;
  EXPECT_NE(large.err.find("comm.zero=1 on the MPI backend: each rank's block"), std::string::npos) << large.err;
  EXPECT_NE(large.err.find("run at least 3 ranks, comm.zero=0 or the NCCL backend"), std::string::npos) << large.err;
}

// Ranks on two hosts (each in a UTS namespace of its own host name) with
// the default checkpoint folder, which is in rank 0's TMPDIR: the other
// host's ranks wrote every checkpoint into a folder of that name on their
// own disk, never committed, pruned or removed. Refused before training,
// naming the key; with checkpoint.dir given the same job trains, and its
// result names both hosts.
TEST(MpiCli, TheDefaultCheckpointFolderIsRefusedOnSeveralHosts) {
  if (run_command("unshare --uts true").exit_code != 0)
    GTEST_SKIP() << "no UTS namespace here (unshare --uts): two ranks cannot be on two hosts";
  testing::TempDir dir("test_mpi_cli");
  const std::string wrapper = dir.file("own_host.sh");
  write_executable(wrapper, "#!/bin/sh\nexec unshare --uts sh -c "
                            "'hostname trainbench-node-$OMPI_COMM_WORLD_RANK && exec \"$@\"' sh \"$@\"\n");
  const std::string common = " run tiny --steps 7 --set train.threads=1 --set checkpoint.every_steps=3 --out ";
  const CommandResult refused =
      run_command("timeout 300 " + kMpirun + "-np 2 " + wrapper + " " + TRAINBENCH_BINARY + common + dir.file("a.json"));
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("checkpoint.dir: this job's ranks are on more than one host"), std::string::npos)
      << refused.err;
  const CommandResult given = run_command("timeout 300 " + kMpirun + "-np 2 " + wrapper + " " + TRAINBENCH_BINARY +
                                          common + dir.file("b.json") + " --set checkpoint.dir=" + dir.file("ckpt"));
  EXPECT_EQ(given.exit_code, 0) << given.out << given.err;
  // The result names both hosts (it named rank 0's alone: report.py read a
  // multi-node point as one host), rank 0's first; the console says so too.
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("b.json")));
  EXPECT_EQ(result.at("environment").at("hosts"),
            nlohmann::json::array({"trainbench-node-0", "trainbench-node-1"}));
  const nlohmann::json& host_gpus = result.at("environment").at("host_gpus");
  ASSERT_EQ(host_gpus.size(), 2u) << host_gpus.dump();
  EXPECT_EQ(host_gpus[1].at("host"), "trainbench-node-1");
  // One machine: alike but for the name, so no warning that they differ.
  nlohmann::json second = host_gpus[1];
  second["host"] = host_gpus[0].at("host");
  EXPECT_EQ(second, host_gpus[0]);
  EXPECT_EQ(given.out.find("the hosts differ"), std::string::npos) << given.out;
  EXPECT_NE(given.out.find("host      trainbench-node-0 and 1 more host(s), 2 rank(s)"), std::string::npos)
      << given.out;
}

TEST(MpiCli, AKilledRankEndsTheJobWithAnError) {
  testing::TempDir dir("test_mpi_cli");
  // Rank 1 is killed (SIGKILL) once the job prints its first step, in a run
  // far longer than that (a fixed 4 s sleep before the kill found no step
  // line when start-up ran slow). Small temporary shards (the loader cycles
  // them): a 100000-step run's worth would take seconds to write before step 1.
  const std::string log = dir.file("job.out");
  const std::string job = kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                          " run tiny --steps 100000 --set comm.timeout_s=20 --set data.synth_samples_per_shard=64"
                          " --set checkpoint.every_steps=0 --out " + dir.file("r.json");
  // This job's rank 1 alone, by its --out in its command line: any
  // trainbench rank 1 on the machine killed other tests' jobs running
  // beside it (ctest -j), which then failed without a word.
  const std::string killer =
      "for i in $(seq 600); do grep -q 'step ' " + log + " 2>/dev/null && break; sleep 0.1; done; "
      "for p in $(pgrep -x trainbench); do "
      "grep -qz '^OMPI_COMM_WORLD_RANK=1$' /proc/$p/environ && grep -qzxF -- '" + dir.file("r.json") +
      "' /proc/$p/cmdline && kill -9 $p && echo killed rank 1; done";
  const auto begin = std::chrono::steady_clock::now();
  // One subshell around it all, so the output redirection covers every part.
  const CommandResult r = run_command("( ( " + killer + " ) & timeout 120 " + job + " > " + log +
                                      "; code=$?; wait; cat " + log + "; exit $code )");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ASSERT_NE(r.out.find("step "), std::string::npos) << "the job never trained: " << r.out << r.err;
  ASSERT_NE(r.out.find("killed rank 1"), std::string::npos) << "rank 1 was not found to kill: " << r.out;
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.exit_code, 124) << "the job hung until the test's own timeout";
  EXPECT_LT(seconds, 20 + 30 + 10) << "within comm.timeout_s + 30 s";
}

// Lines of trainbench's own (OpenMPI adds its banners around them).
int count_trainbench_lines(const std::string& err) {
  int lines = 0;
  for (size_t at = err.find("trainbench: "); at != std::string::npos; at = err.find("trainbench: ", at + 1))
    if (at == 0 || err[at - 1] == '\n') ++lines;
  return lines;
}

// Rank 1 started with another --set: every rank exits 2 within seconds, rank
// 1 naming the key, instead of the job stalling in a collective until
// comm.timeout_s (rank 1 with another model) or training on with tokens/s
// counted wrong (another micro-batch).
// A checkpoint keeps only parameters the ranks agree on: a step due one has
// them compared first, even with comm.check_every=0 (only at the end). A
// rank diverged at step 7 used to be committed at steps 10, 15 and 20 and
// resumed from as `latest`; now step 10's checkpoint is refused, the run
// stops there (exit 4), and `latest` stays at step 5.
TEST(MpiCli, ADivergedRankIsNeverCheckpointed) {
  testing::TempDir dir("test_mpi_cli_diverged");
  const CommandResult r = run_command(
      "timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
      " run tiny --steps 20 --set train.warmup_steps=1 --set checkpoint.every_steps=5 --set checkpoint.dir=" +
      dir.file("ck") + " --set comm.check_every=0 --set comm.inject_divergence_step=7 --out " + dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_EQ(read_whole_file(dir.file("ck/latest")), "step_5\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("ck/step_10"))) << "the diverged step was committed";
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  std::vector<std::pair<int64_t, std::string>> checkpoints;
  for (const auto& c : result["checkpoints"]) checkpoints.emplace_back(c["step"], c["status"]);
  const std::vector<std::pair<int64_t, std::string>> expected{{5, "committed"}, {10, "skipped_diverged"}};
  EXPECT_EQ(checkpoints, expected) << result["checkpoints"].dump();
  EXPECT_EQ(result["steps"].size(), 10u) << "the run stops at the step it found the ranks differ";
  bool named = false;
  for (const auto& c : result["checks"])
    if (c["name"] == "ranks_consistent") {
      named = true;
      EXPECT_FALSE(c["passed"].get<bool>());
      EXPECT_NE(c["detail"].get<std::string>().find("step 10"), std::string::npos) << c.dump();
    }
  EXPECT_TRUE(named) << result["checks"].dump();
}

// One rank's loss overflowing (+inf) while the reduced gradients stay
// finite: that rank alone ended its loop and gave up its checkpoints, its
// peer went on into the next step's all-reduce, and the job hung until
// comm.timeout_s (exit 3, no result). The ranks decide it together: the run
// ends at that step on both, the checkpoint due there is not taken.
TEST(MpiCli, OneRanksNonFiniteLossEndsEveryRankAtThatStep) {
  testing::TempDir dir("test_mpi_cli_loss_inf");
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command(
      "TRAINBENCH_TEST_LOSS_INF=6@1 timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
      " run tiny --steps 20 --set train.warmup_steps=1 --set train.threads=1 --set checkpoint.every_steps=3 "
      "--set checkpoint.dir=" + dir.file("ck") + " --set comm.timeout_s=60 --set report.gemm_ceiling_s=0 --out " +
      dir.file("r.json"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ASSERT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_LT(seconds, 50.0) << "not ended by comm.timeout_s";
  EXPECT_EQ(read_whole_file(dir.file("ck/latest")), "step_3\n");
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  EXPECT_EQ(result["steps"].size(), 6u);
  bool named = false;
  for (const auto& c : result["checks"])
    if (c["name"] == "loss_finite") {
      named = true;
      EXPECT_FALSE(c["passed"].get<bool>());
      EXPECT_EQ(c["detail"], "loss is inf at step 6 on rank 1") << c.dump();
    }
  EXPECT_TRUE(named) << result["checks"].dump();
}

TEST(MpiCli, RanksStartedWithDifferentConfigsExitTwoNamingTheKey) {
  testing::TempDir dir("test_mpi_cli");
  const auto [r, seconds] =
      run_with_rank1_extra(dir, "run tiny --steps 12 --out " + dir.file("r.json"), "--set train.micro_batch=4");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("rank 1 has train.micro_batch = 4 where rank 0 has 8"), std::string::npos) << r.err;
  EXPECT_EQ(count_trainbench_lines(r.err), 1) << "rank 0 speaks for all: " << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "no step may run: " << r.out;
  EXPECT_LT(seconds, 60.0) << "not the collective timeout (300 s)";
}

// The other ranks that differ are named after the first, each number agreeing
// with its verb ("ranks 2 differ too" named one rank).
TEST(MpiCli, TheRanksThatDifferAfterTheFirstAreNamed) {
  testing::TempDir dir("test_mpi_cli");
  const std::string wrapper = dir.file("ranks_differ.sh");
  write_executable(wrapper, "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" != 0 ]; then exec \"$@\" --set "
                            "train.lr=0.07$OMPI_COMM_WORLD_RANK; fi\nexec \"$@\"\n");
  for (const int ranks : {3, 4}) {
    const CommandResult r = run_command("timeout 120 " + kMpirun + "-np " + std::to_string(ranks) + " " + wrapper +
                                        " " + TRAINBENCH_BINARY + " run tiny --steps 6 --set train.threads=1 --out " +
                                        dir.file("r.json"));
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("rank 1 has train.lr = 0.071 where rank 0 has "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(ranks == 3 ? " (rank 2 differs too): " : " (ranks 2, 3 differ too): "), std::string::npos)
        << r.err;
    EXPECT_EQ(count_trainbench_lines(r.err), 1) << "rank 0 speaks for all: " << r.err;
  }
}

// What every rank does differently though only rank 0 reports: a rank that
// times no step (report.instrument) steps at another pace, and its peer was
// reported a 100% straggler; bench instrument with other --pairs on one rank
// waited in a collective its peer never entered, until comm.timeout_s.
TEST(MpiCli, RanksThatTimeTheirStepsDifferentlyExitTwo) {
  testing::TempDir dir("test_mpi_cli");
  const auto [run, run_seconds] = run_with_rank1_extra(
      dir, "run tiny --steps 6 --set train.warmup_steps=1 --out " + dir.file("r.json"), "--set report.instrument=false");
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.err.find("rank 1 has report.instrument = false where rank 0 has true"), std::string::npos) << run.err;
  EXPECT_LT(run_seconds, 60.0);
  const auto [bench, bench_seconds] =
      run_with_rank1_extra(dir, "bench instrument tiny --block-steps 2 --set comm.timeout_s=100", "--pairs 3");
  EXPECT_EQ(bench.exit_code, 2) << bench.out << bench.err;
  EXPECT_NE(bench.err.find("--pairs 3 --block-steps 2"), std::string::npos) << bench.err;
  EXPECT_LT(bench_seconds, 60.0) << "not the collective timeout";
}

// Burn-in's own options shape the job as the config does: rank 0 alone
// decides when it stops, so another --duration on rank 1 was ignored; a
// --baseline on one rank only put it in collectives its peer never entered
// (a hang to comm.timeout_s); another baseline on rank 1 was ignored.
TEST(MpiCli, BurnInRanksWithAnotherDurationOrBaselineExitTwo) {
  testing::TempDir dir("test_mpi_cli");
  const auto [durations, durations_seconds] = run_with_rank1_extra(
      dir, "burnin tiny --set comm.timeout_s=100 --out " + dir.file("b.json"), "--duration 3s", "--duration 2s");
  EXPECT_EQ(durations.exit_code, 2) << durations.out << durations.err;
  EXPECT_NE(durations.err.find("rank 1 has command line = \"--duration 3s\" where rank 0 has \"--duration 2s\""),
            std::string::npos)
      << durations.err;
  EXPECT_LT(durations_seconds, 60.0) << "not the collective timeout";

  const CommandResult baseline = run_command(kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                             " run tiny --steps 8 --set train.warmup_steps=2 --out " +
                                             dir.file("base.json"));
  ASSERT_EQ(baseline.exit_code, 0) << baseline.err;
  const auto [one, one_seconds] =
      run_with_rank1_extra(dir, "burnin tiny --duration 2s --set comm.timeout_s=100 --out " + dir.file("b.json"),
                           "--baseline " + dir.file("base.json"));
  EXPECT_EQ(one.exit_code, 2) << one.out << one.err;
  EXPECT_NE(one.err.find("rank 1 has command line = \"--duration 2s --baseline " + dir.file("base.json") +
                         " (tokens/s "),
            std::string::npos)
      << one.err;
  EXPECT_EQ(count_trainbench_lines(one.err), 1) << "rank 0 speaks for all: " << one.err;
  EXPECT_LT(one_seconds, 60.0) << "not the collective timeout";
}

// Each rank resolves data.shards itself: rank 1, whose copy of the data set
// has 6 of the 8 shards, split another list and read shards rank 0 also
// read, silently. Rank r runs in r<r>/, where the relative data.shards is its own.
TEST(MpiCli, RanksThatFindOtherShardListsExitTwo) {
  testing::TempDir dir("test_mpi_cli");
  for (const auto& [rank, count] : {std::pair{"r0", "8"}, std::pair{"r1", "6"}}) {
    const CommandResult made = run_command(std::string(TRAINBENCH_BINARY) + " shards synth --out " +
                                           dir.file(std::string(rank) + "/data") + " --count " + count +
                                           " --samples 16 --vocab 512 --tokens 100");
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  const std::string wrapper = dir.file("own_folder.sh");
  write_executable(wrapper, "#!/bin/sh\ncd " + dir.path() + "/r$OMPI_COMM_WORLD_RANK && exec \"$@\"\n");
  const std::string job = std::string(TRAINBENCH_BINARY) +
                          " run tiny --steps 4 --set train.warmup_steps=1 --set data.readers=1 --set data.shards=data"
                          " --set checkpoint.every_steps=0 --out r.json";
  const CommandResult fewer = run_command("timeout 120 " + kMpirun + "-np 2 " + wrapper + " " + job);
  EXPECT_EQ(fewer.exit_code, 2) << fewer.out << fewer.err;
  EXPECT_NE(fewer.err.find("data.shards: rank 1 resolved 6 shards from 'data' and rank 0 8"), std::string::npos)
      << fewer.err;
  EXPECT_EQ(fewer.err.find("rank 0: "), std::string::npos) << "rank 1's list, not rank 0's: " << fewer.err;
  // With more readers than the short copy deals rank 1 (3 of its 6 shards for
  // 4 readers), the loader's own check came first: "lower data.readers or
  // give at least 8 shards", where rank 0 had every one.
  std::string four_readers = job;
  four_readers.replace(four_readers.find("data.readers=1"), 14, "data.readers=4");
  const CommandResult short_copy = run_command("timeout 120 " + kMpirun + "-np 2 " + wrapper + " " + four_readers);
  EXPECT_EQ(short_copy.exit_code, 2) << short_copy.out << short_copy.err;
  EXPECT_NE(short_copy.err.find("data.shards: rank 1 resolved 6 shards from 'data' and rank 0 8"), std::string::npos)
      << short_copy.err;
  // As many shards, other names.
  std::filesystem::rename(dir.file("r1/data/train-000005.tar"), dir.file("r1/data/train-000005-b.tar"));
  for (const char* name : {"train-000006.tar", "train-000007.tar"})
    std::filesystem::copy_file(dir.file(std::string("r0/data/") + name), dir.file(std::string("r1/data/") + name));
  const CommandResult renamed = run_command("timeout 120 " + kMpirun + "-np 2 " + wrapper + " " + job);
  EXPECT_EQ(renamed.exit_code, 2) << renamed.out << renamed.err;
  EXPECT_NE(renamed.err.find("to 8 shards as rank 0 did, but its shard 5 is data/train-000005-b.tar where rank 0's "
                            "is data/train-000005.tar"),
            std::string::npos)
      << renamed.err;
  // The same data set on both: trains.
  std::filesystem::rename(dir.file("r1/data/train-000005-b.tar"), dir.file("r1/data/train-000005.tar"));
  const CommandResult same = run_command("timeout 120 " + kMpirun + "-np 2 " + wrapper + " " + job);
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
}

// bench comm sizes its buffers from each rank's own options: rank 1 with
// another --warmup-iters (or model) is refused before the first collective, where
// it used to corrupt the heap or hang until comm.timeout_s.
TEST(MpiCli, BenchCommRanksWithDifferentOptionsExitTwo) {
  testing::TempDir dir("test_mpi_cli");
  const auto [r, seconds] = run_with_rank1_extra(dir, "bench comm tiny --max-bytes 4K --iters 1", "--warmup-iters 3");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("rank 1 has command line = "), std::string::npos) << r.err;
  EXPECT_LT(seconds, 60.0) << "not the collective timeout (300 s)";
  // --out given to rank 1 alone: rank 0 writes the figures, so it was not
  // written and the job exited 0.
  const auto [out, out_seconds] =
      run_with_rank1_extra(dir, "bench comm tiny --max-bytes 4K --iters 1", "--out " + dir.file("b.json"));
  EXPECT_EQ(out.exit_code, 2) << out.out << out.err;
  EXPECT_NE(out.err.find("--out " + dir.file("b.json")), std::string::npos) << out.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.json")));
  // Factors equal to six decimals, whose sweeps differ (3548 against 3552
  // bytes): compared as "1.010000" alike, the job died in MPI_ERR_TRUNCATE.
  const auto [factor, factor_seconds] =
      run_with_rank1_extra(dir, "bench comm tiny --min-bytes 1K --max-bytes 256K --iters 1 --warmup-iters 0",
                           "--factor 1.0100004", "--factor 1.01");
  EXPECT_EQ(factor.exit_code, 2) << factor.out << factor.err;
  EXPECT_NE(factor.err.find("--factor 1.0100004 "), std::string::npos) << factor.err;
}

// A failure every rank meets alike (a bad --set before MPI is up; a
// checkpoint written by another number of ranks, after) is one line from
// rank 0, not one per rank.
TEST(MpiCli, AFailureOfEveryRankIsPrintedOnce) {
  testing::TempDir dir("test_mpi_cli");
  const CommandResult config = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                           " run tiny --set model.d_model=-1");
  EXPECT_EQ(config.exit_code, 2) << config.err;
  EXPECT_NE(config.err.find("model.d_model"), std::string::npos) << config.err;
  EXPECT_EQ(count_trainbench_lines(config.err), 1) << config.err;

  const std::string checkpoints = dir.file("ck");
  const CommandResult one = run_command(std::string(TRAINBENCH_BINARY) + " run tiny --steps 8 --set checkpoint.dir=" +
                                        checkpoints + " --set checkpoint.every_steps=4 --out " + dir.file("one.json"));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const CommandResult resumed = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                            " run tiny --steps 12 --resume latest --set checkpoint.dir=" + checkpoints +
                                            " --out " + dir.file("two.json"));
  EXPECT_EQ(resumed.exit_code, 2) << resumed.err;
  EXPECT_NE(resumed.err.find("written by 1 rank(s) and this run has 2"), std::string::npos) << resumed.err;
  EXPECT_EQ(count_trainbench_lines(resumed.err), 1) << resumed.err;
}

// The cpu engine's plan is host memory, which the ranks on one host share:
// a micro-batch whose plan takes ~70% of MemAvailable fits one rank, and
// two ranks on this host are refused (exit 3, one line, before anything is
// allocated); each rank's check alone passed, and the OOM killer ended it.
TEST(MpiCli, RanksOnOneHostShareItsMemory) {
  const int64_t available_kib = testing::mem_available_kib();
  ASSERT_GT(available_kib, 0) << "no MemAvailable in /proc/meminfo";
  // tiny's plan is ~1.0 MiB per micro-batch row (4.01 GiB at 4096).
  const int64_t micro_batch = std::max<int64_t>(8, available_kib * 7 / 10 / 1024);
  const CommandResult r = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                      " run tiny --steps 8 --set train.threads=1 --set checkpoint.every_steps=0"
                                      " --set train.micro_batch=" + std::to_string(micro_batch));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("for the 2 ranks on this host"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("or run fewer ranks per host"), std::string::npos) << r.err;
  EXPECT_EQ(count_trainbench_lines(r.err), 1) << r.err;
}

// `mpirun -np N trainbench shards synth` (DLIO's way of generating data):
// every task wrote the same shards into one folder, and the loser failed
// renaming a partial file the winner had taken. Rank 0 writes them all.
TEST(MpiCli, ShardsUnderALauncherAreWrittenOnceByRankZero) {
  testing::TempDir dir("test_mpi_cli");
  const std::string out = dir.file("shards");
  const CommandResult r = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                      " shards synth --out " + out + " --count 4 --samples 50");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("started as 2 tasks"), std::string::npos) << r.err;
  EXPECT_EQ(count_trainbench_lines(r.err), 1) << r.err;
  const CommandResult verify = run_command(std::string(TRAINBENCH_BINARY) + " shards verify " + out);
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_NE(verify.out.find("samples  200"), std::string::npos) << verify.out;
}

// `mpirun -np 2 trainbench bench io`: every task ran the whole read bench,
// printed its own report and wrote the same --out (the last writer won).
// It measures one process's loader, so rank 0 runs it; a note says so.
TEST(MpiCli, BenchIoUnderALauncherRunsOnceOnRankZero) {
  testing::TempDir dir("test_mpi_cli");
  const std::string shards = dir.file("shards");
  ASSERT_EQ(run_command(std::string(TRAINBENCH_BINARY) + " shards synth --out " + shards +
                        " --count 2 --samples 20 --vocab 512").exit_code, 0);
  const CommandResult r = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                      " bench io tiny --set data.shards=" + shards + " --readers 1 --out " +
                                      dir.file("io.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const size_t first = r.out.find("bench io: ");
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("bench io: ", first + 1), std::string::npos) << "one report, not one per task: " << r.out;
  EXPECT_NE(r.err.find("started as 2 tasks; bench io reads in one process, rank 0's"), std::string::npos) << r.err;
  EXPECT_EQ(count_trainbench_lines(r.err), 1) << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("io.json")));
  EXPECT_EQ(result["schema"], "trainbench.bench_io/v1");
  EXPECT_NE(result.value("command", "").find(" bench io tiny --set data.shards="), std::string::npos) << result.dump();

  // --write too: each task wrote its own checkpoint and report, and the
  // same --out (one rank's write; run --ceilings has every rank's at once).
  const CommandResult w = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                      " bench io --write --bytes 4M --repeats 1 --buffered --dir " + dir.path() +
                                      " --out " + dir.file("write.json"));
  ASSERT_EQ(w.exit_code, 0) << w.out << w.err;
  const size_t written = w.out.find("bench io --write: ");
  ASSERT_NE(written, std::string::npos) << w.out;
  EXPECT_EQ(w.out.find("bench io --write: ", written + 1), std::string::npos) << "one report: " << w.out;
  EXPECT_NE(w.err.find("started as 2 tasks; bench io --write writes in one process, rank 0's"), std::string::npos)
      << w.err;
  EXPECT_EQ(count_trainbench_lines(w.err), 1) << w.err;
}

// A failure of one rank alone (here rank 0's --out, which only rank 0
// writes): that rank ends the job at once with its message, where its peers
// used to wait in their first collective until comm.timeout_s.
TEST(MpiCli, OneRanksOwnFailureEndsTheJobAtOnceWithItsMessage) {
  testing::TempDir dir("test_mpi_cli");
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                      " run tiny --steps 12 --out " + dir.file("no_such_dir/r.json"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("trainbench: rank 0: --out " + dir.file("no_such_dir/r.json") + ": directory"),
            std::string::npos) << r.err;
  EXPECT_LT(seconds, 60.0) << "not the collective timeout (300 s)";
}

// A corrupt sample that rank 1 alone meets mid-run: every rank learns of it
// in that step's agreement and stops before the step's update, and rank 0
// writes the result of the steps trained, whose failed check data_read names
// rank 1 and the shard. The job was aborted at once with rank 1's message and
// no result.
TEST(MpiCli, ACorruptShardOnOneRankStopsEveryRankAndTheResultIsKept) {
  testing::TempDir dir("test_mpi_cli");
  // Two shards, one reader per rank: rank r reads one of them. The corrupt
  // one goes where rank 1 reads in epoch 0; both hold 40 good samples of 64
  // tokens first (5 steps of tiny's 512-token micro-batch).
  const std::vector<int64_t> rank1 = shards_for_reader(2, /*seed=*/1, /*epoch=*/0, /*rank=*/1, 2, 0, 1);
  ASSERT_EQ(rank1.size(), 1u);
  std::vector<std::string> paths = {dir.file("a.tar"), dir.file("b.tar")};
  const std::string bad = paths[static_cast<size_t>(rank1[0])];
  for (const std::string& path : paths) {
    TarShardWriter writer;
    writer.open(path);
    const std::vector<uint16_t> good(64, 7);
    const std::vector<uint16_t> out_of_vocabulary(64, 4096);  // tiny's vocabulary is 512
    for (int i = 0; i < 200; ++i) {
      const bool corrupt = path == bad && i == 40;
      const std::vector<uint16_t>& tokens = corrupt ? out_of_vocabulary : good;
      const std::string key = "sample" + std::to_string(i);
      writer.write_sample(key, {{"u16", tokens.data(), tokens.size() * sizeof(uint16_t)}});
    }
    writer.close();
  }
  const std::string list = dir.file("list.txt");
  std::ofstream(list) << paths[0] << "\n" << paths[1] << "\n";
  const CommandResult r = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                      " run tiny --steps 30 --set data.readers=1 --set data.shuffle_buffer=0"
                                      " --set data.seed=1 --set checkpoint.every_steps=0 --set data.shards=" + list +
                                      " --set data.timeout_s=301" +
                                      " --set report.progress_every=0 --out " + dir.file("r.json"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  const std::string line = "trainbench: rank 1: " + bad + ": byte ";
  EXPECT_EQ(r.err.rfind(line, 0), 0u) << r.err;
  EXPECT_EQ(r.err.find(line, 1), std::string::npos) << "printed once, by rank 0: " << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  const size_t trained = result["steps"].size();
  EXPECT_GE(trained, 4u) << r.out;
  EXPECT_LE(trained, 5u) << "stopped at the step rank 1 could not read";
  EXPECT_EQ(result["steps"].back()["step"].get<size_t>(), trained);
  std::string data_read, consistent;
  for (const auto& c : result["checks"]) {
    if (c["name"] == "data_read" && c["passed"] == false) data_read = c["detail"];
    if (c["name"] == "ranks_consistent" && c["passed"] == true) consistent = c["detail"];
  }
  EXPECT_EQ(data_read.rfind("rank 1: " + bad + ": byte ", 0), 0u) << result["checks"].dump();
  EXPECT_NE(data_read.find("4096"), std::string::npos) << data_read;
  EXPECT_NE(consistent.find("last at step " + std::to_string(trained) + ")"), std::string::npos)
      << "the ranks' parameters compared as the last step trained left them: " << result["checks"].dump();
  // A stalled read is told the same way only if its rank gives up before
  // its peers' all-reduce does: the result warns of a data.timeout_s above.
  const std::string warning = "data.timeout_s (301 s) is above comm.timeout_s (300 s)";
  EXPECT_NE(result["warnings"].dump().find(warning), std::string::npos) << result["warnings"].dump();
  // Before training too: the run it warns of ends without a summary.
  const size_t summary = r.out.find("\nsummary:");
  ASSERT_NE(summary, std::string::npos) << r.out;
  EXPECT_LT(r.out.find("warning: " + warning), summary) << r.out;
}

// data.on_corrupt=skip on two ranks: the warning rank 0 prints gives the
// job's totals, the same as the result JSON's, and rank 0's own share apart.
// It gave rank 0's count alone, and nothing when only rank 1 skipped.
TEST(MpiCli, SkippedShardsAreCountedOverAllRanksInTheWarning) {
  testing::TempDir dir("test_mpi_cli");
  const std::string shards = dir.file("shards");
  const CommandResult synth = run_command(std::string(TRAINBENCH_BINARY) + " shards synth --out " + shards +
                                          " --count 4 --samples 10 --vocab 512 --tokens 100:50");
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  for (const char* junk : {"/junk-a.tar", "/junk-b.tar"}) std::ofstream(shards + junk) << std::string(5000, 'x');
  const CommandResult r = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                      " run tiny --steps 16 --set data.readers=1 --set data.on_corrupt=skip"
                                      " --set checkpoint.every_steps=0 --set data.shards=" + shards +
                                      " --out " + dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  const int64_t samples = result["summary"]["storage_read"]["samples_skipped"].get<int64_t>();
  const int64_t shards_skipped = result["summary"]["storage_read"]["shards_skipped"].get<int64_t>();
  ASSERT_GE(shards_skipped, 2) << "each junk shard is read at least once";
  const std::string totals = "left out " + std::to_string(samples) + " corrupt sample(s) and " +
                             std::to_string(shards_skipped) + " shard(s) over 2 ranks (this rank: ";
  int warned = 0;
  for (const auto& w : result["warnings"]) warned += w.get<std::string>().find(totals) != std::string::npos;
  EXPECT_EQ(warned, 1) << totals << "\n" << result["warnings"].dump();
  EXPECT_NE(r.out.find(totals), std::string::npos) << r.out;
}

// A shard cut short (and one with no sample) that both ranks read, as the
// epochs hand shards round, is one shard each in the job's count, not one
// per rank that read it. (The data seed is fixed, so which rank reads which
// shard is too: with it, each rank's count summed gave 2 for both.)
TEST(MpiCli, AShardCutShortIsCountedOnceHoweverManyRanksReadIt) {
  testing::TempDir dir("test_mpi_cli");
  const std::string shards = dir.file("shards");
  const CommandResult synth = run_command(std::string(TRAINBENCH_BINARY) + " shards synth --out " + shards +
                                          " --count 4 --samples 4 --vocab 512 --tokens 100:50");
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  testing::copy_without_end_marker(shards + "/train-000000.tar", shards + "/cut.tar");
  std::ofstream(shards + "/empty.tar", std::ios::binary) << std::string(1024, '\0');  // the end marker alone
  // 6 shards of ~400 tokens, 3 a rank an epoch, 512 tokens a rank a step:
  // 24 steps are some ten epochs, each dealing the shards anew.
  const CommandResult r = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY +
                                      " run tiny --steps 24 --set data.readers=1 --set checkpoint.every_steps=0"
                                      " --set data.shards=" + shards + " --out " + dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  const nlohmann::json& read = result["summary"]["storage_read"];
  EXPECT_EQ(read["shards_cut_short"], 1) << read;
  EXPECT_EQ(read["shards_without_samples"], 1) << read;
  EXPECT_NE(result["warnings"].dump().find("1 shard(s) end without the tar end-of-archive marker"), std::string::npos)
      << result["warnings"].dump();
}

// bench comm's raw path is plain blocking MPI calls, which cannot time out:
// a rank stalled inside one (here rank 1, held by the test hook before its
// first raw call) hung the bench for ever. A watchdog ends the job, exit 3.
TEST(MpiCli, BenchCommsRawPathEndsWhenARankStalls) {
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command("env TRAINBENCH_TEST_STALL_RAW_RANK=1 timeout 120 " + kMpirun + "-np 2 " +
                                      TRAINBENCH_BINARY + " bench comm tiny --set comm.timeout_s=3"
                                      " --min-bytes 1K --max-bytes 4K");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("trainbench: comm: raw all_reduce of "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" made no progress for 3 s (comm.timeout_s) on rank "), std::string::npos) << r.err;
  EXPECT_LT(seconds, 60.0) << "the watchdog, not the test's timeout";
}

// comm.backend=local under a launcher of several tasks: each ran alone,
// exit 0, two one-rank reports (and one --out written twice).
TEST(MpiCli, ALocalBackendUnderALauncherOfSeveralTasksIsRefused) {
  testing::TempDir dir("test_mpi_cli");
  for (const std::string& command : {" run tiny --steps 6 --out " + dir.file("r.json"),
                                    std::string(" bench comm tiny --max-bytes 4K --iters 2")}) {
    const CommandResult r = run_command("timeout 120 " + kMpirun + "-np 2 " + TRAINBENCH_BINARY + command +
                                        " --set comm.backend=local");
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("comm.backend=local: started by a launcher as one of 2 tasks"), std::string::npos)
        << command << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.json")));
}

// Processes a torchrun-style launcher started (RANK, WORLD_SIZE) trained as
// one-rank jobs of their own, each exit 0 and all writing one --out; and a
// launcher that numbered a process without saying how many it started
// (PMIX_RANK alone) left it rank 0 of a world of 1, exit 0. Both are
// refused, the first before anything (exit 2), the second once MPI is up
// (exit 3). The torchrun case needs no MPI; the second runs MPI as a singleton.
TEST(MpiCli, ProcessesALauncherNumberedButMpiCannotJoinAreRefused) {
  testing::TempDir dir("test_mpi_cli");
  const std::string run = std::string(TRAINBENCH_BINARY) + " run tiny --steps 3 --set train.warmup_steps=1 " +
                          "--set checkpoint.every_steps=0 --out " + dir.file("r.json");
  // Refused as a torchrun-style launcher's process: `env` gives its variables.
  const auto expect_refused_as_torchruns = [&](const std::string& env, const std::string& options) {
    const CommandResult r = run_command("env " + env + " timeout 60 " + run + options);
    EXPECT_EQ(r.exit_code, 2) << env << options << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("started as one of WORLD_SIZE=2 processes by a torchrun-style launcher"), std::string::npos)
        << env << options << "\n" << r.err;
  };
  for (const char* backend : {"auto", "local", "mpi"})
    expect_refused_as_torchruns("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500",
                                std::string(" --set comm.backend=") + backend);
  // torchrun's children inside a Slurm step of one task (`srun -n1 torchrun
  // --nproc-per-node=2`): they each trained alone.
  expect_refused_as_torchruns("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 SLURM_JOB_ID=77 SLURM_JOBID=77 SLURM_STEP_ID=0 "
                              "SLURM_STEPID=0 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_STEP_NUM_TASKS=1", "");
  // torchrun's children inside an MPI task (`srun --mpi=pmix -n1 torchrun`):
  // each has that task's PMIX_RANK=0, and ran as an MPI singleton.
  expect_refused_as_torchruns("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_RANK=0 RANK=1 "
                              "WORLD_SIZE=2 LOCAL_RANK=1 GROUP_RANK=0 LOCAL_WORLD_SIZE=2", "");
  const CommandResult numbered =
      run_command("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_RANK=1 PMIX_NAMESPACE=x "
                  "timeout 60 " + run + " --set comm.backend=mpi");
  EXPECT_EQ(numbered.exit_code, 3) << numbered.out << numbered.err;
  EXPECT_NE(numbered.err.find("trainbench: comm: the launcher numbered this process rank 1 but MPI sees a world of 1"),
            std::string::npos)
      << numbered.err;
  // One line: alone, it has no peer for MPI_Abort to end, nor its banner.
  EXPECT_EQ(numbered.err.find("MPI_ABORT"), std::string::npos) << numbered.err;
  EXPECT_EQ(std::count(numbered.err.begin(), numbered.err.end(), '\n'), 1) << numbered.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.json")));
  // A single process with WORLD_SIZE 1 (or RANK alone) is one process: it runs.
  const CommandResult alone = run_command("env RANK=0 WORLD_SIZE=1 timeout 120 " + run);
  EXPECT_EQ(alone.exit_code, 0) << alone.out << alone.err;
}

// Two unbound ranks each running as many threads as the host has: the
// warning names the host (it said "this host" in rank 0's output whatever
// host the rank that spoke was on) and how many more ranks found the same.
TEST(MpiCli, TheOversubscriptionWarningNamesTheHostAndCountsTheRanks) {
  testing::TempDir dir("test_mpi_cli");
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  // Where this process may use fewer CPUs than the host has (an affinity
  // mask, a container's CPU set), the warning takes its per-rank form.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0 && static_cast<unsigned>(CPU_COUNT(&allowed)) < hardware)
    GTEST_SKIP() << "this process may use " << CPU_COUNT(&allowed) << " of the host's " << hardware
                 << " CPUs: the per-host form of the warning cannot be made here";
  const CommandResult r = run_command(
      "timeout 120 " + kMpirun + "--bind-to none -np 2 " + TRAINBENCH_BINARY +
      " run tiny --steps 3 --set train.warmup_steps=1 --set checkpoint.every_steps=0 --set train.threads=" +
      std::to_string(hardware) + " --out " + dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string host =
      nlohmann::json::parse(read_whole_file(dir.file("r.json")))["environment"]["host_gpus"][0]["host"];
  EXPECT_NE(r.out.find("warning: rank 0: 2 ranks on host " + host + " run " + std::to_string(hardware) +
                       " CPU thread(s) each"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(and 1 more rank(s) warn of theirs)"), std::string::npos) << r.out;
}

// Burn-in's fabric check and run --ceilings' network ceiling read the
// communicator's paths only, whose calls keep comm.timeout_s. They ran the
// raw path too, under a watchdog left at 300 s whatever comm.timeout_s said:
// a rank stalled there (the test hook) held both for minutes. Now they make
// no raw call and finish. (A raw call bounded by comm.timeout_s would end
// the job with exit 3; 30 s leaves the burn-in's hang watch, half of it,
// room for a loaded machine's storage check, which 1.5 s did not.)
TEST(MpiCli, BurnInAndTheCeilingsMakeNoRawCallThatOnlyBenchCommsWatchdogBounds) {
  testing::TempDir dir("test_mpi_cli");
  const std::string stalled = "env TRAINBENCH_TEST_STALL_RAW_RANK=1 TRAINBENCH_TEST_HEALTH_GBS=5 timeout 90 " + kMpirun +
                              "-np 2 " + TRAINBENCH_BINARY;
  const std::string common = " --set comm.timeout_s=30 --set train.threads=1 --set train.warmup_steps=2"
                             " --set report.progress_every=0 --set data.source=synthetic --set data.shards=";
  const CommandResult ceilings = run_command(stalled + " run tiny --steps 4 --ceilings --set checkpoint.every_steps=0" +
                                             common + " --out " + dir.file("r.json"));
  EXPECT_EQ(ceilings.exit_code, 0) << ceilings.out << ceilings.err;
  // Thresholds past this shared machine's noise, the fabric's and storage's
  // rates fixed (the hook): the verdict is not the point.
  const CommandResult burnin = run_command(stalled + " burnin tiny --duration 3s --set burnin.health_every_s=1" +
                                           " --set burnin.degrade_pct=90 --set burnin.straggler_pct=300" +
                                           " --set checkpoint.dir=" + dir.file("ckpt") + common +
                                           " --out " + dir.file("b.json"));
  EXPECT_EQ(burnin.exit_code, 0) << burnin.out << burnin.err;
}

}  // namespace
}  // namespace trainbench
