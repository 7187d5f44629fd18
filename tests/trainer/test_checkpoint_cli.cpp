// Checkpointing through the real binary: the default run writes one; a run
// killed at every phase of a checkpoint resumes from the newest committed
// one; a 2-rank run killed and resumed ends bit-identical to one that was
// not; a full disk, an unwritable folder, a corrupt file and an
// incompatible config each end with one clear line.
#include <gtest/gtest.h>

#include <fcntl.h>     // open: the first run's lock, held by the test
#include <sys/file.h>  // flock
#include <unistd.h>    // write, close

#include <chrono>   // the hung write's run time
#include <cstring>  // std::memcpy
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>  // std::pair: the hung calls
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/dir_lock.h"  // kCheckpointLockName
#include "tests/support/mounted_filesystem.h"  // a small tmpfs for the disk-full test
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/trainer/checkpoint_runs.h"

namespace trainbench {
namespace {

using testing::CommandResult;
using testing::file_checksums;
using testing::latest_of;
using testing::losses_by_step;
using testing::read_json;
using testing::read_whole_file;
using testing::run_command;
namespace fs = std::filesystem;

// The step_N and step_N.tmp folders in `dir`.
std::vector<std::string> list_step_folders(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(dir, ignored))
    if (entry.path().filename().string().rfind("step_", 0) == 0) names.push_back(entry.path().filename());
  return names;
}

// A tiny run with checkpoints into `dir`; `extra` adds options. Its
// progress lines are tiny's (the first step's, then every 10th): the tests
// that say "no step may run" look for them, and with report.progress_every=0
// they could not fail.
std::string tiny_run(const std::string& dir, int steps, int every, const std::string& out,
                     const std::string& extra = "") {
  return std::string(TRAINBENCH_BINARY) + " run tiny --steps " + std::to_string(steps) +
         " --set checkpoint.dir=" + dir + " --set checkpoint.every_steps=" + std::to_string(every) + " --out " + out +
         " " + extra;
}

// --resume latest into a folder that does not exist: refused before the
// folder is made (it was left behind, empty).
TEST(CheckpointCli, ResumeLatestFromAMissingFolderMakesNone) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("none/sub");
  const CommandResult r = run_command(tiny_run(ckpt, 12, 4, dir.file("r.json"), "--resume latest"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--resume latest: checkpoint.dir " + ckpt + " does not exist"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("none")));
  // Without a checkpoint.dir there is nowhere to look: said, and no result.
  const CommandResult nowhere = run_command(std::string(TRAINBENCH_BINARY) + " run tiny --steps 6 --resume latest "
                                            "--set checkpoint.dir= --out " + dir.file("nowhere.json"));
  EXPECT_EQ(nowhere.exit_code, 2) << nowhere.err;
  EXPECT_NE(nowhere.err.find("--resume latest: set checkpoint.dir to the folder the checkpoints are in"),
            std::string::npos) << nowhere.err;
  EXPECT_FALSE(fs::exists(dir.file("nowhere.json")));
}

// A run too short for its checkpoint interval measures no storage write: it
// says so rather than report an empty storage_write silently.
TEST(CheckpointCli, ARunWithNoStepDueACheckpointWarns) {
  testing::TempDir dir("test_ckpt_cli");
  for (const int every : {8, 9}) {
    const std::string checkpoints = dir.file("ck-" + std::to_string(every));
    const std::string out = checkpoints + ".json";
    const CommandResult r = run_command(tiny_run(checkpoints, 8, every, out));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const nlohmann::json result = read_json(out);
    const bool warned = result["warnings"].dump().find("no step was due a checkpoint") != std::string::npos;
    EXPECT_EQ(warned, every == 9) << "every_steps=" << every << ": " << result["warnings"].dump();
    EXPECT_EQ(result["checkpoints"].size(), every == 9 ? 0u : 1u);
  }
}

// Two runs given one checkpoint.dir wrote into each other's step_N.tmp (one
// committed a checkpoint that failed its checksums on resume, exit 0): the
// second is refused at start, naming the holder; once the first is done, the
// folder is free again.
TEST(CheckpointCli, ASecondRunOnATakenCheckpointDirIsRefused) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string checkpoints = dir.file("ck");
  fs::create_directories(checkpoints);
  {
    // The first run, as a lock this test holds the way a run does.
    const int fd = ::open((checkpoints + "/" + kCheckpointLockName).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    ASSERT_EQ(::write(fd, "pid 4242 on node07\n", 19), 19);
    const CommandResult second = run_command(tiny_run(checkpoints, 8, 4, dir.file("second.json")));
    ::close(fd);
    EXPECT_EQ(second.exit_code, 2) << second.err;
    EXPECT_NE(second.err.find("checkpoint.dir " + checkpoints + " is in use by another trainbench run (pid 4242 "
                              "on node07)"),
              std::string::npos) << second.err;
    EXPECT_NE(second.err.find("(if that process is gone, its node down, remove " + checkpoints + "/" +
                              kCheckpointLockName + ")"),
              std::string::npos) << second.err;
    EXPECT_EQ(second.err.find('\n'), second.err.size() - 1) << "one line: " << second.err;
    EXPECT_EQ(second.out.find("step "), std::string::npos) << "no step ran: " << second.out;
  }
  const CommandResult free_again = run_command(tiny_run(checkpoints, 8, 4, dir.file("third.json")));
  EXPECT_EQ(free_again.exit_code, 0) << free_again.err;
  EXPECT_EQ(latest_of(checkpoints), "step_8");
}

TEST(CheckpointCli, DefaultRunWritesAndReportsACheckpointInATemporaryFolder) {
  testing::TempDir dir("test_ckpt_cli");
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " run --steps 12 --out " + dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checkpoints "), std::string::npos) << r.out;
  const nlohmann::json result = read_json(dir.file("r.json"));
  ASSERT_GE(result.at("checkpoints").size(), 1u) << result.dump();
  const nlohmann::json& first = result["checkpoints"][0];
  EXPECT_EQ(first["status"], "committed");
  EXPECT_GT(first["bytes"].get<int64_t>(), 0);
  EXPECT_GT(first["write_gbs"].get<double>(), 0.0);
  EXPECT_GT(result["summary"]["storage_write"]["bytes_written"].get<int64_t>(), 0);
  // The temporary folder named in the header is gone.
  const std::string marker = "checkpoint: every 10 steps to ";
  const size_t at = r.out.find(marker);
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string folder = r.out.substr(at + marker.size(), r.out.find(' ', at + marker.size()) - at - marker.size());
  EXPECT_FALSE(fs::exists(folder)) << folder;
}

TEST(CheckpointCli, KilledAtEveryPhaseResumesFromTheNewestCommittedCheckpoint) {
  for (const std::string phase : {"copy", "write", "before_rename", "after_rename"}) {
    SCOPED_TRACE(phase);
    testing::TempDir dir("test_ckpt_cli");
    const std::string ckpt = dir.file("ckpt");
    // Checkpoints at 4 and 8; the process dies inside the second one.
    const CommandResult killed = run_command("TRAINBENCH_TEST_CRASH_AT=" + phase + "@8 " +
                                             tiny_run(ckpt, 12, 4, dir.file("killed.json")));
    ASSERT_NE(killed.exit_code, 0) << killed.out << killed.err;
    EXPECT_FALSE(fs::exists(dir.file("killed.json"))) << "the run should have died before the end";
    EXPECT_EQ(latest_of(ckpt), "step_4");

    const CommandResult resumed =
        run_command(tiny_run(ckpt, 12, 4, dir.file("resumed.json"), "--resume latest"));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
    const nlohmann::json result = read_json(dir.file("resumed.json"));
    EXPECT_EQ(result["steps"][0]["step"], 5);
    EXPECT_EQ(result["steps"].back()["step"], 12);
    EXPECT_EQ(latest_of(ckpt), "step_12");
    EXPECT_FALSE(fs::exists(ckpt + "/step_8.tmp"));
  }
}

// A 20-step run against the same run killed (SIGKILL) once its step-10
// checkpoint is committed and resumed: the same losses and checkpoint bytes.
void expect_resume_equals_uninterrupted(const std::string& settings) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string extra = "--set checkpoint.keep=0 " + settings;
  const CommandResult straight = run_command(tiny_run(dir.file("a"), 20, 10, dir.file("a.json"), extra));
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const CommandResult killed = run_command("TRAINBENCH_TEST_CRASH_AT=committed@10 " +
                                           tiny_run(dir.file("b"), 20, 10, dir.file("b1.json"), extra));
  ASSERT_NE(killed.exit_code, 0) << killed.out << killed.err;
  ASSERT_EQ(latest_of(dir.file("b")), "step_10");
  const CommandResult rest =
      run_command(tiny_run(dir.file("b"), 20, 10, dir.file("b2.json"), extra + " --resume latest"));
  ASSERT_EQ(rest.exit_code, 0) << rest.err;

  const auto a = losses_by_step(dir.file("a.json"));
  const auto b = losses_by_step(dir.file("b2.json"));
  ASSERT_EQ(b.size(), 10u);
  for (const auto& [step, loss] : b) EXPECT_EQ(loss, a.at(step)) << "step " << step;
  // Parameters, optimizer state and data position: the same bytes.
  EXPECT_EQ(file_checksums(dir.file("a/step_10")), file_checksums(dir.file("b/step_10")));
  EXPECT_EQ(file_checksums(dir.file("a/step_20")), file_checksums(dir.file("b/step_20")));
  // Bytes per token is the data's: the samples the resume read to get back
  // to its position count with their tokens (their bytes alone made it read
  // ~10x the uninterrupted run's).
  const double straight_bpt = testing::read_json(dir.file("a.json")).at("summary").at("storage_read").at("bytes_per_token");
  const double resumed_bpt = testing::read_json(dir.file("b2.json")).at("summary").at("storage_read").at("bytes_per_token");
  EXPECT_GT(straight_bpt, 0);
  EXPECT_LT(resumed_bpt, 1.5 * straight_bpt) << "resumed " << resumed_bpt << " vs uninterrupted " << straight_bpt;
  EXPECT_GT(resumed_bpt, straight_bpt / 1.5) << "resumed " << resumed_bpt << " vs uninterrupted " << straight_bpt;
  // Those tokens are named, in the JSON and on the console: the line read
  // "1.47 MiB in 13 samples".
  const nlohmann::json read = testing::read_json(dir.file("b2.json")).at("summary").at("storage_read");
  EXPECT_EQ(testing::read_json(dir.file("a.json")).at("summary").at("storage_read").at("tokens_stepped_over"), 0);
  EXPECT_GT(read.at("tokens_stepped_over").get<int64_t>(), 0) << read.dump();
  EXPECT_GT(read.at("samples_stepped_over").get<int64_t>(), 0) << read.dump();
  // Per token trained: the samples' tokens and each one's separator.
  EXPECT_NEAR(resumed_bpt,
              read.at("bytes_read").get<double>() /
                  (read.at("tokens").get<double>() + read.at("tokens_stepped_over").get<double>() +
                   read.at("samples").get<double>() + read.at("samples_stepped_over").get<double>()),
              1e-9 * resumed_bpt);
  EXPECT_NE(rest.out.find(" tokens stepped over to resume), "), std::string::npos) << rest.out;
  EXPECT_EQ(straight.out.find("stepped over"), std::string::npos) << straight.out;
  // The load: every file of the checkpoint read once.
  const nlohmann::json load = testing::read_json(dir.file("b2.json")).at("resume");
  EXPECT_EQ(load.at("bytes_read"), testing::read_json(dir.file("b/step_10/manifest.json")).at("total_bytes"));
  EXPECT_EQ(load.at("step"), 10);
  EXPECT_TRUE(testing::read_json(dir.file("a.json")).at("resume").is_null());
}

TEST(CheckpointCli, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  // One rank here; the 2-rank version runs under mpirun (test_checkpoint_mpi).
  expect_resume_equals_uninterrupted("");
}

// LoRA: the checkpoint holds the adapters and their optimizer state; the
// frozen base is rebuilt from train.seed on resume, so the resumed run must
// still match bit for bit.
TEST(CheckpointCli, LoraResumedRunEqualsTheUninterruptedOneBitForBit) {
  expect_resume_equals_uninterrupted("--set train.mode=lora --set lora.rank=4");
}

TEST(CheckpointCli, LoraCheckpointHoldsTheAdaptersAndTheBaseOnlyWhenAsked) {
  testing::TempDir dir("test_ckpt_cli");
  auto state_bytes = [&](const std::string& name, const std::string& extra) {
    const CommandResult r = run_command(
        tiny_run(dir.file(name), 6, 4, dir.file(name + ".json"), "--set train.mode=lora --set lora.rank=4 " + extra));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json manifest = read_json(dir.file(name + "/step_4/manifest.json"));
    std::map<std::string, int64_t> bytes;
    for (const nlohmann::json& t : manifest.at("extra").at("state_tensors"))
      bytes[t.at("name").get<std::string>()] = t.at("bytes").get<int64_t>();
    return bytes;
  };
  const auto adapters = state_bytes("adapters", "");
  const auto with_base = state_bytes("base", "--set checkpoint.include_base=true");
  EXPECT_EQ(adapters.count("base_fp32"), 0u);
  EXPECT_EQ(adapters.count("master_fp32"), 0u);
  // tiny: 2 layers × (q [64→64], k, v [64→32], o [64→64]) at rank 4:
  // A = 4·64 each, B = 4·(64 + 32 + 32 + 64); fp32.
  const int64_t adapter_params = 2 * (4 * 64 * 4 + 4 * (64 + 32 + 32 + 64));
  EXPECT_EQ(adapters.at("lora_fp32"), 4 * adapter_params);
  EXPECT_EQ(adapters.at("adam_m"), 4 * adapter_params);
  ASSERT_EQ(with_base.count("base_fp32"), 1u);
  // Embedding and LM head 512·64 each, per layer two norms, q, k, v, o and
  // the MLP's three 64×192 matrices, the final norm.
  const int64_t base_params = 2 * 512 * 64 + 2 * (2 * 64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 64 * 192) + 64;
  EXPECT_EQ(with_base.at("base_fp32"), 4 * base_params);
  EXPECT_EQ(with_base.at("lora_fp32"), adapters.at("lora_fp32"));

  // Adapters of another rank cannot be resumed: refused by name, before training.
  const CommandResult other_rank = run_command(tiny_run(
      dir.file("adapters"), 10, 4, dir.file("r.json"), "--set train.mode=lora --set lora.rank=8 --resume latest"));
  EXPECT_EQ(other_rank.exit_code, 2) << other_rank.err;
  EXPECT_NE(other_rank.err.find("it has lora.rank = 4 but this run has 8"), std::string::npos) << other_rank.err;
  // Adapters alone cannot give a run that wants the base from its checkpoint.
  const CommandResult wants_base = run_command(tiny_run(dir.file("adapters"), 10, 4, dir.file("r.json"),
                                                        "--set train.mode=lora --set lora.rank=4 --set checkpoint.include_base=true "
                                                        "--resume latest"));
  EXPECT_EQ(wants_base.exit_code, 2) << wants_base.err;
  EXPECT_NE(wants_base.err.find("written without the frozen base"), std::string::npos) << wants_base.err;
}

TEST(CheckpointCli, FlippedByteIsRefusedWithTheFileAndThePreviousCheckpoint) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_command(tiny_run(ckpt, 8, 4, dir.file("r.json"), "--set checkpoint.keep=0")).exit_code, 0);
  const std::string victim = ckpt + "/step_8/rank_00000_0.bin";
  ASSERT_TRUE(fs::exists(victim));
  {
    std::fstream file(victim, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(100);
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    file.seekp(100);
    file.write(&byte, 1);
  }
  // 14 steps: past tiny's 5 warm-up steps from either checkpoint.
  const CommandResult r = run_command(tiny_run(ckpt, 14, 4, dir.file("r2.json"), "--resume latest"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("rank_00000_0.bin"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--resume " + ckpt + "/step_4"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  // The offered checkpoint works.
  const CommandResult previous =
      run_command(tiny_run(ckpt, 14, 4, dir.file("r3.json"), "--resume " + ckpt + "/step_4"));
  EXPECT_EQ(previous.exit_code, 0) << previous.err;
}

TEST(CheckpointCli, UnwritableFolderFailsBeforeTraining) {
  testing::TempDir dir("test_ckpt_cli");
  std::ofstream(dir.file("a-file")) << "not a folder";
  const CommandResult r = run_command(tiny_run(dir.file("a-file/ckpt"), 8, 4, dir.file("r.json")));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("checkpoint.dir " + dir.file("a-file/ckpt")), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "no step may run: " << r.out;
}

// The CPU engine's sums split by thread: a resume with another count trains
// on but cannot repeat the checkpointed run's bytes, and says so, naming the
// count that would; with the same count it says nothing.
TEST(CheckpointCli, AResumeWithAnotherThreadCountWarnsThatItsBytesDiffer) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_command(tiny_run(ckpt, 8, 4, dir.file("r.json"), "--set train.threads=1 --set train.warmup_steps=1")).exit_code, 0);
  const CommandResult same =
      run_command(tiny_run(ckpt, 12, 4, dir.file("r2.json"), "--resume latest --set train.threads=1 --set train.warmup_steps=1"));
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(read_json(dir.file("r2.json")).at("warnings").dump().find("CPU engine thread"), std::string::npos);
  const CommandResult other =
      run_command(tiny_run(ckpt, 16, 4, dir.file("r3.json"), "--resume latest --set train.threads=2 --set train.warmup_steps=1"));
  ASSERT_EQ(other.exit_code, 0) << other.err;
  const std::string warnings = read_json(dir.file("r3.json")).at("warnings").dump();
  EXPECT_NE(warnings.find("rank 0: the checkpoint was written with 1 CPU engine thread(s) and this run has 2"),
            std::string::npos) << warnings;
  EXPECT_NE(warnings.find("(set train.threads=1 to repeat them)"), std::string::npos) << warnings;
}

// A shard replaced by another of its name (same count, same list) is other
// data at the saved position: the resume read on in it silently, a changed
// loss from its first step. The manifest records each shard's name and size;
// a resume over the same files goes on.
TEST(CheckpointCli, AResumeOverAShardReplacedUnderItsNameIsRefusedNamingIt) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string shards = dir.file("shards"), other = dir.file("other");
  for (const auto& [folder, seed] : {std::pair{shards, "3"}, std::pair{other, "9"}}) {
    const CommandResult made = run_command(std::string(TRAINBENCH_BINARY) + " shards synth --out " + folder +
                                           " --count 4 --samples 40 --vocab 512 --tokens 256:64 --seed " + seed);
    ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
  }
  const std::string ckpt = dir.file("ckpt"), data = "--set data.shards=" + shards + " --set train.warmup_steps=1 ";
  ASSERT_EQ(run_command(tiny_run(ckpt, 5, 5, dir.file("r1.json"), data)).exit_code, 0);
  const nlohmann::json manifest = nlohmann::json::parse(testing::read_whole_file(ckpt + "/step_5/manifest.json"));
  ASSERT_EQ(manifest["extra"]["shards"].size(), 4u) << manifest.dump();
  const std::string first = manifest["extra"]["shards"][0];
  EXPECT_EQ(first.rfind("train-000000.tar " + std::to_string(fs::file_size(shards + "/train-000000.tar")) + " ", 0), 0u)
      << first;
  EXPECT_EQ(first.size(), std::string("train-000000.tar ").size() +
                              std::to_string(fs::file_size(shards + "/train-000000.tar")).size() + 1 + 16)
      << "name, size and a 16-digit hash: " << first;
  // The same files: the resume goes on.
  const CommandResult same = run_command(tiny_run(ckpt, 7, 5, dir.file("r2.json"), data + "--resume " + ckpt + "/step_5"));
  EXPECT_EQ(same.exit_code, 0) << same.err;
  // The same files moved and spelt otherwise, with the EOS id written out
  // (-1 is vocab - 1): the same stream. data.shards's text was compared and
  // refused it ("it has data.shards = .../shards but this run has .../moved/").
  fs::rename(shards, dir.file("moved"));
  const CommandResult moved = run_command(
      tiny_run(ckpt, 7, 5, dir.file("r2m.json"),
               "--set data.shards=" + dir.file("moved") + "/ --set data.eos_token=511 --set train.warmup_steps=1 "
               "--resume " + ckpt + "/step_5"));
  EXPECT_EQ(moved.exit_code, 0) << moved.err;
  if (moved.exit_code == 0) {
    EXPECT_EQ(losses_by_step(dir.file("r2m.json")), losses_by_step(dir.file("r2.json")));
  }
  fs::rename(dir.file("moved"), shards);
  // A shard added to the folder: said as such, with the way on.
  fs::copy_file(shards + "/train-000000.tar", shards + "/train-000004.tar");
  const CommandResult added =
      run_command(tiny_run(ckpt, 7, 5, dir.file("r2a.json"), data + "--resume " + ckpt + "/step_5"));
  EXPECT_EQ(added.exit_code, 2) << added.err;
  EXPECT_NE(added.err.find("the saved loader position was taken over 4 shards, and this run reads 5"),
            std::string::npos)
      << added.err;
  EXPECT_NE(added.err.find("(restore them, or start a new run)"), std::string::npos) << added.err;
  fs::remove(shards + "/train-000004.tar");
  const auto size_then = fs::file_size(shards + "/train-000001.tar");
  fs::copy_file(other + "/train-000001.tar", shards + "/train-000001.tar", fs::copy_options::overwrite_existing);
  ASSERT_NE(fs::file_size(shards + "/train-000001.tar"), size_then) << "the other seed's shard is another size";
  const CommandResult changed =
      run_command(tiny_run(ckpt, 7, 5, dir.file("r3.json"), data + "--resume " + ckpt + "/step_5"));
  EXPECT_EQ(changed.exit_code, 2) << changed.out << changed.err;
  EXPECT_NE(changed.err.find("data.shards: shard 2 of 4, " + shards + "/train-000001.tar, is 'train-000001.tar "),
            std::string::npos)
      << changed.err;
  EXPECT_NE(changed.err.find("when the checkpoint was taken"), std::string::npos) << changed.err;
  EXPECT_FALSE(fs::exists(dir.file("r3.json")));
  // Shards of one size (fixed-length samples), made again with another
  // seed: names and sizes alike, the data not.
  const std::string fixed = dir.file("fixed"), fixed_ckpt = dir.file("fixed_ckpt");
  const std::string make_fixed = std::string(TRAINBENCH_BINARY) + " shards synth --out " + fixed +
                                 " --count 4 --samples 40 --vocab 512 --tokens 128 --seed ";
  ASSERT_EQ(run_command(make_fixed + "3").exit_code, 0);
  const std::string fixed_data = "--set data.shards=" + fixed + " --set train.warmup_steps=1 ";
  ASSERT_EQ(run_command(tiny_run(fixed_ckpt, 5, 5, dir.file("f1.json"), fixed_data)).exit_code, 0);
  const auto fixed_size = fs::file_size(fixed + "/train-000000.tar");
  fs::remove_all(fixed);
  ASSERT_EQ(run_command(make_fixed + "9").exit_code, 0);
  ASSERT_EQ(fs::file_size(fixed + "/train-000000.tar"), fixed_size) << "fixed-length samples: one size";
  const CommandResult remade =
      run_command(tiny_run(fixed_ckpt, 7, 5, dir.file("f2.json"), fixed_data + "--resume " + fixed_ckpt + "/step_5"));
  EXPECT_EQ(remade.exit_code, 2) << remade.out << remade.err;
  EXPECT_NE(remade.err.find("data.shards: shard 1 of 4, " + fixed + "/train-000000.tar, is 'train-000000.tar " +
                            std::to_string(fixed_size) + " "),
            std::string::npos)
      << remade.err;
}

TEST(CheckpointCli, IncompatibleResumeIsRefused) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_command(tiny_run(ckpt, 8, 4, dir.file("r.json"))).exit_code, 0);
  const CommandResult shape = run_command(
      tiny_run(ckpt, 12, 4, dir.file("r2.json"), "--resume latest --set model.d_model=128"));
  EXPECT_EQ(shape.exit_code, 2) << shape.err;
  EXPECT_NE(shape.err.find("it has model.d_model = 64 but this run has 128"), std::string::npos) << shape.err;
  // The global batch decides which samples each step takes.
  const CommandResult accumulation = run_command(
      tiny_run(ckpt, 12, 4, dir.file("r2.json"), "--resume latest --set train.grad_accum=2"));
  EXPECT_EQ(accumulation.exit_code, 2) << accumulation.err;
  EXPECT_NE(accumulation.err.find("it has train.grad_accum = 1 but this run has 2"), std::string::npos)
      << accumulation.err;
  // The optimizer state's layout: the reason names it (it named only the
  // model, the batch and the data stream).
  const CommandResult zero =
      run_command(tiny_run(ckpt, 12, 4, dir.file("r2.json"), "--resume latest --set comm.zero=1"));
  EXPECT_EQ(zero.exit_code, 2) << zero.err;
  EXPECT_NE(zero.err.find("it has comm.zero = 0 but this run has 1 (a resumed run must keep the model, what it "
                          "trains and how its optimizer state is laid out, the batch and the data stream)"),
            std::string::npos)
      << zero.err;
  const CommandResult data = run_command(
      tiny_run(ckpt, 12, 4, dir.file("r2.json"), "--resume latest --set data.seed=7"));
  EXPECT_EQ(data.exit_code, 2) << data.err;
  EXPECT_NE(data.err.find("data.seed"), std::string::npos) << data.err;
  const CommandResult done = run_command(tiny_run(ckpt, 8, 4, dir.file("r3.json"), "--resume latest"));
  EXPECT_EQ(done.exit_code, 2) << done.err;
  EXPECT_NE(done.err.find("train.steps"), std::string::npos) << done.err;
  // 4 steps left, all within tiny's 5 warm-up steps (counted from the resumed
  // step): it trained them, measured nothing and exited 0.
  const CommandResult warmup = run_command(tiny_run(ckpt, 12, 4, dir.file("r5.json"), "--resume latest"));
  EXPECT_EQ(warmup.exit_code, 2) << warmup.err;
  EXPECT_NE(warmup.err.find("the 4 steps left to train.steps 12 are all within train.warmup_steps 5"),
            std::string::npos)
      << warmup.err;
  EXPECT_FALSE(fs::exists(dir.file("r5.json")));
  const CommandResult measured =
      run_command(tiny_run(ckpt, 12, 4, dir.file("r6.json"), "--resume latest --set train.warmup_steps=3"));
  EXPECT_EQ(measured.exit_code, 0) << measured.err;
  const CommandResult none = run_command(tiny_run(dir.file("empty"), 8, 4, dir.file("r4.json"), "--resume latest"));
  EXPECT_EQ(none.exit_code, 2) << none.err;
  // A refused --resume PATH into a new checkpoint.dir: the folder the run
  // made goes again (it stayed, with the lock's file in it).
  for (const std::string& refused : {"--resume " + dir.file("nowhere"),
                                     "--resume " + ckpt + " --set model.d_model=128"}) {
    const CommandResult r = run_command(tiny_run(dir.file("new"), 12, 4, dir.file("r7.json"), refused));
    EXPECT_EQ(r.exit_code, 2) << refused << ": " << r.err;
    EXPECT_FALSE(fs::exists(dir.file("new"))) << refused;
  }
  // One that was there before stays, however the run ends.
  fs::create_directories(dir.file("kept"));
  EXPECT_EQ(run_command(tiny_run(dir.file("kept"), 12, 4, dir.file("r8.json"), "--resume " + dir.file("nowhere")))
                .exit_code,
            2);
  EXPECT_TRUE(fs::exists(dir.file("kept")));
}

// tiny warms up for 5 steps; these runs are shorter.
const std::string kFew = "--set train.warmup_steps=1 ";

// One line on stderr, exit 2, nothing trained.
void expect_refused(const CommandResult& r, const std::string& part) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_EQ(r.out.find("\nstep "), std::string::npos) << "no step may run: " << r.out;
}

std::string int64_bytes(int64_t value) {
  std::string bytes(sizeof value, '\0');
  std::memcpy(bytes.data(), &value, sizeof value);
  return bytes;
}

// A damaged data position or trainer state whose checksums were fixed up
// (so only what the reader checks beyond them can catch it): one line
// naming the checkpoint and the field, never a crash (the shard cursor at
// these values was SIGSEGV/SIGBUS, or a wild path: "cannot open: Bad address").
TEST(CheckpointCli, DamagedPositionOrTrainerStateIsRefusedNamingTheCheckpoint) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string good = dir.file("good");
  ASSERT_EQ(run_command(tiny_run(good, 4, 2, dir.file("r.json"), kFew)).exit_code, 0);
  const auto damaged = [&](const std::string& name, const std::string& section, int64_t offset,
                           const std::string& bytes) {
    const std::string ckpt = dir.file(name);
    fs::copy(good, ckpt, fs::copy_options::recursive);
    testing::rewrite_section(ckpt + "/step_4", section, offset, bytes);
    return run_command(tiny_run(ckpt, 6, 2, dir.file(name + ".json"), kFew + "--resume latest"));
  };
  // The position: an 8-byte tag, six header fields and the reader count,
  // then reader 0's epoch and, at 72, its shard cursor.
  int i = 0;
  for (const int64_t cursor : {int64_t{8}, int64_t{9}, int64_t{1} << 32, static_cast<int64_t>(0xffffffff80000000ULL),
                               int64_t{-1}}) {
    SCOPED_TRACE(cursor);
    const std::string name = "cursor" + std::to_string(i++);
    expect_refused(damaged(name, "data_position", 72, int64_bytes(cursor)),
                   "--resume " + dir.file(name) + "/step_4: rank 0's data_position: loader position: reader 0: "
                   "shard_cursor " + std::to_string(cursor));
  }
  expect_refused(damaged("tag", "data_position", 0, "XXXXXXXX"), "rank 0's data_position: loader position: wrong tag");
  // The micro-batches taken, at 48: each step takes grad_accum of them
  // (2^63-1 overflowed at the next batch and indexed reader -1: SIGSEGV).
  // Past 2^62 the loader's own parse refuses it, before the step is compared.
  expect_refused(damaged("consumed-huge", "data_position", 48, int64_bytes(std::numeric_limits<int64_t>::max())),
                 "rank 0's data_position: loader position: batches_consumed is " +
                     std::to_string(std::numeric_limits<int64_t>::max()));
  for (const int64_t consumed : {int64_t{1} << 62, int64_t{1000}, int64_t{3}}) {
    const std::string name = "consumed" + std::to_string(i++);
    expect_refused(damaged(name, "data_position", 48, int64_bytes(consumed)),
                   "rank 0's data_position: batches_consumed is " + std::to_string(consumed) +
                       ", but 4 step(s) of train.grad_accum 1 took 4");
  }
  expect_refused(damaged("state-garbage", "trainer_state", 0, std::string("\x01\xff\n garbage", 11)),
                 "/step_4: rank 0's trainer_state: not JSON");
  // The section is the JSON object alone, its keys in order; the CPU
  // engine's thread count (this machine's CPUs by default) sets its length.
  const std::string file = read_whole_file(good + "/step_4/rank_00000_2.bin");
  const std::string state = file.substr(0, file.find('}') + 1);
  ASSERT_EQ(state.rfind("{\"cpu_threads\":", 0), 0u) << state;
  ASSERT_NE(state.find(",\"data_seed\":1,\"rank\":0,\"step\":4,\"world_size\":1}"), std::string::npos) << state;
  expect_refused(damaged("state-array", "trainer_state", 0, "[1, 2]" + std::string(state.size() - 6, ' ')),
                 "rank 0's trainer_state: not a JSON object");
  // Its fields, where they are: the values of rank and step.
  const int64_t rank_at = static_cast<int64_t>(state.find("\"rank\":") + 7);
  const int64_t step_at = static_cast<int64_t>(state.find("\"step\":") + 7);
  expect_refused(damaged("state-step", "trainer_state", step_at, "2"),
                 "rank 0's trainer_state: field step is 2, expected 4");
  expect_refused(damaged("state-rank", "trainer_state", rank_at, "7"), "rank 0's trainer_state: field rank is 7, expected 0");
  expect_refused(damaged("state-type", "trainer_state", step_at - 3, "X"), "trainer_state: field step is missing");
}

// The manifest's step is the folder's; `latest` naming two folders or
// holding garbage is quoted escaped on one line.
TEST(CheckpointCli, TamperedManifestStepOrLatestIsRefusedOnOneLine) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_command(tiny_run(ckpt, 4, 2, dir.file("r.json"), kFew)).exit_code, 0);
  const std::string manifest_path = ckpt + "/step_4/manifest.json";
  const std::string manifest = read_whole_file(manifest_path);
  for (const int64_t step : {0, 2}) {
    nlohmann::json m = nlohmann::json::parse(manifest);
    m["step"] = step;
    std::ofstream(manifest_path) << m.dump();
    expect_refused(run_command(tiny_run(ckpt, 6, 2, dir.file("s.json"), kFew + "--resume latest")),
                   manifest_path + ": field step is " + std::to_string(step) + " but the folder is step_4");
  }
  // The temporary shards' size a resume adopts from the manifest is checked
  // as the key is: -5 made other shards, exit 0; 10^12 was exit 3 in the
  // shard maker's words.
  for (const nlohmann::json& value : {nlohmann::json(-5), nlohmann::json(1000000000000), nlohmann::json("abc")}) {
    nlohmann::json m = nlohmann::json::parse(manifest);
    m["config"]["data"]["synth_samples_per_shard"] = value;
    std::ofstream(manifest_path) << m.dump();
    expect_refused(run_command(tiny_run(ckpt, 6, 2, dir.file("s.json"), kFew + "--resume latest")),
                   manifest_path + ": config.data.synth_samples_per_shard is " + value.dump() +
                       ", not an integer from 0 to 16777216: the manifest is damaged");
  }
  // A config of another type ended the resume in the JSON library's words
  // ("malformed manifest: [json.exception.type_error.304] cannot use at()
  // with number"), and one without its data section likewise.
  for (const nlohmann::json& value : {nlohmann::json(5), nlohmann::json(nullptr), nlohmann::json("abc")}) {
    nlohmann::json m = nlohmann::json::parse(manifest);
    m["config"] = value;
    std::ofstream(manifest_path) << m.dump();
    const CommandResult r = run_command(tiny_run(ckpt, 6, 2, dir.file("s.json"), kFew + "--resume latest"));
    expect_refused(r, manifest_path + ": config is " + value.dump() + ", not an object: the manifest is damaged");
    EXPECT_NE(r.err.find("--resume " + ckpt + "/step_2"), std::string::npos) << "the earlier one offered: " << r.err;
  }
  nlohmann::json without_data = nlohmann::json::parse(manifest);
  without_data["config"].erase("data");
  std::ofstream(manifest_path) << without_data.dump();
  expect_refused(run_command(tiny_run(ckpt, 6, 2, dir.file("s.json"), kFew + "--resume latest")),
                 manifest_path + ": config.data.synth_samples_per_shard is null");
  std::ofstream(manifest_path) << manifest;
  std::ofstream(ckpt + "/latest") << "step_4\nstep_2\n";
  expect_refused(run_command(tiny_run(ckpt, 6, 2, dir.file("s.json"), kFew + "--resume latest")),
                 "\"step_4\\x0astep_2\" is not a checkpoint folder name");
  std::ofstream(ckpt + "/latest") << std::string("\x1b[2J\xff\x01", 6);
  expect_refused(run_command(tiny_run(ckpt, 6, 2, dir.file("s.json"), kFew + "--resume latest")),
                 "\"\\x1b[2J\\xff\\x01\" is not a checkpoint folder name");
  std::ofstream(ckpt + "/latest") << "step_4\n";
  EXPECT_EQ(run_command(tiny_run(ckpt, 6, 2, dir.file("s.json"), kFew + "--resume latest")).exit_code, 0);
}

// A run without --resume leaves another run's checkpoints alone: refused
// before training, whatever its config, and the checkpoints unchanged.
TEST(CheckpointCli, FreshRunRefusesAFolderHoldingCheckpoints) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_command(tiny_run(ckpt, 4, 2, dir.file("a.json"), kFew)).exit_code, 0);
  const auto step_2 = file_checksums(ckpt + "/step_2"), step_4 = file_checksums(ckpt + "/step_4");
  const std::string message = "checkpoint.dir " + ckpt +
                              " already holds checkpoints (latest: step_4): continue with --resume latest, "
                              "or choose an empty checkpoint.dir";
  expect_refused(run_command(tiny_run(ckpt, 6, 3, dir.file("b.json"), kFew + "--set model.d_model=128")), message);
  expect_refused(run_command(tiny_run(ckpt, 4, 2, dir.file("c.json"), kFew + "--set train.seed=99")), message);
  EXPECT_FALSE(fs::exists(dir.file("b.json")));
  EXPECT_EQ(latest_of(ckpt), "step_4");
  EXPECT_EQ(file_checksums(ckpt + "/step_2"), step_2);
  EXPECT_EQ(file_checksums(ckpt + "/step_4"), step_4);
  // Without `latest`, a committed folder is enough; the remedy names what
  // a resume can use (it said --resume latest, which then failed).
  fs::remove(ckpt + "/latest");
  expect_refused(run_command(tiny_run(ckpt, 4, 2, dir.file("d.json"), kFew)),
                 "already holds checkpoints (step_2, step_4): continue with --resume " + ckpt +
                     "/step_4, or choose an empty checkpoint.dir");
  // A latest naming a step deleted by hand: the same, and --resume latest
  // names the checkpoint to resume from instead.
  std::ofstream(ckpt + "/latest") << "step_8\n";
  expect_refused(run_command(tiny_run(ckpt, 4, 2, dir.file("d.json"), kFew)),
                 "already holds checkpoints (step_2, step_4, and a latest pointer that names no usable "
                 "checkpoint): continue with --resume " + ckpt + "/step_4,");
  expect_refused(run_command(tiny_run(ckpt, 6, 2, dir.file("d.json"), kFew + "--resume latest")),
                 "latest names step_8, but " + ckpt + "/step_8/manifest.json is missing; the newest committed "
                 "checkpoint there is step_4: --resume " + ckpt + "/step_4");
  // Continuing it is what the folder is for: as the messages said.
  const CommandResult resumed = run_command(tiny_run(ckpt, 6, 2, dir.file("e.json"), kFew + "--resume " + ckpt + "/step_4"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(latest_of(ckpt), "step_6");
  EXPECT_EQ(run_command(tiny_run(ckpt, 8, 2, dir.file("e2.json"), kFew + "--resume latest")).exit_code, 0);
  EXPECT_EQ(latest_of(ckpt), "step_8");
  // A leftover step_N.tmp of a crashed run is not a committed checkpoint.
  fs::create_directories(dir.file("crashed/step_2.tmp"));
  EXPECT_EQ(run_command(tiny_run(dir.file("crashed"), 4, 2, dir.file("f.json"), kFew)).exit_code, 0);
}

// The manifest `latest` names is damaged: the refusal and --resume latest
// both name the newest checkpoint that reads (they said --resume latest, and
// gave a parse error alone).
TEST(CheckpointCli, ADamagedManifestUnderLatestNamesTheCheckpointToResumeFrom) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_command(tiny_run(ckpt, 4, 2, dir.file("a.json"), kFew)).exit_code, 0);
  std::ofstream(ckpt + "/step_4/manifest.json") << "{bad";
  expect_refused(run_command(tiny_run(ckpt, 4, 2, dir.file("b.json"), kFew)),
                 "already holds checkpoints (step_2, step_4, and a latest pointer that names no usable "
                 "checkpoint): continue with --resume " + ckpt + "/step_2,");
  const CommandResult latest = run_command(tiny_run(ckpt, 6, 2, dir.file("c.json"), kFew + "--resume latest"));
  expect_refused(latest, "checkpoint manifest " + ckpt + "/step_4/manifest.json: not valid JSON");
  EXPECT_NE(latest.err.find("; resume from the previous one instead: --resume " + ckpt + "/step_2\n"), std::string::npos)
      << latest.err;
  EXPECT_EQ(run_command(tiny_run(ckpt, 6, 2, dir.file("d.json"), kFew + "--resume " + ckpt + "/step_2")).exit_code, 0);
}

// A resume from another folder's checkpoint is a new run in checkpoint.dir:
// into a folder holding checkpoints it would replace `latest` and let
// retention delete that run's steps, as a fresh run would (it was let in).
// Resuming a checkpoint of the folder itself, by path, continues its run.
TEST(CheckpointCli, ResumeFromElsewhereRefusesAFolderHoldingAnotherRunsCheckpoints) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string mine = dir.file("mine"), other = dir.file("other");
  ASSERT_EQ(run_command(tiny_run(mine, 4, 2, dir.file("a.json"), kFew)).exit_code, 0);
  ASSERT_EQ(run_command(tiny_run(other, 2, 2, dir.file("b.json"), kFew)).exit_code, 0);
  const auto step_4 = file_checksums(mine + "/step_4");
  expect_refused(run_command(tiny_run(mine, 6, 2, dir.file("c.json"), kFew + "--resume " + other + "/step_2")),
                 "checkpoint.dir " + mine + " already holds checkpoints (latest: step_4): this run resumes from " +
                     other + "/step_2, outside it,");
  EXPECT_EQ(latest_of(mine), "step_4");
  EXPECT_EQ(file_checksums(mine + "/step_4"), step_4);
  // Its own checkpoint by path (a trailing slash on the folder changes nothing), or into an empty folder: allowed.
  EXPECT_EQ(run_command(tiny_run(mine + "/", 6, 2, dir.file("d.json"), kFew + "--resume " + mine + "/step_4")).exit_code, 0);
  EXPECT_EQ(latest_of(mine), "step_6");
  EXPECT_EQ(run_command(tiny_run(dir.file("fresh"), 4, 2, dir.file("e.json"), kFew + "--resume " + other + "/step_2"))
                .exit_code,
            0);
}

// A step whose loss is not finite commits nothing: `latest` stays the last
// good checkpoint and retention deletes nothing for it.
TEST(CheckpointCli, DivergedRunCommitsNoCheckpointAndKeepsTheGoodOnes) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(run_command(tiny_run(ckpt, 4, 2, dir.file("a.json"), kFew)).exit_code, 0);
  // lr 1e38: step 5's update overflows the weights, step 6's gradient norm is NaN.
  const CommandResult diverged = run_command(
      tiny_run(ckpt, 10, 2, dir.file("b.json"), kFew + "--resume latest --set train.lr=1e38"));
  EXPECT_EQ(diverged.exit_code, 4) << diverged.out << diverged.err;
  EXPECT_NE(diverged.err.find("check failed: loss_finite: gradient norm is nan at step 6"), std::string::npos)
      << diverged.err;
  EXPECT_EQ(latest_of(ckpt), "step_4");
  EXPECT_TRUE(fs::exists(ckpt + "/step_2/manifest.json")) << "retention deleted a good checkpoint";
  EXPECT_FALSE(fs::exists(ckpt + "/step_6"));
  EXPECT_FALSE(fs::exists(ckpt + "/step_6.tmp"));
  EXPECT_EQ(run_command(tiny_run(ckpt, 6, 2, dir.file("c.json"), kFew + "--resume latest")).exit_code, 0)
      << "the good checkpoint resumes";

  // A checkpoint every step: the one of the step before the NaN holds the
  // overflowed weights, and is given up too.
  const std::string every = dir.file("every");
  const CommandResult r = run_command(tiny_run(every, 10, 1, dir.file("d.json"), kFew + "--set train.lr=1e38"));
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_FALSE(fs::exists(every + "/latest"));
  EXPECT_TRUE(list_step_folders(every).empty());
  const nlohmann::json result = read_json(dir.file("d.json"));
  ASSERT_EQ(result.at("checkpoints").size(), 1u) << result["checkpoints"].dump();
  EXPECT_EQ(result["checkpoints"][0]["status"], "skipped_diverged");
  EXPECT_NE(result["warnings"].dump().find("given up"), std::string::npos) << result["warnings"].dump();
}

TEST(CheckpointCli, BusyCheckpointIsSkippedOrWaitedForAsConfigured) {
  testing::TempDir dir("test_ckpt_cli");
  // Every step: the previous checkpoint is always still in flight one step
  // later (its commit needs a second agreement round).
  const CommandResult skip = run_command(tiny_run(dir.file("s"), 10, 1, dir.file("s.json"),
                                                  "--set checkpoint.when_busy=skip"));
  ASSERT_EQ(skip.exit_code, 0) << skip.err;
  const nlohmann::json skipped = read_json(dir.file("s.json"));
  EXPECT_GT(skipped["summary"]["storage_write"]["checkpoints_skipped"].get<int64_t>(), 0);
  EXPECT_GT(skipped["summary"]["storage_write"]["checkpoints_committed"].get<int64_t>(), 0);
  // In step order: a skip is decided before the checkpoint in flight
  // resolves, and was listed before it (2, 1, 4, 3, ...).
  int64_t previous_step = 0;
  for (const auto& c : skipped["checkpoints"]) {
    EXPECT_GT(c["step"].get<int64_t>(), previous_step) << skipped["checkpoints"].dump();
    previous_step = c["step"].get<int64_t>();
    // A skipped checkpoint copied and wrote nothing: no figures, not zeros.
    for (const char* key : {"snapshot_s", "persist_s", "write_gbs", "commit_s"}) {
      if (c["status"] == "skipped_busy")
        EXPECT_TRUE(c[key].is_null()) << key << " " << c.dump();
      else
        EXPECT_GT(c[key].get<double>(), 0.0) << key << " " << c.dump();
    }
  }
  EXPECT_EQ(skipped["checkpoints"].size(), 10u) << "one record per step due";

  const CommandResult wait = run_command(tiny_run(dir.file("w"), 10, 1, dir.file("w.json")));
  ASSERT_EQ(wait.exit_code, 0) << wait.err;
  const nlohmann::json waited = read_json(dir.file("w.json"));
  EXPECT_EQ(waited["summary"]["storage_write"]["checkpoints_committed"], 10);
  EXPECT_EQ(waited["summary"]["storage_write"]["checkpoints_skipped"], 0);
  double stall = 0;
  for (const auto& s : waited["steps"]) stall += s["ckpt_stall_s"].get<double>();
  EXPECT_GT(stall, 0.0) << "waiting for the previous checkpoint is checkpoint stall";

  const CommandResult sync = run_command(tiny_run(dir.file("y"), 6, 2, dir.file("y.json"),
                                                  "--set checkpoint.async=false"));
  ASSERT_EQ(sync.exit_code, 0) << sync.err;
  const nlohmann::json synchronous = read_json(dir.file("y.json"));
  ASSERT_FALSE(synchronous["checkpoints"].empty()) << "no checkpoint to judge";
  for (const auto& c : synchronous["checkpoints"]) {
    EXPECT_EQ(c["status"], "committed");
    // Synchronous: the stall is the whole checkpoint.
    EXPECT_GE(c["stall_s"].get<double>(), c["persist_s"].get<double>());
  }
}

// A checkpoint at the last step has its state copy waited for after the
// loop (finish), where no step waits: drain_s, not the record's stall_s,
// which had it, so that the records' stalls (stall_s_per_checkpoint) did not
// add up to the steps' (an 8M-parameter model: a copy of some 90 MB).
TEST(CheckpointCli, TheLastCheckpointsCopyAfterTheLoopIsNoStepsStall) {
  testing::TempDir dir("test_ckpt_cli");
  const CommandResult r = run_command(tiny_run(
      dir.file("ck"), 4, 2, dir.file("r.json"),
      "--set train.warmup_steps=1 --set train.threads=1 --set model.d_model=384 --set model.n_heads=6 "
      "--set model.n_kv_heads=6 --set model.ffn_hidden=1024 --set model.n_layers=4"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json result = read_json(dir.file("r.json"));
  double records = 0, steps = 0;
  for (const auto& c : result["checkpoints"]) records += c["stall_s"].get<double>();
  for (const auto& s : result["steps"]) steps += s["ckpt_stall_s"].get<double>();
  ASSERT_EQ(result["checkpoints"].size(), 2u);
  EXPECT_NEAR(records, steps, 0.05 * steps + 0.002) << "records " << records << " s, steps " << steps << " s";
}

// The result goes outside checkpoint.dir: written as its `latest` it broke
// the next --resume latest, as a step_N it was lost at the end (exit 3).
TEST(CheckpointCli, AResultInsideTheCheckpointFolderIsRefusedBeforeStepOne) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  for (const std::string& out : {ckpt + "/latest", ckpt + "/step_6", ckpt + "/sub/../r.json"}) {
    const CommandResult r = run_command(tiny_run(ckpt + "/", 6, 3, out, "--set train.warmup_steps=1"));
    EXPECT_EQ(r.exit_code, 2) << out << ": " << r.err;
    EXPECT_NE(r.err.find("--out " + out + ": inside checkpoint.dir " + ckpt + "/"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("\nstep "), std::string::npos) << "no step may run: " << r.out;
  }
  // A bare name from inside the folder (checkpoint.dir=.): it passed, and
  // the result replaced `latest`.
  std::filesystem::create_directories(ckpt);
  const CommandResult bare = run_command("cd " + ckpt + " && " + tiny_run(".", 6, 3, "latest",
                                                                          "--set train.warmup_steps=1"));
  EXPECT_EQ(bare.exit_code, 2) << bare.err;
  EXPECT_NE(bare.err.find("--out latest: inside checkpoint.dir ."), std::string::npos) << bare.err;
  EXPECT_FALSE(std::filesystem::exists(ckpt + "/latest"));
  // A folder beside it whose name begins the same is not inside.
  const CommandResult beside =
      run_command(tiny_run(ckpt, 6, 3, ckpt + "-results.json", "--set train.warmup_steps=1"));
  EXPECT_EQ(beside.exit_code, 0) << beside.err;
  EXPECT_EQ(testing::read_whole_file(ckpt + "/latest"), "step_6\n");
}

// Retention runs after the commit point: an old checkpoint that cannot be
// removed (here a mount point, EBUSY; chattr +i does the same) leaves the
// new one committed. It was recorded as failed, 0 bytes, and stopped the run.
TEST(CheckpointCli, AnOldCheckpointThatCannotBeRemovedIsAWarning) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  const std::string warmup = " --set train.warmup_steps=1";
  ASSERT_EQ(run_command(tiny_run(ckpt, 6, 3, dir.file("first.json"), "--set checkpoint.keep=0" + warmup)).exit_code,
            0);
  const testing::MountedFilesystem stuck(ckpt + "/step_3", "tmpfs", "size=1m");
  if (!stuck.mounted()) GTEST_SKIP() << stuck.why_not();
  const CommandResult r =
      run_command(tiny_run(ckpt, 12, 3, dir.file("r.json"), "--resume latest --set checkpoint.keep=1" + warmup));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json result = nlohmann::json::parse(testing::read_whole_file(dir.file("r.json")));
  ASSERT_EQ(result.at("checkpoints").size(), 2u) << result["checkpoints"].dump();
  for (const nlohmann::json& c : result["checkpoints"]) {
    EXPECT_EQ(c.at("status"), "committed") << c.dump();
    EXPECT_GT(c.at("bytes").get<int64_t>(), 0) << c.dump();
  }
  int said = 0;
  for (const nlohmann::json& w : result.at("warnings"))
    said += w.get<std::string>().find("checkpoint step 9 is committed, but removing an old one failed") !=
            std::string::npos;
  EXPECT_EQ(said, 1) << result["warnings"].dump() << " (once, though step 12's retention failed again)";
  EXPECT_EQ(testing::read_whole_file(ckpt + "/latest"), "step_12\n");
}

// A disk already full when the run starts is the environment's (exit 3),
// refused before training: for the user's checkpoint.dir, and for the
// default run's own folder in TMPDIR, named as TMPDIR (the user never named
// the folder; it used to say "checkpoint.dir ... is not writable", exit 2).
TEST(CheckpointCli, ADiskFullAtStartIsTheEnvironments) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string full = dir.file("full");
  const testing::MountedFilesystem disk(full, "tmpfs", "size=1m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  run_command("dd if=/dev/zero of=" + full + "/filler bs=64k 2>/dev/null");
  ASSERT_EQ(fs::space(full).available, 0u) << "the tmpfs is not full";

  const CommandResult named = run_command(tiny_run(full + "/ckpt", 8, 2, dir.file("a.json")));
  EXPECT_EQ(named.exit_code, 3) << named.err;
  EXPECT_NE(named.err.find("checkpoint.dir " + full + "/ckpt is not writable"), std::string::npos) << named.err;
  EXPECT_NE(named.err.find("No space left on device"), std::string::npos) << named.err;
  EXPECT_EQ(named.err.find('\n'), named.err.size() - 1) << "one line: " << named.err;
  // The folder the run made for it goes again, though the run failed before
  // taking its lock (it stayed once the clean-up waited for the lock).
  EXPECT_FALSE(fs::exists(full + "/ckpt")) << "left behind";

  const CommandResult temporary =
      run_command("TMPDIR=" + full + " " + TRAINBENCH_BINARY +
                  " run tiny --steps 8 --set data.source=synthetic --set checkpoint.every_steps=2 --out " +
                  dir.file("b.json"));
  EXPECT_EQ(temporary.exit_code, 3) << temporary.err;
  EXPECT_EQ(temporary.err.find("checkpoint.dir"), temporary.err.find("or checkpoint.dir") + 3)
      << "checkpoint.dir only as the remedy: " << temporary.err;
  EXPECT_NE(temporary.err.find("the temporary directory (TMPDIR=" + full + "): the run's checkpoint folder "),
            std::string::npos)
      << temporary.err;
  EXPECT_NE(temporary.err.find("No space left on device"), std::string::npos) << temporary.err;
  EXPECT_NE(temporary.err.find("set TMPDIR to a folder with room"), std::string::npos) << temporary.err;
  EXPECT_EQ(temporary.err.find('\n'), temporary.err.size() - 1) << "one line: " << temporary.err;
  for (const fs::directory_entry& entry : fs::directory_iterator(full))
    EXPECT_NE(entry.path().filename().string().rfind("trainbench-ckpt-", 0), 0u) << "left behind: " << entry.path();
  EXPECT_FALSE(fs::exists(dir.file("a.json")));
  EXPECT_FALSE(fs::exists(dir.file("b.json")));

  // The result's own disk full: refused before training, not at the end.
  const CommandResult out = run_command(std::string(TRAINBENCH_BINARY) +
                                        " run tiny --steps 8 --set checkpoint.every_steps=0 --out " + full + "/r.json");
  EXPECT_EQ(out.exit_code, 3) << out.err;
  EXPECT_NE(out.err.find("--out " + full + "/r.json: its disk has 0.00 B free"), std::string::npos) << out.err;
  EXPECT_EQ(out.out.find("\nstep "), std::string::npos) << "no step may run: " << out.out;
}

// checkpoint.dir removed while the run goes on (a cleanup job, a user): the
// next checkpoint was written into a folder made again, without the run's
// lock, as if nothing had happened. Now that checkpoint fails, saying so
// (exit 3), the run's result is written, and nothing is made again.
TEST(CheckpointCli, ACheckpointDirRemovedDuringTheRunIsSaidNotMadeAgain) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  // 300 ms a step: the folder goes once step_3 is committed (during step 4),
  // at least a step before step 6's checkpoint starts.
  const std::string run = tiny_run(ckpt, 10, 3, dir.file("r.json"), "--set burnin.inject_slow_ms=300");
  const CommandResult r = run_command("bash -c '" + run + " & pid=$!; for i in $(seq 3000); do [ -e " + ckpt +
                                      "/latest ] && break; sleep 0.01; done; rm -rf " + ckpt + "; wait $pid'");
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("trainbench: checkpoint of step 6 failed on rank(s) 0: checkpoint.dir " + ckpt +
                       " no longer exists (removed during the run?)\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_FALSE(fs::exists(ckpt)) << "made again";
  const nlohmann::json result = read_json(dir.file("r.json"));
  EXPECT_EQ(result["steps"].size(), 6u);
  ASSERT_EQ(result["checkpoints"].size(), 2u) << result["checkpoints"].dump();
  EXPECT_EQ(result["checkpoints"][0]["status"], "committed");
  EXPECT_EQ(result["checkpoints"][1]["status"], "failed");
}

// Removed and made again at the same path: not the folder the run locked.
TEST(CheckpointCli, ACheckpointDirMadeAgainDuringTheRunIsNotTheRunsFolder) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  const std::string run = tiny_run(ckpt, 10, 3, dir.file("r.json"), "--set burnin.inject_slow_ms=300");
  const CommandResult r = run_command("bash -c '" + run + " & pid=$!; for i in $(seq 3000); do [ -e " + ckpt +
                                      "/latest ] && break; sleep 0.01; done; rm -rf " + ckpt + "; mkdir " + ckpt +
                                      "; wait $pid'");
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("trainbench: checkpoint of step 6 failed on rank(s) 0: checkpoint.dir " + ckpt +
                       " is another folder than the one this run started with (removed and made again during the "
                       "run?)\n"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::is_empty(ckpt)) << "nothing written into it";
}

// A tmpfs just big enough for one checkpoint of `tiny`.
TEST(CheckpointCli, FullDiskStopsOrSkipsAndKeepsThePreviousCheckpoint) {
  testing::TempDir dir("test_ckpt_cli");
  // tiny's checkpoint is ~4 MB (164k parameters x 12 bytes, and the
  // loaders' shuffle buffers in the data position): one fits in 6 MiB, a
  // second does not.
  for (const std::string on_full : {"fail", "skip"}) {
    SCOPED_TRACE(on_full);
    const std::string ckpt = dir.file("disk-" + on_full);
    const testing::MountedFilesystem disk(ckpt, "tmpfs", "size=6m");
    if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
    const CommandResult r = run_command(tiny_run(ckpt, 12, 4, dir.file(on_full + ".json"),
                                                 "--set checkpoint.keep=0 --set checkpoint.on_full=" + on_full));
    EXPECT_EQ(latest_of(ckpt), "step_4");
    // The checkpoint given up leaves no half-written folder taking the space.
    for (const fs::directory_entry& entry : fs::directory_iterator(ckpt))
      EXPECT_FALSE(entry.path().filename().string().ends_with(".tmp")) << entry.path();
    if (on_full == "fail") {
      EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
      EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("the previous committed checkpoint (step_4) is intact"), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
      // The steps trained before it are measured and written (the result
      // was lost with the exception): up to the step whose agreement round
      // learnt of the failure, the failed checkpoint's record, a failed check.
      const nlohmann::json result = read_json(dir.file(on_full + ".json"));
      ASSERT_TRUE(result.contains("steps")) << result.dump();
      const size_t trained = result["steps"].size();
      EXPECT_GE(trained, 8u);
      EXPECT_LT(trained, 12u) << "the run stops at the failure";
      EXPECT_EQ(result["steps"].back()["step"].get<size_t>(), trained);
      int failed_records = 0;
      for (const auto& c : result["checkpoints"]) {
        if (c["status"] != "failed") continue;
        ++failed_records;
        EXPECT_EQ(c["step"], 8) << c.dump();
      }
      EXPECT_EQ(failed_records, 1) << result["checkpoints"].dump();
      EXPECT_EQ(result["summary"]["storage_write"]["checkpoints_committed"], 1);
      EXPECT_EQ(result["summary"]["storage_write"]["checkpoints_failed"], 1);
      EXPECT_EQ(result["summary"]["storage_write"]["checkpoints_skipped"], 0);
      std::string check;
      for (const auto& c : result["checks"])
        if (c["name"] == "checkpoints_written" && c["passed"] == false) check = c["detail"];
      EXPECT_EQ("trainbench: " + check + "\n", r.err) << "the check says what stderr says";
      EXPECT_NE(r.out.find("1 committed, 0 skipped, 1 failed"), std::string::npos) << r.out;
    } else {
      EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
      const nlohmann::json result = read_json(dir.file(on_full + ".json"));
      EXPECT_GE(result["summary"]["storage_write"]["checkpoints_skipped"].get<int64_t>(), 1);
      EXPECT_EQ(result["steps"].size(), 12u) << "training went on";
      EXPECT_NE(result["warnings"].dump().find("disk full"), std::string::npos);
    }
    // The committed checkpoint is intact: a resume from it verifies and trains.
    const CommandResult resumed = run_command(
        tiny_run(ckpt, 6, 4, dir.file(on_full + "-resumed.json"),
                 "--resume latest --set checkpoint.every_steps=0 --set train.warmup_steps=1"));
    EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  }
}

// The last step's checkpoint fails while the run drains it, after the loop:
// the result of every step is written all the same, and the exit is 3.
TEST(CheckpointCli, ACheckpointFailingAsTheRunDrainsStillLeavesTheResult) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("disk");
  const testing::MountedFilesystem disk(ckpt, "tmpfs", "size=6m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  const CommandResult r = run_command(tiny_run(ckpt, 8, 4, dir.file("r.json"), "--set checkpoint.keep=0"));
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("trainbench: checkpoint of step 8 failed on rank(s) 0: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  const nlohmann::json result = read_json(dir.file("r.json"));
  EXPECT_EQ(result["steps"].size(), 8u);
  ASSERT_EQ(result["checkpoints"].size(), 2u) << result["checkpoints"].dump();
  EXPECT_EQ(result["checkpoints"][1]["step"], 8);
  EXPECT_EQ(result["checkpoints"][1]["status"], "failed");
  EXPECT_EQ(latest_of(ckpt), "step_4");
}

// `command` on storage that stops responding: with the test's syscalls
// preloaded (tests/support/failing_syscalls.cpp), every fsync (`call`
// "FSYNC"), mkdir ("MKDIR"), flock ("FLOCK") or pread ("PREAD") of a path
// containing `part` never returns.
// Under `timeout` (`limit`): a run that hangs for good is killed, exit 137.
std::string on_hung_storage(const std::string& call, const std::string& part, const std::string& command,
                            const std::string& limit = "-s KILL 120") {
  return std::string("env LD_PRELOAD=") + FAILING_SYSCALLS_PRELOAD + " TRAINBENCH_TEST_HANG_" + call + "=" + part +
         " timeout " + limit + " " + command;
}

// Storage that stops responding in the middle of a checkpoint: every fsync
// under step_4.tmp never returns (on_hung_storage). The run
// waited for that writer forever (a single rank has no peer whose
// collective timeout would end it); now the checkpoint fails once
// checkpoint.timeout_s has passed, exit 3 with one line naming the folder
// and the key, the result is written, and the process exits with the
// writer still stuck.
TEST(CheckpointCli, AWriteThatNeverReturnsFailsTheCheckpointAtItsTimeout) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("c");
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r =
      run_command(on_hung_storage("FSYNC", "step_4.tmp",
                                  tiny_run(ckpt, 8, 2, dir.file("r.json"), "--set checkpoint.timeout_s=6")));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ASSERT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(seconds, 60.0) << "the timeout is 6 s";
  EXPECT_EQ(r.err.rfind("trainbench: checkpoint of step 4 failed on rank(s) 0: writing this rank's files into " +
                            ckpt + "/step_4.tmp did not finish within checkpoint.timeout_s=6 s: the storage stopped "
                                   "responding",
                        0),
            0u)
      << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  const nlohmann::json result = read_json(dir.file("r.json"));
  EXPECT_GE(result["steps"].size(), 5u) << "step 4's copy was handed to the writer in step 5";
  EXPECT_LT(result["steps"].size(), 8u) << "stopped at the failure";
  ASSERT_EQ(result["checkpoints"].size(), 2u) << result["checkpoints"].dump();
  EXPECT_EQ(result["checkpoints"][0]["status"], "committed");
  EXPECT_EQ(result["checkpoints"][1]["step"], 4);
  EXPECT_EQ(result["checkpoints"][1]["status"], "failed");
  EXPECT_GT(result["checkpoints"][1]["stall_s"].get<double>(), 1.0) << "the loop's wait for it is its stall";
  EXPECT_EQ(result["summary"]["storage_write"]["checkpoints_failed"], 1);
  EXPECT_EQ(latest_of(ckpt), "step_2");
  // Left to the writer that may still be in it (removing it could hang as it did).
  EXPECT_TRUE(fs::exists(ckpt + "/step_4.tmp"));
}

// Storage that stops responding under the result itself: every fsync of
// r.json's temporary never returns. The finished run waited there for ever
// (one rank: no peer's timeout ends it); now the write is left behind after
// checkpoint.timeout_s, the summary
// names the result NOT WRITTEN and says why, exit 3 with that one line.
// (One rank: no peer waits for it, so no quarter of comm.timeout_s.)
TEST(CheckpointCli, AResultWriteThatNeverReturnsIsLeftBehindAtItsBound) {
  testing::TempDir dir("test_ckpt_cli");
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command(
      on_hung_storage("FSYNC", "r.json",
                      tiny_run(dir.file("c"), 7, 0, dir.file("r.json"), "--set checkpoint.timeout_s=3"),
                      "-s KILL 60"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ASSERT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(seconds, 40.0) << "the bound is 3 s";
  const std::string why = "cannot write the result: writing " + dir.file("r.json") +
                          " did not finish within 3 s (checkpoint.timeout_s): the storage is not responding";
  EXPECT_NE(r.out.find("NOT WRITTEN: " + why), std::string::npos) << r.out;
  EXPECT_EQ(r.err.rfind("trainbench: " + why, 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_FALSE(fs::exists(dir.file("r.json")));
}

// The same under a bench's --out (bench comm, bench io, project): the
// bench finished and hung in its result's fsync for ever; now exit 3 after
// checkpoint.timeout_s with one line.
TEST(CheckpointCli, ABenchResultWriteThatNeverReturnsEndsItAtTheStorageTimeout) {
  testing::TempDir dir("test_ckpt_cli");
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command(on_hung_storage(
      "FSYNC", "comm.json",
      std::string(TRAINBENCH_BINARY) + " bench comm --max-bytes 16K --iters 1 --set checkpoint.timeout_s=3 --out " +
          dir.file("comm.json"),
      "-s KILL 60"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ASSERT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(seconds, 40.0) << "the bound is 3 s";
  EXPECT_EQ(r.err, "trainbench: writing " + dir.file("comm.json") +
                       " did not finish within 3 s (checkpoint.timeout_s): the storage is not responding (the "
                       "write is left behind)\n");
}

// The same storage before step 1: the probe that --out can be written
// (a file of its own, made and unlinked) never returns from its unlink. It
// held the run there for ever; now the job ends after checkpoint.timeout_s,
// exit 3, one line naming what it was doing.
TEST(CheckpointCli, AResultProbeThatNeverReturnsEndsTheJobAtTheStorageTimeout) {
  testing::TempDir dir("test_ckpt_cli");
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command(
      on_hung_storage("UNLINK", "r.json.tmp",
                      tiny_run(dir.file("c"), 7, 0, dir.file("r.json"), "--set checkpoint.timeout_s=3"),
                      "-s KILL 60"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ASSERT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(seconds, 40.0) << "the bound is 3 s";
  EXPECT_EQ(r.err.rfind("trainbench: checking that --out " + dir.file("r.json") +
                            " can be written did not finish within checkpoint.timeout_s=3 s: the storage stopped "
                            "responding",
                        0),
            0u)
      << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "no step trained: " << r.out;
}

// Storage that stops responding under data.shards: the folder's listing
// (opendir) never returns. It held the run before step 1 for ever; now the
// job ends after data.timeout_s, exit 3, one line naming the listing.
TEST(CheckpointCli, AShardListingThatNeverReturnsEndsTheJobAtTheDataTimeout) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string shards = dir.file("shards");
  const CommandResult made = run_command(std::string(TRAINBENCH_BINARY) + " shards synth --out " + shards +
                                         " --count 2 --samples 50");
  ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command(on_hung_storage(
      "OPENDIR", shards,
      tiny_run(dir.file("c"), 7, 0, dir.file("r.json"), "--set data.shards=" + shards + " --set data.timeout_s=3"),
      "-s KILL 60"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ASSERT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(seconds, 40.0) << "the bound is 3 s";
  EXPECT_EQ(r.err.rfind("trainbench: listing data.shards " + shards +
                            " did not finish within data.timeout_s=3 s: the storage stopped responding (raise "
                            "data.timeout_s if it is only slow)",
                        0),
            0u)
      << r.err;
}

// The same hung storage under a checkpoint the run gives up (lr 1e38:
// step 1's update overflows, step 2's loss is NaN, so step 1's checkpoint
// holds weights no one may resume from). Giving it up waited for its
// writer forever; now for checkpoint.timeout_s, and the folder the writer
// may still be in is left and named.
TEST(CheckpointCli, AGivenUpCheckpointWhoseWriteNeverReturnsEndsTheRunAtItsTimeout) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("c");
  const CommandResult r = run_command(on_hung_storage(
      "FSYNC", "step_1.tmp",
      tiny_run(ckpt, 10, 1, dir.file("r.json"), kFew + "--set train.lr=1e38 --set checkpoint.timeout_s=6")));
  ASSERT_EQ(r.exit_code, 4) << r.out << r.err;
  const nlohmann::json result = read_json(dir.file("r.json"));
  ASSERT_EQ(result.at("checkpoints").size(), 1u) << result["checkpoints"].dump();
  EXPECT_EQ(result["checkpoints"][0]["status"], "skipped_diverged");
  EXPECT_NE(result["warnings"].dump().find("still being written after checkpoint.timeout_s (the storage stopped "
                                           "responding): " + ckpt + "/step_1.tmp is left"),
            std::string::npos)
      << result["warnings"].dump();
  EXPECT_TRUE(fs::exists(ckpt + "/step_1.tmp"));
  EXPECT_FALSE(fs::exists(ckpt + "/latest"));
}

// A mkdir that never returns: rank 0 makes step_N.tmp on its writer thread,
// waited for as a write is. It was made on the loop's thread, where a hung
// mkdir stopped the run for good.
TEST(CheckpointCli, AFolderThatCannotBeMadeOnHungStorageFailsTheCheckpointAtItsTimeout) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("c");
  const CommandResult r = run_command(
      on_hung_storage("MKDIR", "step_4.tmp", tiny_run(ckpt, 8, 2, dir.file("r.json"), "--set checkpoint.timeout_s=6")));
  ASSERT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("trainbench: checkpoint of step 4 failed on rank(s) 0: making " + ckpt +
                            "/step_4.tmp did not finish within checkpoint.timeout_s=6 s: the storage stopped responding",
                        0),
            0u)
      << r.err;
  const nlohmann::json result = read_json(dir.file("r.json"));
  ASSERT_EQ(result["checkpoints"].size(), 2u) << result["checkpoints"].dump();
  EXPECT_EQ(result["checkpoints"][1]["step"], 4);
  EXPECT_EQ(result["checkpoints"][1]["status"], "failed");
  EXPECT_EQ(latest_of(ckpt), "step_2");
}

// SIGTERM (scancel, mpirun ending a job) while rank 0's writer is stuck
// making step_N.tmp, holding the lock of the folders a signal removes: the
// signal's cleanup waited for that lock for ever, so the signal never ended
// the process. Now it waits 10 s at most, says so, and the signal ends it.
TEST(CheckpointCli, ASignalEndsARunWhoseCheckpointFolderHangsBeingMade) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("c");
  // TERM a second after step 2's checkpoint is committed (step 4's mkdir,
  // which hangs for good, comes a few milliseconds later); KILL should the
  // process outlive 20 s more. `wait` gives 143 for the TERM's doing, 137
  // for the KILL's: 143 is "ended within 20 s of the signal", timed from the
  // signal (the whole command's time included a loaded machine's start-up).
  const std::string script =
      std::string("{ env LD_PRELOAD=") + FAILING_SYSCALLS_PRELOAD + " TRAINBENCH_TEST_HANG_MKDIR=step_4.tmp " +
      tiny_run(ckpt, 8, 2, dir.file("r.json"), "--set checkpoint.timeout_s=600 --set data.source=synthetic") +
      " & pid=$!; i=0; while [ ! -e " + ckpt + "/latest ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done;"
      " sleep 1; kill -TERM $pid; i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1;"
      " i=$((i+1)); done; kill -KILL $pid 2>/dev/null; wait $pid; }";
  const CommandResult r = run_command(script);
  EXPECT_EQ(r.exit_code, 128 + 15) << "at most 10 s of cleanup after the signal\n" << r.out << r.err;
  EXPECT_NE(r.err.find("trainbench: removing the temporary folders did not finish within 10 s"), std::string::npos)
      << r.err;
  EXPECT_EQ(latest_of(ckpt), "step_2");
}

// The storage calls the run makes on its main thread before step 1 and in
// a resume: on storage that stopped responding the folder's writability
// probe (its fsync), rank 0's flock on the folder's lock, or the reads of
// the checkpoint to resume from never return. A single rank hung there for
// ever, with nothing said (killed by `timeout`, 137); now the job ends at
// checkpoint.timeout_s, exit 3, with one line saying what it was doing.
// Nothing trained, so there is no result to write.
void expect_ended_at_the_timeout(const CommandResult& r, double seconds, const std::string& doing,
                                 const std::string& result, int timeout_s = 2) {
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(seconds, 30.0) << "the timeout is " << timeout_s << " s";
  EXPECT_EQ(r.err, "trainbench: " + doing + " did not finish within checkpoint.timeout_s=" + std::to_string(timeout_s) +
                       " s: the storage stopped responding (raise checkpoint.timeout_s if it is only slow)\n");
  EXPECT_EQ(r.out.find("\nstep "), std::string::npos) << "no step may run: " << r.out;
  EXPECT_FALSE(fs::exists(result));
}

TEST(CheckpointCli, ACheckpointFolderWhoseProbeOrLockNeverReturnsEndsTheRunAtItsTimeout) {
  struct Case {
    const char* call;
    const char* part;
    bool default_folder;  // checkpoint.dir unset: the run's own in TMPDIR
    const char* extra;
  };
  // The probe's fsync, rank 0's flock, the default folder's probe in TMPDIR,
  // and --ceilings' write measurement in the folder (after the compute,
  // network and read ones).
  for (const Case& c : {Case{"FSYNC", ".trainbench-write-probe-", false, ""},
                        Case{"FLOCK", ".trainbench-lock", false, ""},
                        Case{"FSYNC", "trainbench-ckpt", true, ""},
                        Case{"FSYNC", ".ceiling-write", false, "--ceilings "}}) {
    SCOPED_TRACE(std::string(c.call) + " " + c.part);
    testing::TempDir dir("test_ckpt_cli");
    const std::string ckpt = dir.file("c");
    const std::string tmpdir = dir.file("tmp");
    fs::create_directory(tmpdir);
    std::string command = tiny_run(ckpt, 4, 2, dir.file("r.json"), kFew + c.extra + "--set checkpoint.timeout_s=2");
    if (c.default_folder) command = "env TMPDIR=" + tmpdir + " " + command + " --set checkpoint.dir=";
    const std::string doing =
        c.default_folder ? "making the run's checkpoint folder in the temporary directory (TMPDIR=" + tmpdir +
                               ") and checking that it is writable"
        : *c.extra != '\0' ? "measuring the write rate in checkpoint.dir " + ckpt
                           : "checking that checkpoint.dir " + ckpt + " is writable and taking its lock";
    const auto begin = std::chrono::steady_clock::now();
    const CommandResult r = run_command(on_hung_storage(c.call, c.part, command));
    expect_ended_at_the_timeout(r, std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(),
                                doing, dir.file("r.json"));
  }
}

// A checkpoint fails on a full disk (the storage answered), then the
// storage stops responding as rank 0 removes step_8.tmp. That removal and
// the listing for the message are best effort: the removal is let go after
// a quarter of comm.timeout_s (1 s here), the listing is skipped, and the
// run still writes its result and exits 3 naming the failure.
TEST(CheckpointCli, AFailedCheckpointsRemovalThatNeverReturnsIsLetGoAndTheResultWritten) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("disk");
  const testing::MountedFilesystem disk(ckpt, "tmpfs", "size=6m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command(on_hung_storage(
      "REMOVE", "step_8.tmp", tiny_run(ckpt, 8, 4, dir.file("r.json"), "--set checkpoint.keep=0 --set comm.timeout_s=4")));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_LT(seconds, 60.0);
  EXPECT_EQ(r.err.rfind("trainbench: checkpoint of step 8 failed on rank(s) 0: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find("previous committed checkpoint"), std::string::npos) << "the listing was skipped: " << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  const nlohmann::json result = read_json(dir.file("r.json"));
  EXPECT_EQ(result["steps"].size(), 8u);
  ASSERT_EQ(result["checkpoints"].size(), 2u) << result["checkpoints"].dump();
  EXPECT_EQ(result["checkpoints"][1]["status"], "failed");
  EXPECT_EQ(latest_of(ckpt), "step_4");
}

TEST(CheckpointCli, AResumeWhoseReadsNeverReturnEndsTheRunAtItsTimeout) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("c");
  ASSERT_EQ(run_command(tiny_run(ckpt, 4, 2, dir.file("first.json"), kFew)).exit_code, 0);
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command(on_hung_storage(
      "PREAD", "step_4", tiny_run(ckpt, 8, 2, dir.file("r.json"), kFew + "--resume latest --set checkpoint.timeout_s=4")));
  expect_ended_at_the_timeout(r, std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(),
                              "reading the checkpoint to resume from (--resume latest)", dir.file("r.json"), 4);
  EXPECT_EQ(latest_of(ckpt), "step_4") << "nothing written over it";
}

// Burn-in's storage measurement waits for the checkpoint in flight first; a
// checkpoint that failed there (here its write hangs past checkpoint.timeout_s,
// the measurement due every second, and the loop itself never waits:
// when_busy skip) left the command at exit 3 with a bare message and no
// result. It is the verdict's FAIL, as in the loop. (The storage rates are
// fixed by the test hook: a loaded machine's "write fell" would add a node
// row's FAIL before the job's.)
TEST(CheckpointCli, BurninNamesACheckpointThatFailedWhileItsStorageMeasurementWaited) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("c");
  const CommandResult r = run_command(
      on_hung_storage("FSYNC", "step_10.tmp",
                      "env TRAINBENCH_TEST_HEALTH_GBS=5 " + std::string(TRAINBENCH_BINARY) +
                          " burnin tiny --duration 30s --set data.source=synthetic" +
                          " --set checkpoint.dir=" + ckpt +
                          " --set checkpoint.every_steps=10 --set checkpoint.when_busy=skip"
                          " --set checkpoint.timeout_s=4 --set burnin.health_every_s=1 --out " + dir.file("b.json")));
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("trainbench: burn-in: job: FAIL: checkpoints_written: checkpoint of step 10 failed on "
                        "rank(s) 0: writing this rank's files into " + ckpt + "/step_10.tmp did not finish",
                        0),
            0u)
      << r.err;
  const nlohmann::json result = read_json(dir.file("b.json"));
  EXPECT_EQ(result["summary"]["storage_write"]["checkpoints_failed"], 1);
  EXPECT_NE(result["checks"].dump().find("checkpoint of step 10 failed"), std::string::npos) << result["checks"].dump();
}

// `project` trains fresh runs at two depths: with a checkpoint.dir, each
// checkpoints into its own folder under it (the second depth was refused,
// exit 2, finding the first one's checkpoints); a failed checkpoint is one
// line, the project's.
TEST(CheckpointCli, ProjectGivesEachRunItsOwnFolderAndNamesAFailedCheckpointOnce) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string project = std::string(TRAINBENCH_BINARY) +
                              " project tiny --steps 12 --set report.progress_every=0 --set checkpoint.every_steps=5";
  // Twice into one checkpoint.dir: each project in a folder of its own.
  for (const char* out : {"p.json", "p2.json"}) {
    const CommandResult r = run_command(project + " --set checkpoint.dir=" + dir.file("d") + " --out " + dir.file(out));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::vector<std::string> projects;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir.file("d")))
    projects.push_back(entry.path().string());
  ASSERT_EQ(projects.size(), 2u);
  for (const std::string& folder : projects) {
    EXPECT_EQ(fs::path(folder).filename().string().rfind("project-", 0), 0u) << folder;
    EXPECT_EQ(latest_of(folder + "/layers-2-round-1"), "step_10");
    EXPECT_EQ(latest_of(folder + "/layers-4-round-1"), "step_10");
  }

  const std::string full = dir.file("full");
  const testing::MountedFilesystem disk(full, "tmpfs", "size=6m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  const CommandResult failed = run_command(project + " --set checkpoint.dir=" + full + " --out " + dir.file("q.json"));
  EXPECT_EQ(failed.exit_code, 3) << failed.err;
  EXPECT_EQ(failed.err.rfind("trainbench: project: the 2-layer run stopped: checkpoint of step 10 failed on rank(s) 0: ", 0),
            0u)
      << failed.err;
  EXPECT_EQ(failed.err.find('\n'), failed.err.size() - 1) << "one line: " << failed.err;
  // Its summary does not point at a projection result that is never written.
  EXPECT_NE(failed.out.find("result              none: this run failed, so the projection stops here"),
            std::string::npos)
      << failed.out;
  EXPECT_FALSE(fs::exists(dir.file("q.json")));
}

// Under burn-in a failed checkpoint is a FAIL of the verdict (exit 4, as
// every burn-in that does not pass), its one line the verdict's; the run's
// step count includes the step it ended.
TEST(CheckpointCli, BurninNamesAFailedCheckpointInItsVerdict) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string full = dir.file("full");
  const testing::MountedFilesystem disk(full, "tmpfs", "size=6m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " burnin tiny --duration 20s --set checkpoint.dir=" +
                                      full + " --set checkpoint.every_steps=10 --out " + dir.file("b.json"));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_EQ(r.err.rfind("trainbench: burn-in: job: FAIL: checkpoints_written: checkpoint of step 20 failed", 0), 0u)
      << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  const nlohmann::json result = read_json(dir.file("b.json"));
  EXPECT_EQ(result["burnin"]["steps"], result["steps"].size());
  // The config says the steps it trained, not the 2^40 it ran under to reach its duration.
  EXPECT_EQ(result["config"]["train"]["steps"], result["burnin"]["steps"]);
  EXPECT_GT(result["steps"].back()["step"].get<int64_t>(), 20) << "up to the step that learnt of it";
  EXPECT_LT(result["steps"].back()["step"].get<int64_t>(), 30) << "and no further";
}

// Burn-in's storage check (and run --ceilings' write ceiling) writes a
// checkpoint-sized file set too: a failure there ended the job from that
// rank alone (exit 3, a bare message, no result). It is agreed on: a FAIL of
// the verdict, or, a full disk under on_full=skip, a measurement skipped.
TEST(CheckpointCli, AFailedStorageCheckIsAFindingNotACrash) {
  testing::TempDir dir("test_ckpt_cli");
  // 500 blocks of 512 bytes: a file-size limit below tiny's checkpoint files.
  const std::string limited = "bash -c 'ulimit -f 500; exec " + std::string(TRAINBENCH_BINARY) + " ";
  const CommandResult failed = run_command(limited + "burnin tiny --duration 3s --set checkpoint.dir=" + dir.file("a") +
                                           " --out " + dir.file("a.json") + "'");
  EXPECT_EQ(failed.exit_code, 4) << failed.err;
  EXPECT_NE(failed.err.find("trainbench: burn-in: job: FAIL: storage: the checkpoint write check failed (measurement "
                            "at 0 s): cannot write checkpoint file "),
            std::string::npos)
      << failed.err;
  const nlohmann::json result = read_json(dir.file("a.json"));
  EXPECT_NE(result["burnin"]["health_measurements"][0]["write_failure"].get<std::string>().find("File too large"),
            std::string::npos);

  // One warm-up step: a loaded machine (ctest -j) got no step past tiny's 5 in
  // 3 s. A 90% drift threshold: its tokens/s swung 15% over 3 s (CI), and
  // drift is not what this checks.
  const CommandResult skipped = run_command(limited + "burnin tiny --duration 3s --set checkpoint.on_full=skip"
                                                      " --set train.warmup_steps=1 --set burnin.degrade_pct=90"
                                                      " --set checkpoint.dir=" + dir.file("b") + " --out " +
                                            dir.file("b.json") + "'");
  EXPECT_EQ(skipped.exit_code, 0) << skipped.err;
  EXPECT_NE(skipped.out.find("storage: the write check was skipped, disk full (measurement at 0 s)"), std::string::npos)
      << skipped.out;

  const CommandResult ceilings = run_command(limited + "run tiny --ceilings --steps 12 --set checkpoint.on_full=skip"
                                                       " --set report.progress_every=0 --set checkpoint.dir=" +
                                             dir.file("c") + " --out " + dir.file("c.json") + "'");
  EXPECT_EQ(ceilings.exit_code, 0) << ceilings.err;
  EXPECT_NE(read_json(dir.file("c.json"))["warnings"].dump().find("ceilings: storage write not measured: cannot write"),
            std::string::npos);
}

// ramfs refuses O_DIRECT (EINVAL), as some network filesystems do: the run
// writes through the page cache and says once that its write figures are
// buffered writes (it said nothing; bench io --write did).
TEST(CheckpointCli, DirectIoRefusedByTheFilesystemIsToldOnce) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ramfs");
  const testing::MountedFilesystem disk(ckpt, "ramfs", "");
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  const CommandResult r = run_command(tiny_run(ckpt + "/c", 10, 5, dir.file("r.json"), "--set checkpoint.direct_io=true"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  int told = 0;
  for (const auto& w : result["warnings"])
    told += w.get<std::string>().rfind("checkpoint.direct_io=true was refused on rank(s) 0 (checkpoint file " +
                                       ckpt + "/c/step_5.tmp/", 0) == 0;
  EXPECT_EQ(told, 1) << "once, though both checkpoints fell back: " << result["warnings"].dump();
  EXPECT_NE(r.out.find("the checkpoint write figures are buffered writes"), std::string::npos) << r.out;
}

// `--resume "$CKPT"` with the variable unset started a fresh run without a
// word; `--resume DIR/latest` said only "is not a folder".
TEST(CheckpointCli, ResumeArgumentsThatCannotBeMeantAreRefusedSayingWhatToGive) {
  testing::TempDir dir("test_ckpt_cli");
  const CommandResult first = run_command(tiny_run(dir.file("c"), 6, 3, dir.file("a.json")));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const CommandResult empty = run_command(tiny_run(dir.file("c2"), 6, 3, dir.file("b.json"), "--resume ''"));
  EXPECT_EQ(empty.exit_code, 2) << empty.out;
  EXPECT_EQ(empty.err, "trainbench: --resume: an empty path: give latest or a checkpoint folder (see trainbench --help)\n");
  EXPECT_FALSE(fs::exists(dir.file("b.json")));
  const CommandResult latest_file =
      run_command(tiny_run(dir.file("c3"), 6, 3, dir.file("c.json"), "--resume " + dir.file("c/latest")));
  EXPECT_EQ(latest_file.exit_code, 2) << latest_file.err;
  EXPECT_NE(latest_file.err.find("is the file naming the newest checkpoint: give its folder, --resume " + dir.file("c")),
            std::string::npos)
      << latest_file.err;
}

// `run tiny` without checkpoint.dir (checkpoints every 5 steps into a
// temporary folder) with TMPDIR=`tmpdir`.
CommandResult run_with_temporary_checkpoints(const std::string& tmpdir, const std::string& out,
                                             const std::string& extra = "") {
  return run_command("env TMPDIR=" + tmpdir + " " + TRAINBENCH_BINARY + " run tiny --steps 10" + extra +
                     " --set checkpoint.every_steps=5 --set report.progress_every=0 --out " + out);
}

// Without checkpoint.dir, checkpoints go to a temporary folder; where two
// do not fit there the run trains without them and says so, on the console
// and, since its config still says every_steps, in the result's warnings.
TEST(CheckpointCli, CheckpointsTurnedOffForWantOfRoomAreAWarningInTheResult) {
  testing::TempDir dir("test_ckpt_cli");
  const testing::MountedFilesystem small(dir.file("tmp"), "tmpfs", "size=3m");
  if (!small.mounted()) GTEST_SKIP() << small.why_not();
  const CommandResult r =
      run_with_temporary_checkpoints(dir.file("tmp"), dir.file("r.json"), " --set data.source=synthetic");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("checkpoint: off: checkpoint.dir is not set and 2 checkpoint(s) of up to"), std::string::npos) << r.out;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  ASSERT_FALSE(result["warnings"].empty());
  EXPECT_EQ(result["warnings"][0].get<std::string>().rfind("checkpoint: off: checkpoint.dir is not set", 0), 0u)
      << result["warnings"].dump();
  EXPECT_TRUE(result["checkpoints"].empty());
}

// A temporary folder on a filesystem without flock: its "not locked against a
// second run" warning belongs to a folder the run writes. Where the
// checkpoints did not fit and the folder was dropped, the warning stayed in
// the result beside "checkpoint: off", about a folder that no longer existed.
TEST(CheckpointCli, ADroppedTemporaryFolderLeavesNoWarningAboutItsLock) {
  testing::TempDir dir("test_ckpt_cli");
  const testing::MountedFilesystem small(dir.file("tmp"), "tmpfs", "size=3m");
  if (!small.mounted()) GTEST_SKIP() << small.why_not();
  const std::string no_flock =
      std::string("env LD_PRELOAD=") + FAILING_SYSCALLS_PRELOAD + " TRAINBENCH_TEST_NO_FLOCK=" + dir.path() + " ";
  const auto warnings_of = [&](const std::string& tmpdir, const std::string& out) {
    const CommandResult r = run_command(no_flock + "env TMPDIR=" + tmpdir + " " + TRAINBENCH_BINARY +
                                        " run tiny --steps 10 --set checkpoint.every_steps=5 --set data.source=synthetic"
                                        " --set report.progress_every=0 --out " + out);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return nlohmann::json::parse(read_whole_file(out))["warnings"].dump() + r.out + r.err;
  };
  // Where the checkpoints fit, the folder is written unlocked and says so.
  const std::string roomy = dir.file("roomy");
  std::filesystem::create_directories(roomy);
  const std::string kept = warnings_of(roomy, dir.file("kept.json"));
  EXPECT_NE(kept.find("is not locked against a second run"), std::string::npos) << kept;
  const std::string dropped = warnings_of(dir.file("tmp"), dir.file("dropped.json"));
  EXPECT_NE(dropped.find("checkpoint: off: checkpoint.dir is not set"), std::string::npos) << dropped;
  EXPECT_EQ(dropped.find("is not locked"), std::string::npos) << dropped;
}

// The check counts what the checkpoints hold besides the state (the
// loaders' positions, up to their full shuffle buffers) and what the run's
// temporary shards take of the same filesystem. With the state alone (2 MB
// of tiny's, twice, in 6 MB) the default run went on, the shards and the
// first checkpoint took the room, and the second checkpoint failed it (exit 3).
TEST(CheckpointCli, TheRoomCheckCountsTheDataPositionAndTheTemporaryShards) {
  testing::TempDir dir("test_ckpt_cli");
  const testing::MountedFilesystem small(dir.file("tmp"), "tmpfs", "size=6m");
  if (!small.mounted()) GTEST_SKIP() << small.why_not();
  const CommandResult r = run_with_temporary_checkpoints(dir.file("tmp"), dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("data: 8 synthetic shards"), std::string::npos) << "the temporary shards: " << r.out;
  EXPECT_NE(r.out.find("checkpoint: off: checkpoint.dir is not set and 2 checkpoint(s) of up to"), std::string::npos) << r.out;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir.file("r.json")));
  EXPECT_TRUE(result["checkpoints"].empty());
  EXPECT_EQ(result["steps"].size(), 10u);
}

// The room is counted for as many checkpoints as retention leaves on disk
// at once: checkpoint.keep 2 holds 3 while the third is written (the oldest
// goes only once it is committed). Counted as two, tiny's ~2 MB checkpoints
// fit in 5 MiB, the run took them, and its third checkpoint failed it (exit 3).
TEST(CheckpointCli, TheRoomCheckCountsTheCheckpointsRetentionKeepsWhileOneIsWritten) {
  testing::TempDir dir("test_ckpt_cli");
  const testing::MountedFilesystem small(dir.file("tmp"), "tmpfs", "size=5m");
  if (!small.mounted()) GTEST_SKIP() << small.why_not();
  const CommandResult r = run_command("env TMPDIR=" + dir.file("tmp") + " " + TRAINBENCH_BINARY +
                                      " run tiny --steps 15 --set checkpoint.every_steps=5 --set data.source=synthetic"
                                      " --set report.progress_every=0 --out " + dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checkpoint: off: checkpoint.dir is not set and 3 checkpoint(s) of up to"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("checkpoint.keep 2, the oldest removed only once the next one is committed"), std::string::npos)
      << r.out;
}

// In a checkpoint.dir of the user's that cannot hold them, the run goes on
// (space may be freed meanwhile) but says before step 1, and in the result,
// that a checkpoint will find the disk full. Where they fit, not a word.
TEST(CheckpointCli, ACheckpointDirWithoutRoomForTheRunsCheckpointsIsAWarning) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("ckpt");
  const testing::MountedFilesystem small(ckpt, "tmpfs", "size=5m");
  if (!small.mounted()) GTEST_SKIP() << small.why_not();
  const CommandResult r = run_command(tiny_run(ckpt, 15, 5, dir.file("r.json"),
                                               "--set data.source=synthetic --set checkpoint.on_full=skip"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string expected = "this run writes 3 checkpoint(s) of up to ";
  EXPECT_NE(r.out.find("warning: " + expected), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("warning: " + expected), r.out.find("step ")) << "said before training: " << r.out;
  EXPECT_NE(r.out.find(ckpt + " has "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a checkpoint will find the disk full (checkpoint.on_full=skip)"), std::string::npos) << r.out;
  const nlohmann::json result = read_json(dir.file("r.json"));
  EXPECT_NE(result["warnings"].dump().find(expected), std::string::npos) << result["warnings"].dump();
  EXPECT_EQ(result["checkpoints"].back()["status"], "skipped_disk_full") << result["checkpoints"].dump();
  // The folder is the mount point: its filesystem is the tmpfs, not its parent's.
  bool described = false;
  for (const auto& f : result["environment"]["filesystems"])
    if (f["role"] == "checkpoint") {
      described = true;
      EXPECT_EQ(f["type"], "tmpfs") << f.dump();
      EXPECT_LE(f["free_bytes"].get<int64_t>(), int64_t{5} << 20) << f.dump();
    }
  EXPECT_TRUE(described) << result["environment"].dump();
  // keep 1: two at once fit.
  const CommandResult fits = run_command(tiny_run(dir.file("roomy"), 15, 5, dir.file("f.json"),
                                                  "--set data.source=synthetic --set checkpoint.keep=1"));
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(fits.out.find("a checkpoint will find the disk full"), std::string::npos) << fits.out;
}

// A disk with no byte free was taken for one whose free space is unknown,
// and "fitted": no warning before step 1, then the disk full at the first
// checkpoint. A 4 KiB tmpfs is full once the run's lock file is in it.
TEST(CheckpointCli, ACheckpointDirOnAFullDiskIsWarnedOfToo) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string ckpt = dir.file("full");
  const testing::MountedFilesystem full(ckpt, "tmpfs", "size=4k");
  if (!full.mounted()) GTEST_SKIP() << full.why_not();
  const CommandResult r = run_command(tiny_run(ckpt + "/c", 10, 5, dir.file("r.json"),
                                               "--set data.source=synthetic --set checkpoint.on_full=skip"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json result = read_json(dir.file("r.json"));
  bool checkpoint_filesystem = false;
  for (const auto& f : result["environment"]["filesystems"])
    if (f["role"] == "checkpoint") {
      checkpoint_filesystem = true;
      ASSERT_EQ(f["free_bytes"], 0) << "not the case under test: " << f.dump();
    }
  ASSERT_TRUE(checkpoint_filesystem) << result["environment"]["filesystems"].dump();
  EXPECT_NE(r.out.find("warning: this run writes 2 checkpoint(s) of up to "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(ckpt + "/c has 0.00 B free"), std::string::npos) << r.out;
  EXPECT_NE(result["warnings"].dump().find("a checkpoint will find the disk full"), std::string::npos)
      << result["warnings"].dump();
}

// A checkpoint thread that cannot start (EAGAIN: ulimit -u, or its stack
// past ulimit -v) said only "Resource temporarily unavailable": now which
// thread, and the limits that cause it. The persisting thread starts the
// writers, so failing every thread a thread starts fails exactly those.
TEST(CheckpointCli, AWriterThreadThatCannotStartNamesTheLimits) {
  testing::TempDir dir("test_ckpt_cli");
  const CommandResult r =
      run_command(std::string("env LD_PRELOAD=") + FAILING_SYSCALLS_PRELOAD + " TRAINBENCH_TEST_NO_NESTED_THREADS=1 " +
                  tiny_run(dir.file("ck"), 3, 1, dir.file("r.json"), "--set train.warmup_steps=1"));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  EXPECT_NE(r.err.find("checkpoint of step 1 failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot start a writer thread: Resource temporarily unavailable (threads or address space: "
                       "ulimit -u, ulimit -v)"),
            std::string::npos)
      << r.err;
}

// A --resume that names no checkpoint (a typo) is refused before
// checkpoint.dir is made and locked, or the engine allocated: it was found
// after both, and a run started beside it on that folder was refused the
// lock the doomed run held meanwhile. Here the folder is taken: the typo,
// not the lock, is what is said.
TEST(CheckpointCli, AResumeFromNoCheckpointIsRefusedBeforeTheCheckpointFolder) {
  testing::TempDir dir("test_ckpt_cli");
  const std::string checkpoints = dir.file("ck");
  fs::create_directories(checkpoints);
  fs::create_directories(dir.file("nope/step_3"));
  const int fd = ::open((checkpoints + "/" + kCheckpointLockName).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const CommandResult r =
      run_command(tiny_run(checkpoints, 8, 4, dir.file("r.json"), "--resume " + dir.file("nope/step_3")));
  ::close(fd);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err, "trainbench: checkpoint " + dir.file("nope/step_3") + " is neither a checkpoint (no " +
                       dir.file("nope/step_3/manifest.json") + ") nor a checkpoint.dir (no " +
                       dir.file("nope/step_3/latest") + ")\n");
  const CommandResult missing =
      run_command(tiny_run(dir.file("ck2"), 8, 4, dir.file("r.json"), "--resume " + dir.file("missing")));
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_EQ(missing.err, "trainbench: checkpoint " + dir.file("missing") + " does not exist\n");
  EXPECT_FALSE(fs::exists(dir.file("ck2"))) << "checkpoint.dir made for a run that could not start";
}

}  // namespace
}  // namespace trainbench
