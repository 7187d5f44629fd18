// The exact-resume test on real MPI ranks, with and without ZeRO-1: 2 ranks train 20 steps
// straight; 2 ranks train, rank 0 is killed (SIGKILL) right after it
// committed the step-10 checkpoint, and a new job resumes from `latest` to
// step 20. Losses, parameters, AdamW state and data positions are the same
// bytes.
#include <gtest/gtest.h>

#include <filesystem>  // the wrapper script's mode
#include <fstream>
#include <functional>  // a test's look at the checkpoint
#include <map>         // losses by reading
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/checkpoint_runs.h"

namespace trainbench {
namespace {

using testing::CommandResult;
using testing::file_checksums;
using testing::losses_by_step;
using testing::read_whole_file;
using testing::run_command;

const std::string kMpirun = std::string("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") +
                            "OMPI_MCA_btl=self,vader timeout 300 " + TRAINBENCH_MPIEXEC + " --oversubscribe -np 2 ";

// One warm-up step: a resume from step 15 has steps after its warm-up to measure.
std::string run_2_ranks(const std::string& dir, const std::string& out, const std::string& extra = "") {
  return kMpirun + TRAINBENCH_BINARY + " run tiny --steps 20 --set checkpoint.dir=" + dir +
         " --set checkpoint.every_steps=10 --set checkpoint.keep=0 --set report.progress_every=0" +
         " --set comm.timeout_s=30 --set train.warmup_steps=1 --out " + out + " " + extra;
}

// comm.zero 0: every rank checkpoints the whole AdamW state; 1: its ZeRO-1 shard.
class CheckpointMpi : public ::testing::TestWithParam<int> {};

TEST_P(CheckpointMpi, TwoRanksKilledAndResumedEqualTheUninterruptedRun) {
  testing::TempDir dir("test_ckpt_mpi");
  const std::string zero = "--set comm.zero=" + std::to_string(GetParam()) + " ";
  const CommandResult straight = run_command(run_2_ranks(dir.file("a"), dir.file("a.json"), zero));
  ASSERT_EQ(straight.exit_code, 0) << straight.out << straight.err;

  const CommandResult killed =
      run_command("TRAINBENCH_TEST_CRASH_AT=committed@10 " + run_2_ranks(dir.file("b"), dir.file("b1.json"), zero));
  ASSERT_NE(killed.exit_code, 0) << killed.out << killed.err;
  ASSERT_EQ(read_whole_file(dir.file("b/latest")), "step_10\n");

  const CommandResult resumed =
      run_command(run_2_ranks(dir.file("b"), dir.file("b2.json"), zero + "--resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;

  const auto straight_losses = losses_by_step(dir.file("a.json"));
  const auto resumed_losses = losses_by_step(dir.file("b2.json"));
  ASSERT_EQ(resumed_losses.size(), 10u) << resumed.out << resumed.err;
  for (const auto& [step, loss] : resumed_losses) EXPECT_EQ(loss, straight_losses.at(step)) << "step " << step;
  // The resume's load, as the result reports it: the job read the
  // checkpoint once (each rank its own files and slices), not once per rank.
  const nlohmann::json load = nlohmann::json::parse(read_whole_file(dir.file("b2.json")))["resume"];
  const nlohmann::json manifest = nlohmann::json::parse(read_whole_file(dir.file("b/step_10/manifest.json")));
  EXPECT_EQ(load["checkpoint"], dir.file("b/step_10")) << load.dump();
  EXPECT_EQ(load["step"], 10);
  EXPECT_EQ(load["bytes_read"], manifest["total_bytes"]) << load.dump();
  EXPECT_GT(load["read_gbs"].get<double>(), 0.0) << load.dump();
  EXPECT_GE(load["load_s"].get<double>(), load["exchange_s"].get<double>()) << load.dump();
  EXPECT_TRUE(nlohmann::json::parse(read_whole_file(dir.file("a.json")))["resume"].is_null()) << "a fresh run";
  const auto a = file_checksums(dir.file("a/step_20"));
  EXPECT_EQ(a.size(), file_checksums(dir.file("b/step_10")).size());
  EXPECT_GE(a.size(), 4u) << "two ranks' files";
  EXPECT_EQ(a, file_checksums(dir.file("b/step_20")));
}

// A ZeRO-1 job of `ranks` ranks on a model of a few dozen parameters (1
// layer, d_model 2, `vocab`): 8 steps straight, and 4 with a checkpoint at
// step 4 (in dir/b) then 4 resumed from it, whose losses must be the straight
// run's. `inspect` looks at the checkpoint between the two halves.
void expect_tiny_zero_run_resumes(int ranks, int vocab,
                                  const std::function<void(const testing::TempDir&)>& inspect) {
  testing::TempDir dir("test_ckpt_mpi");
  const std::string run = std::string("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") +
                          "OMPI_MCA_btl=self,vader timeout 300 " + TRAINBENCH_MPIEXEC + " --oversubscribe -np " +
                          std::to_string(ranks) + " " + TRAINBENCH_BINARY + " run tiny --set model.vocab=" +
                          std::to_string(vocab) +
                          " --set model.d_model=2 --set model.n_heads=1"
                          " --set model.n_kv_heads=1 --set model.ffn_hidden=2 --set model.seq_len=4"
                          " --set model.n_layers=1 --set comm.zero=1 --set checkpoint.every_steps=4"
                          " --set checkpoint.keep=0 --set checkpoint.writers=2 --set data.synth_samples_per_shard=200"
                          " --set train.warmup_steps=2 --set train.threads=1 --set report.progress_every=0"
                          " --set comm.timeout_s=30 ";
  const CommandResult straight =
      run_command(run + "--steps 8 --set checkpoint.dir=" + dir.file("a") + " --out " + dir.file("a.json"));
  ASSERT_EQ(straight.exit_code, 0) << straight.out << straight.err;
  const CommandResult first =
      run_command(run + "--steps 4 --set checkpoint.dir=" + dir.file("b") + " --out " + dir.file("b1.json"));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  inspect(dir);
  const CommandResult resumed = run_command(run + "--steps 8 --set checkpoint.dir=" + dir.file("b") +
                                            " --resume latest --out " + dir.file("b2.json"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  const auto straight_losses = losses_by_step(dir.file("a.json"));
  const auto resumed_losses = losses_by_step(dir.file("b2.json"));
  ASSERT_EQ(resumed_losses.size(), 4u);
  for (const auto& [step, loss] : resumed_losses) EXPECT_EQ(loss, straight_losses.at(step)) << "step " << step;
}

// ZeRO-1 on 3 ranks with a model of 66 parameters (a block of 64 each):
// rank 2's optimizer shard is all padding, its adam_m and adam_v 0 bytes in
// a file of their own. The checkpoint committed, and its resume said "rank
// 2's files have no adam_m"; it resumes, equal to the uninterrupted run.
TEST(CheckpointMpiZero, ARankWithAnEmptyShardResumes) {
  expect_tiny_zero_run_resumes(3, 8, [](const testing::TempDir& dir) {
    // The state held alike (the master) in file 0; rank 2's moments, 0 bytes, in file 1.
    EXPECT_EQ(std::filesystem::file_size(dir.file("b/step_4/rank_00002_1.bin")), 0u) << "rank 2's empty optimizer file";
  });
}

// ZeRO-1 on 2 ranks with a model of 50 parameters: rank 0's shard is all of
// AdamW's state (one block of 64), rank 1's none. Rank 0 took its moments for
// state held alike (its shard was everything) and laid out other images than
// rank 1: its slice left half of them unwritten, the checkpoint committed,
// and the resume could not put it back together. The moments are each rank's
// own under ZeRO-1 whatever a shard's size, and the run resumes.
TEST(CheckpointMpiZero, ARankWhoseShardIsTheWholeOptimizerStillWritesItAsItsOwn) {
  expect_tiny_zero_run_resumes(2, 4, [](const testing::TempDir& dir) {
    const nlohmann::json manifest = nlohmann::json::parse(read_whole_file(dir.file("b/step_4/manifest.json")));
    int moments = 0;
    for (const auto& rank : manifest["ranks"]) {
      for (const auto& file : rank["files"]) {
        for (const auto& section : file["sections"]) {
          const std::string name = section["name"].get<std::string>();
          if (name == "adam_m" || name == "adam_v") {
            ++moments;
            EXPECT_FALSE(file.contains("slice")) << "rank " << rank["rank"].dump() << ": " << file.dump();
          }
        }
      }
    }
    EXPECT_GT(moments, 0) << "no adam_m or adam_v section in the manifest: " << manifest.dump();
  });
}

// A damaged file of rank 1's own (its trainer state and data position, the
// last of its files: the state the ranks hold alike comes first, in slices):
// every rank fails with rank 1's own reason (the file, the checksums, the
// checkpoint to resume from), which rank 0 prints; it used to print only
// "rank(s) 1 could not load their part".
// Two ranks' checkpoints of steps 5 to 20 in dir/c, `latest` pointed back
// at step 15 for a resume to read.
void two_rank_checkpoints_latest_at_15(const testing::TempDir& dir) {
  const CommandResult first =
      run_command(run_2_ranks(dir.file("c"), dir.file("c1.json"), "--set checkpoint.every_steps=5"));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  std::ofstream(dir.file("c/latest")) << "step_15\n";
}

TEST(CheckpointMpiDamage, ARankFilesDamageIsReportedInItsOwnWords) {
  testing::TempDir dir("test_ckpt_mpi");
  ASSERT_NO_FATAL_FAILURE(two_rank_checkpoints_latest_at_15(dir));
  // Resume from step 15, whose rank-1 file is damaged.
  const nlohmann::json manifest = nlohmann::json::parse(read_whole_file(dir.file("c/step_15/manifest.json")));
  const nlohmann::json& own = manifest["ranks"][1]["files"].back();
  ASSERT_FALSE(own.contains("slice")) << own.dump();
  ASSERT_GE(own["bytes"].get<int64_t>(), 8192) << own.dump();
  const std::string damaged = dir.file("c/step_15/" + own["name"].get<std::string>());
  ASSERT_EQ(run_command("printf 'XXXX' | dd of=" + damaged + " bs=1 seek=4096 conv=notrunc 2>/dev/null").exit_code, 0);
  const CommandResult resumed = run_command(run_2_ranks(dir.file("c"), dir.file("c2.json"), "--resume latest"));
  EXPECT_EQ(resumed.exit_code, 2) << resumed.err;
  EXPECT_NE(resumed.err.find("checkpoint file " + damaged + ": xxh64"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("--resume " + dir.file("c/step_10")), std::string::npos)
      << "names the earlier checkpoint: " << resumed.err;
  EXPECT_NE(resumed.err.find("(rank 1's part; rank(s) 1 could not load theirs)"), std::string::npos) << resumed.err;
  EXPECT_EQ(resumed.err.find("rank 0: "), std::string::npos) << "rank 1's failure, not rank 0's: " << resumed.err;
}

// Data parallelism's replicas are written once per job, not once per rank (as
// PyTorch DCP and Megatron's fully parallel save write them): the 2 ranks'
// slices of the master weights and AdamW's moments add up to the size of the
// one rank's files of them (that they put the state back together bit for
// bit is TwoRanksKilledAndResumedEqualTheUninterruptedRun's); each rank's
// trainer state stays its own, and each rank stages only its slices.
TEST(CheckpointMpi, TwoRanksWriteTheStateTheyHoldAlikeOnce) {
  testing::TempDir dir("test_ckpt_mpi");
  const std::string common = " run tiny --steps 10 --set checkpoint.every_steps=10 --set report.progress_every=0"
                             " --set train.threads=1 --set checkpoint.dir=";
  ASSERT_EQ(run_command(std::string(TRAINBENCH_BINARY) + common + dir.file("one") + " --out " + dir.file("one.json"))
                .exit_code,
            0);
  const CommandResult two = run_command(kMpirun + TRAINBENCH_BINARY + common + dir.file("two") + " --out " +
                                        dir.file("two.json"));
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  const auto state_files = [](const nlohmann::json& rank) {
    nlohmann::json files = rank["files"];
    files.erase(files.size() - 1);  // the trainer state and data position: every rank's own
    return files;
  };
  const nlohmann::json one = nlohmann::json::parse(read_whole_file(dir.file("one/step_10/manifest.json")));
  const nlohmann::json both = nlohmann::json::parse(read_whole_file(dir.file("two/step_10/manifest.json")));
  int64_t one_bytes = 0, sliced_bytes = 0;
  for (const auto& file : state_files(one["ranks"][0])) {
    EXPECT_FALSE(file.contains("slice")) << "one rank writes whole images: " << file.dump();
    one_bytes += file["bytes"].get<int64_t>();
  }
  for (const auto& rank : both["ranks"])
    for (const auto& file : state_files(rank)) {
      EXPECT_TRUE(file.contains("slice")) << file.dump();
      sliced_bytes += file["bytes"].get<int64_t>();
    }
  EXPECT_GT(one_bytes, 0);
  EXPECT_EQ(sliced_bytes, one_bytes);
  EXPECT_EQ(one["schema"], "trainbench.checkpoint/v1");
  EXPECT_EQ(both["schema"], "trainbench.checkpoint/v2") << "slices: refused by a binary that cannot read them";
  // And a rank stages only what it writes of it: its host memory for
  // snapshots, and their copy, are its slices, not the whole state.
  int64_t rank_0_slices = 0;
  for (const auto& file : state_files(both["ranks"][0])) rank_0_slices += file["bytes"].get<int64_t>();
  const auto staging = [&](const std::string& result) {
    return nlohmann::json::parse(read_whole_file(dir.file(result)))["summary"]["storage_write"]["staging_bytes"]
        .get<int64_t>();
  };
  EXPECT_EQ(staging("one.json"), one_bytes);
  EXPECT_EQ(staging("two.json"), rank_0_slices);
  EXPECT_LE(rank_0_slices, one_bytes / 2 + 4096 * static_cast<int64_t>(both["ranks"][0]["files"].size()));
  // What the result reports as written: the one copy and each rank's own file.
  int64_t own_bytes = 0;
  for (const auto& rank : both["ranks"]) own_bytes += rank["files"].back()["bytes"].get<int64_t>();
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("two.json")));
  EXPECT_EQ(result["checkpoints"][0]["bytes"].get<int64_t>(), one_bytes + own_bytes) << result["checkpoints"].dump();
}

// checkpoint.resume_read: own (each rank reads its own slices, the ranks
// pass them on) reads the checkpoint once; all (every rank reads every
// slice) reads the slices once per rank. The two resumes train on alike.
TEST(CheckpointMpi, AResumeReadsTheSlicesOnceOrOncePerRankAsAsked) {
  testing::TempDir dir("test_ckpt_mpi");
  ASSERT_NO_FATAL_FAILURE(two_rank_checkpoints_latest_at_15(dir));
  const nlohmann::json manifest = nlohmann::json::parse(read_whole_file(dir.file("c/step_15/manifest.json")));
  int64_t slices = 0;
  for (const auto& rank : manifest["ranks"])
    for (const auto& file : rank["files"])
      if (file.contains("slice")) slices += file["bytes"].get<int64_t>();
  ASSERT_GT(slices, 0);
  std::map<std::string, std::map<int64_t, double>> losses;
  for (const std::string read : {"own", "all"}) {
    const CommandResult resumed = run_command(run_2_ranks(
        dir.file("c"), dir.file(read + ".json"),
        "--resume " + dir.file("c/step_15") + " --set checkpoint.resume_read=" + read));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
    const nlohmann::json load = nlohmann::json::parse(read_whole_file(dir.file(read + ".json")))["resume"];
    const int64_t expected = manifest["total_bytes"].get<int64_t>() + (read == "all" ? slices : 0);  // 2 ranks
    EXPECT_EQ(load["bytes_read"].get<int64_t>(), expected) << read << ": " << load.dump();
    losses[read] = losses_by_step(dir.file(read + ".json"));
  }
  EXPECT_EQ(losses["own"].size(), 5u);
  EXPECT_EQ(losses["own"], losses["all"]);
}

// Each rank writes a slice of the state the ranks hold alike, and a resume
// puts them together: a damaged slice of rank 1's is every rank's failure,
// named by its file.
TEST(CheckpointMpiDamage, ADamagedSliceFailsEveryRanksResumeNamingTheFile) {
  testing::TempDir dir("test_ckpt_mpi");
  ASSERT_NO_FATAL_FAILURE(two_rank_checkpoints_latest_at_15(dir));
  const std::string damaged = dir.file("c/step_15/rank_00001_0.bin");
  ASSERT_EQ(run_command("printf 'XXXX' | dd of=" + damaged + " bs=1 seek=16 conv=notrunc 2>/dev/null").exit_code, 0);
  const CommandResult resumed = run_command(run_2_ranks(dir.file("c"), dir.file("c2.json"), "--resume latest"));
  EXPECT_EQ(resumed.exit_code, 2) << resumed.err;
  EXPECT_NE(resumed.err.find("checkpoint file " + damaged + ": xxh64"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find("--resume " + dir.file("c/step_10")), std::string::npos) << resumed.err;
  // Found by rank 1, which reads it, alone: each rank reads only its own
  // slices and the ranks pass them on, so the job reads the state once.
  EXPECT_NE(resumed.err.find("(rank 1's part; rank(s) 1 could not load theirs)"), std::string::npos) << resumed.err;
}

// Two ranks resuming `latest` with `steps` steps, each in its own folder
// dir/r<rank>/, where the relative checkpoint.dir ck is that rank's alone (as
// on node-local disks).
CommandResult resume_each_rank_in_its_own_folder(const testing::TempDir& dir, int steps, int every_steps) {
  const std::string wrapper = dir.file("own_folder.sh");
  std::ofstream(wrapper) << "#!/bin/bash\ncd " << dir.path() << "/r$OMPI_COMM_WORLD_RANK && exec \"$@\"\n";
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  return run_command(kMpirun + wrapper + " " + TRAINBENCH_BINARY + " run tiny --steps " + std::to_string(steps) +
                     " --set checkpoint.dir=ck --set checkpoint.every_steps=" + std::to_string(every_steps) +
                     " --set checkpoint.keep=0 --set report.progress_every=0 --set comm.timeout_s=30"
                     " --set train.warmup_steps=1 --resume latest --out r.json");
}

// Each rank reads its own slices and the ranks pass them on: ranks that
// found two runs' checkpoints of the same step (node-local disks) would put
// together a state that neither run had. Rank r resumes in r<r>/, which holds
// a checkpoint of step 20 of a run of train.seed r (a seed a resume may change).
TEST(CheckpointMpiDamage, RanksThatFindTwoRunsCheckpointsOfOneStepStopAtResume) {
  testing::TempDir dir("test_ckpt_mpi");
  for (const char* rank : {"0", "1"}) {
    const CommandResult run = run_command(run_2_ranks(dir.file(std::string("r") + rank + "/ck"),
                                                      dir.file(std::string("r") + rank + ".json"),
                                                      std::string("--set train.seed=") + rank));
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  }
  // A resume that writes no checkpoint (the folder is only read): the
  // resume's own comparison of the ranks' slices.
  const CommandResult resumed = resume_each_rank_in_its_own_folder(dir, 25, 0);
  EXPECT_EQ(resumed.exit_code, 2) << resumed.out << resumed.err;
  EXPECT_NE(resumed.err.find("the ranks found different checkpoints of step 20: rank 1's files are not rank 0's"),
            std::string::npos)
      << resumed.err;
  // One that checkpoints meets the folder check before step 1 first: rank 1
  // does not see the folder rank 0 writes.
  const CommandResult writing = resume_each_rank_in_its_own_folder(dir, 25, 10);
  EXPECT_EQ(writing.exit_code, 2) << writing.out << writing.err;
  EXPECT_NE(writing.err.find("checkpoint.dir ck is not the folder rank 0 (on "), std::string::npos) << writing.err;
}

// Each rank resolves `latest` itself: on node-local disks, or through a
// stale network-filesystem cache, the ranks find different steps. They went
// on training from them and the job ended at comm.timeout_s without a result
// (or "parameters diverged"); now every rank stops at resume, exit 2, naming
// both steps. Rank r runs in r<r>/, where a relative checkpoint.dir is its own.
TEST(CheckpointMpiDamage, RanksThatFindDifferentCheckpointsStopAtResume) {
  testing::TempDir dir("test_ckpt_mpi");
  const CommandResult first =
      run_command(run_2_ranks(dir.file("c"), dir.file("c1.json"), "--set checkpoint.every_steps=5"));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  for (const char* rank : {"r0", "r1"}) {
    std::filesystem::create_directory(dir.file(rank));
    std::filesystem::copy(dir.file("c"), dir.file(std::string(rank) + "/ck"), std::filesystem::copy_options::recursive);
  }
  std::ofstream(dir.file("r0/ck/latest")) << "step_10\n";
  std::ofstream(dir.file("r1/ck/latest")) << "step_5\n";
  const CommandResult resumed = resume_each_rank_in_its_own_folder(dir, 20, 0);
  EXPECT_EQ(resumed.exit_code, 2) << resumed.out << resumed.err;
  EXPECT_NE(resumed.err.find("the ranks found different checkpoints: rank 0 step 10, rank 1 step 5"),
            std::string::npos)
      << resumed.err;
  EXPECT_EQ(resumed.err.find("timed out"), std::string::npos) << resumed.err;
}

// Rank 1's checkpoint files cannot grow past 500 KiB (ulimit -f: EFBIG, a
// full disk to the writer) while rank 0 writes on. Rank 1's failure used to
// be taken from its writer in a round where rank 0 was still busy and then
// forgotten: rank 0 committed without rank 1's files and the run ended with
// exit 3 even under on_full=skip, naming rank 0 and the missing record. Now
// every rank gives the checkpoint up together, in rank 1's own words.
std::string rank1_file_limit_wrapper(const testing::TempDir& dir) {
  const std::string wrapper = dir.file("rank1_small_files.sh");
  std::ofstream(wrapper) << "#!/bin/bash\n[ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && ulimit -f 500\nexec \"$@\"\n";
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  return wrapper;
}

TEST(CheckpointMpiDiskFull, OneRanksFullDiskIsAgreedOnByEveryRank) {
  testing::TempDir dir("test_ckpt_mpi");
  const std::string wrapper = rank1_file_limit_wrapper(dir);
  // TCP over loopback: the file size limit would fail shared-memory transport's segment.
  const std::string mpirun = std::string("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ") +
                             "OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo timeout 300 " +
                             TRAINBENCH_MPIEXEC + " --oversubscribe -np 2 ";
  const std::string common = " run tiny --set data.source=synthetic --set train.threads=1"
                             " --set checkpoint.every_steps=5 --set report.progress_every=0 --set comm.timeout_s=60";
  const CommandResult skipped = run_command(mpirun + wrapper + " " + TRAINBENCH_BINARY + common + " --steps 8" +
                                            " --set checkpoint.dir=" + dir.file("skip") +
                                            " --set checkpoint.on_full=skip --out " + dir.file("skip.json"));
  ASSERT_EQ(skipped.exit_code, 0) << skipped.out << skipped.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("skip.json")));
  std::string warning;
  for (const auto& w : result["warnings"])
    if (w.get<std::string>().find("checkpoint of step 5 skipped") != std::string::npos) warning = w;
  EXPECT_NE(warning.find("disk full on rank(s) 1 (rank 1: "), std::string::npos) << result["warnings"].dump();
  EXPECT_FALSE(std::filesystem::exists(dir.file("skip/step_5"))) << "nothing committed without rank 1's files";

  // Steps enough that the failure is met before the last one: on a loaded
  // machine rank 1's writer met its limit after step 8 had begun (8 steps).
  const CommandResult failed = run_command(mpirun + wrapper + " " + TRAINBENCH_BINARY + common + " --steps 30" +
                                           " --set checkpoint.dir=" + dir.file("fail") + " --out " +
                                           dir.file("fail.json"));
  EXPECT_EQ(failed.exit_code, 3) << failed.err;
  EXPECT_NE(failed.err.find("checkpoint of step 5 failed on rank(s) 1: rank 1: "), std::string::npos) << failed.err;
  EXPECT_EQ(failed.err.find("see the failing rank's message"), std::string::npos) << failed.err;
  // Every rank stopped after the same step, and rank 0 wrote the result of
  // the steps trained (it was lost to the failure).
  const nlohmann::json failed_result = nlohmann::json::parse(read_whole_file(dir.file("fail.json")));
  EXPECT_GE(failed_result["steps"].size(), 5u);
  EXPECT_LT(failed_result["steps"].size(), 30u) << "stopped at the failure";
  EXPECT_EQ(failed_result["summary"]["storage_write"]["checkpoints_failed"], 1);
  EXPECT_NE(failed_result["checks"].dump().find("checkpoint of step 5 failed on rank(s) 1"), std::string::npos)
      << failed_result["checks"].dump();
  // The ranks' parameters compared at that end, as at a run's last step.
  const std::string last_step = std::to_string(failed_result["steps"].back()["step"].get<int64_t>());
  bool consistent = false;
  for (const auto& c : failed_result["checks"])
    consistent |= c["name"] == "ranks_consistent" && c["passed"] == true &&
                  c["detail"].get<std::string>().find("last at step " + last_step + ")") != std::string::npos;
  EXPECT_TRUE(consistent) << "compared at step " << last_step << ": " << failed_result["checks"].dump();
}

// `kMpirun` and a wrapper under which rank 1 alone runs on storage that
// stops responding: its fsyncs of paths containing `part` never return
// (tests/support/failing_syscalls.cpp, preloaded); the other ranks' are fine.
std::string mpirun_with_rank_1_fsync_hung(const testing::TempDir& dir, const std::string& part) {
  const std::string wrapper = dir.file("rank1_hung_fsync.sh");
  std::ofstream(wrapper) << "#!/bin/bash\n[ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && export LD_PRELOAD="
                         << FAILING_SYSCALLS_PRELOAD << " TRAINBENCH_TEST_HANG_FSYNC=" << part << "\nexec \"$@\"\n";
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  return kMpirun + wrapper + " " + TRAINBENCH_BINARY;
}

// Rank 1's storage stops responding while it writes the step-5 checkpoint
// (its fsyncs there never return; rank 0's are fine). Rank 0 used to wait
// for it in the agreement round and time out after comm.timeout_s naming
// no cause, while rank 1 waited for its writer forever. Now both ranks
// compare notes every quarter second (comm.timeout_s 5 s is never reached),
// rank 1 gives its writer up at checkpoint.timeout_s, and every rank fails
// the checkpoint in rank 1's words.
TEST(CheckpointMpiHungStorage, OneRanksHungWriteIsAgreedOnAtTheTimeout) {
  testing::TempDir dir("test_ckpt_mpi");
  const CommandResult r = run_command(
      mpirun_with_rank_1_fsync_hung(dir, "step_5.tmp") +
      " run tiny --steps 12 --set data.source=synthetic --set train.threads=1 --set checkpoint.every_steps=5"
      " --set checkpoint.timeout_s=10 --set comm.timeout_s=5 --set report.progress_every=0 --set checkpoint.dir=" +
      dir.file("c") + " --out " + dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("checkpoint of step 5 failed on rank(s) 1: rank 1: writing this rank's files into " +
                       dir.file("c") + "/step_5.tmp did not finish within checkpoint.timeout_s=10 s"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("timed out"), std::string::npos) << "no collective timed out: " << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  EXPECT_EQ(result["summary"]["storage_write"]["checkpoints_failed"], 1);
  ASSERT_EQ(result["checkpoints"].size(), 1u) << result["checkpoints"].dump();
  EXPECT_EQ(result["checkpoints"][0]["status"], "failed");
}

// Rank 1's storage stops responding before step 1: the fsync of its probe
// of checkpoint.dir never returns (rank 0's is fine). Rank 0 waited for it
// in the collective after the probe and timed out after comm.timeout_s,
// naming no cause, while rank 1 hung for ever. Now rank 1's watchdog ends
// the job at checkpoint.timeout_s in rank 1's words, and rank 0, waiting
// for a peer all that time, is not blamed for its own storage.
TEST(CheckpointMpiHungStorage, OneRanksHungProbeBeforeStepOneEndsTheJobNamingIt) {
  testing::TempDir dir("test_ckpt_mpi");
  const CommandResult r = run_command(
      mpirun_with_rank_1_fsync_hung(dir, ".trainbench-write-probe-") +
      " run tiny --steps 4 --set train.warmup_steps=1 --set data.source=synthetic --set train.threads=1"
      " --set checkpoint.every_steps=2"
      " --set checkpoint.timeout_s=5 --set comm.timeout_s=60 --set report.progress_every=0 --set checkpoint.dir=" +
      dir.file("c") + " --out " + dir.file("r.json"));
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("trainbench: rank 1: checking that checkpoint.dir " + dir.file("c") +
                       " is writable and taking its lock did not finish within checkpoint.timeout_s=5 s: the storage "
                       "stopped responding"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("rank 0: checking"), std::string::npos) << "rank 0 waited for rank 1: " << r.err;
  EXPECT_EQ(r.err.find("timed out"), std::string::npos) << "no collective timed out: " << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.json")));
}

// checkpoint.dir is a disk of its own on ranks 1 and 2 (a tmpfs mounted
// over the path in each rank's own mount namespace: a node-local disk at the
// path every node mounts), each rank on a host of its own name (its own UTS
// namespace; MPI's processor name follows it). Every rank could write
// there, so the run started, and rank 0's first commit failed a checkpoint
// interval in (exit 3, "no record from rank 1"). Now the job stops before
// step 1, naming the ranks and their hosts (tbnode1 was left out beside
// tbnode10, its name inside the other's).
TEST(CheckpointMpiSharedFolder, RanksThatSeeAnotherFolderAtThePathStopTheJobBeforeStepOne) {
  testing::TempDir dir("test_ckpt_mpi");
  const std::string folder = dir.file("c");
  std::filesystem::create_directory(folder);
  const CommandResult can_mount =
      run_command("unshare -m -u sh -c 'mount -t tmpfs tmpfs " + folder + " && hostname tbnode0' 2>&1");
  if (can_mount.exit_code != 0)
    GTEST_SKIP() << "cannot mount a tmpfs and name a host in namespaces of their own (" << can_mount.out
                 << "; needs root with CAP_SYS_ADMIN): this test did not run";
  const std::string wrapper = dir.file("own_hosts.sh");
  std::ofstream(wrapper) << "#!/bin/bash\nr=$OMPI_COMM_WORLD_RANK\n"
                            "[ \"$r\" = 0 ] && exec unshare -u sh -c 'hostname tbnode5 && exec \"$@\"' sh \"$@\"\n"
                            "[ \"$r\" = 1 ] && h=tbnode10 || h=tbnode1\n"
                            "exec unshare -m -u sh -c \"hostname $h && mount -t tmpfs tmpfs "
                         << folder << " && exec \\\"\\$@\\\"\" sh \"$@\"\n";
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  std::string three_ranks = kMpirun;
  three_ranks.replace(three_ranks.find("-np 2"), 5, "-np 3");
  const CommandResult r = run_command(three_ranks + wrapper + " " + TRAINBENCH_BINARY +
                                      " run tiny --steps 8 --set train.threads=1 --set checkpoint.every_steps=2"
                                      " --set comm.timeout_s=30 --set checkpoint.dir=" +
                                      folder + " --out " + dir.file("r.json"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("checkpoint.dir " + folder + " is not the folder rank 0 (on tbnode5) writes: rank(s) 1, 2 "
                       "(on tbnode10, tbnode1) do not see the file rank 0 made in it"),
            std::string::npos)
      << r.err;
  // Progress on (tiny's first-step line, "step     1 ..."): with it off, and
  // "step 1" looked for, this could not fail.
  EXPECT_EQ(r.out.find("\nstep "), std::string::npos) << "no step ran: " << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("r.json")));
  // Rank 0's probe is gone with it: nothing is left in the folder it keeps.
  EXPECT_TRUE(std::filesystem::is_empty(folder)) << "the probe or a lock file was left in " << folder;
}

// A checkpoint record's stall_s is the loop time it blocked on rank 0, so
// over a run the records add up to the steps' ckpt_stall_s. The agreement
// rounds of the steps after a checkpoint (waiting for the slowest rank's
// writer) were left out of the records: 53 ms against 161 on 2 ranks.
TEST(CheckpointMpiStall, TheRecordsStallsAddUpToTheStepsCheckpointStall) {
  testing::TempDir dir("test_ckpt_mpi");
  const CommandResult r = run_command(run_2_ranks(dir.file("c"), dir.file("r.json"),
                                                  "--set checkpoint.every_steps=5 --set train.threads=1"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  double records = 0, steps = 0;
  for (const auto& c : result["checkpoints"]) records += c["stall_s"].get<double>();
  for (const auto& s : result["steps"]) steps += s["ckpt_stall_s"].get<double>();
  ASSERT_GT(steps, 0.0);
  EXPECT_NEAR(records, steps, 0.05 * steps + 0.002) << "records " << records << " s, steps " << steps << " s";
}

INSTANTIATE_TEST_SUITE_P(Zero, CheckpointMpi, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) { return "zero" + std::to_string(info.param); });

}  // namespace
}  // namespace trainbench
