// Bad data through the real CLI: every case is one line on stderr naming the
// path (and byte offset where there is one) with exit 2; with
// data.on_corrupt=skip the run goes on and the result counts what was skipped.
#include <gtest/gtest.h>
#include <fcntl.h>     // open, posix_fadvise: evicting the test's own shards from the page cache
#include <sys/mman.h>  // mmap, mincore
#include <sys/stat.h>  // mkfifo
#include <unistd.h>    // fdatasync, close, sysconf

#include <chrono>  // the refused small-files folder: before the measurements
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataloader/shard_tools.h"
#include "dataloader/shard_writer.h"
#include "tests/dataloader/read_test_tars.h"  // make_tar: member names a writer of ours would refuse
#include "tests/support/mounted_filesystem.h"  // a small tmpfs: --small-files on a full disk
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::read_whole_file;
using testing::run_command;

class LoaderCli : public ::testing::Test {
 protected:
  void SetUp() override {
    SynthOptions synth;
    synth.out_dir = dir_ + "/good";
    synth.count = 4;
    synth.samples_per_shard = 10;  // 4 x 10 x ~100 tokens: 12 steps of tiny pass every shard
    synth.vocab = 512;  // the tiny preset's
    synth.tokens_mean = 100;
    synth.tokens_spread = 50;
    good_ = synthesize_shards(synth).paths;
  }
  // A shard of `good_before` good samples of 64 tokens, one bad member
  // (sample<good_before>), then two good ones.
  std::string shard_with(const std::string& name, const std::string& extension,
                         const std::vector<uint8_t>& bad_payload, int good_before = 3) {
    const std::string path = dir_ + "/" + name;
    TarShardWriter writer;
    writer.open(path);
    const std::vector<uint16_t> good(64, 7);
    for (int i = 0; i < good_before + 3; ++i) {
      const std::string key = "sample" + std::to_string(i);
      if (i == good_before)
        writer.write_sample(key, {{extension, bad_payload.data(), bad_payload.size()}});
      else
        writer.write_sample(key, {{"u16", good.data(), good.size() * sizeof(uint16_t)}});
    }
    writer.close();
    return path;
  }

  // Runs tiny over the good shards plus `extra`, with `sets` overrides.
  CommandResult run_with(const std::vector<std::string>& extra, const std::string& sets = "",
                         int steps = 12) {
    std::string list = dir_ + "/list.txt";
    std::ofstream file(list);
    for (const std::string& path : good_) file << path << "\n";
    for (const std::string& path : extra) file << path << "\n";
    file.close();
    return run_command(std::string(TRAINBENCH_BINARY) + " run tiny --steps " + std::to_string(steps) + " --set data.readers=1 " +
                       "--set data.shards=" + list + " --out " + dir_ + "/result.json " + sets);
  }

  static void expect_one_line_naming(const CommandResult& r, const std::vector<std::string>& parts) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
    for (const std::string& part : parts) EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  }

  testing::TempDir temp_{"test_loader_cli"};
  const std::string dir_ = temp_.path();
  std::vector<std::string> good_;
};

TEST_F(LoaderCli, MissingShardsNameTheFirstMissingPath) {
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " run tiny --steps 6 --set 'data.shards=" +
                                      dir_ + "/none-{000..003}.tar' --out " + dir_ + "/r.json");
  expect_one_line_naming(r, {dir_ + "/none-000.tar"});
}

// A shard the list names twice is read twice an epoch: the run says so in
// its output and its result, with the count of repeats.
TEST_F(LoaderCli, AShardListedTwiceIsWarnedOf) {
  const CommandResult r = run_with({good_.front()}, "", 6);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string warning = "data.shards lists " + good_.front() + " 2 times: every listing is read each epoch, "
                              "so 1 of the 5 shards read are repeats";
  EXPECT_NE(r.out.find(warning), std::string::npos) << r.out;
  EXPECT_NE(nlohmann::json::parse(read_whole_file(dir_ + "/result.json"))["warnings"].dump().find(warning),
            std::string::npos);
}

TEST_F(LoaderCli, FewerShardsThanReadersSaysWhatToChange) {
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " run tiny --steps 6 --set data.readers=8 " +
                                      "--set data.shards=" + dir_ + "/good --out " + dir_ + "/r.json");
  expect_one_line_naming(r, {"4 shard(s)", "data.readers"});
}

TEST_F(LoaderCli, ANonTarFileIsNamed) {
  const std::string junk = dir_ + "/junk.tar";
  std::ofstream(junk) << std::string(5000, 'x');
  expect_one_line_naming(run_with({junk}, "--set data.shuffle_buffer=0"), {junk});
}

TEST_F(LoaderCli, ATruncatedShardIsNamedWithItsByteOffset) {
  const std::string cut = dir_ + "/cut.tar";
  fs::copy_file(good_.front(), cut);
  fs::resize_file(cut, fs::file_size(cut) / 2 + 100);  // mid-member
  expect_one_line_naming(run_with({cut}, "--set data.shuffle_buffer=0"), {cut, "byte "});
}

// A bad sample stops the run while a checkpoint is still being written,
// which then fails too (its storage hangs past checkpoint.timeout_s): both
// in one line, the data's first (it was a "check failed" line beside the
// data's: two lines, where the error policy gives one).
TEST_F(LoaderCli, AFailureThatStopsTheRunAndACheckFailedAfterItAreOneLine) {
  std::vector<testing::TestEntry> members;
  std::string tokens;  // 100 u16 tokens of id 7
  for (int t = 0; t < 100; ++t) tokens += std::string("\x07\0", 2);
  for (int i = 0; i < 40; ++i)
    members.push_back({(i < 10 ? "000" : "00") + std::to_string(i) + ".u16", i == 12 ? std::string(21, '\x01') : tokens});
  const std::string bad = dir_ + "/bad-at-12.tar";
  testing::write_file(bad, testing::make_tar(members));
  const CommandResult r = run_command(
      std::string(TRAINBENCH_BINARY) + " run tiny --steps 6 --set train.warmup_steps=1 --set data.readers=1 "
      "--set data.shuffle_buffer=0 --set data.shards=" + bad + " --set checkpoint.every_steps=1 "
      "--set checkpoint.when_busy=skip --set checkpoint.inject_delay_ms=5000 --set checkpoint.timeout_s=2 "
      "--set checkpoint.dir=" + dir_ + "/ck --set report.progress_every=0 --out " + dir_ + "/r.json");
  expect_one_line_naming(r, {bad + ": byte ", "sample '0012'",
                             "; and check failed: checkpoints_written: checkpoint of step 1 failed"});
}

TEST_F(LoaderCli, TokenOutOfVocabularyNamesShardKeyAndValue) {
  const std::vector<uint8_t> big = {0x00, 0x10};  // 4096 >= 512
  const std::string shard = shard_with("vocab.tar", "u16", big);
  expect_one_line_naming(run_with({shard}, "--set data.shuffle_buffer=0"), {shard, "sample3", "4096"});
}

TEST_F(LoaderCli, PartialTokenIsAnError) {
  const std::string shard = shard_with("odd.tar", "u16", {1, 2, 3});
  expect_one_line_naming(run_with({shard}, "--set data.shuffle_buffer=0"), {shard, "sample3", "3 bytes"});
}

TEST_F(LoaderCli, OversizedMemberIsAnError) {
  const std::string shard = shard_with("huge.tar", "u16", std::vector<uint8_t>(4096, 0));
  expect_one_line_naming(run_with({shard}, "--set data.shuffle_buffer=0 --set data.max_sample_bytes=1000"),
                         {shard, "1000"});
}

// The result's failed check data_read, whose detail must be the line the
// run printed.
std::string data_read_check(const nlohmann::json& result) {
  for (const auto& c : result["checks"])
    if (c["name"] == "data_read" && c["passed"] == false) return c["detail"].get<std::string>();
  return "";
}

// A corrupt sample met mid-run (data.on_corrupt=fail) stops the run before
// the step it was for; the steps trained before it are measured and written
// (the run ended with no result), with the failed check data_read saying
// what stderr says.
TEST_F(LoaderCli, ACorruptSampleMidRunStopsTheRunAndItsResultIsKept) {
  const std::vector<uint8_t> big = {0x00, 0x10};  // 4096 >= 512
  // 80 good samples of 64 tokens before the bad one: tiny's 512-token steps
  // train at least 9 steps on them first, whichever place the shuffled shard
  // order gives the shard (the good shards add up to ~8 more).
  const std::string shard = shard_with("late.tar", "u16", big, 80);
  const CommandResult r = run_with({shard}, "--set data.shuffle_buffer=0 --set checkpoint.every_steps=0", 60);
  expect_one_line_naming(r, {shard, "sample80", "4096"});
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir_ + "/result.json"));
  const size_t trained = result["steps"].size();
  EXPECT_GE(trained, 9u) << r.out;
  EXPECT_LT(trained, 20u) << "the run stops at the failure";
  EXPECT_EQ(result["steps"].back()["step"].get<size_t>(), trained) << "steps 1.., none missing";
  EXPECT_EQ("trainbench: " + data_read_check(result) + "\n", r.err) << "the check says what stderr says";
  EXPECT_GT(result["summary"]["tokens_per_s"].get<double>(), 0.0) << "the steps after warm-up are measured";
  EXPECT_EQ(result["summary"]["measured_steps"].get<size_t>() + result["summary"]["warmup_steps"].get<size_t>(),
            trained);
  EXPECT_NE(r.out.find("check data_read           FAILED  " + shard), std::string::npos) << r.out;
}

// No batch within data.timeout_s (every sample read held 2 s): exit 3, and
// still a result, with nothing trained and nothing measured, not zeros.
TEST_F(LoaderCli, NoBatchWithinTheTimeoutExitsThreeWithAResult) {
  const CommandResult r =
      run_with({}, "--set data.inject_delay_ms=2000 --set data.timeout_s=1 --set checkpoint.every_steps=0", 6);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("trainbench: data: no batch from reader 0 of rank 0 within data.timeout_s", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir_ + "/result.json"));
  EXPECT_TRUE(result["steps"].empty()) << result["steps"].dump();
  EXPECT_EQ("trainbench: " + data_read_check(result) + "\n", r.err);
  const nlohmann::json& summary = result["summary"];
  for (const char* figure : {"tokens_per_s", "loss_first", "bottleneck", "slowest_rank"})
    EXPECT_TRUE(summary[figure].is_null()) << figure << ": " << summary[figure].dump();
  EXPECT_TRUE(summary["step_s"]["median"].is_null()) << summary["step_s"].dump();
  EXPECT_TRUE(summary["stall_shares"]["compute"].is_null()) << summary["stall_shares"].dump();
  EXPECT_TRUE(summary["storage_read"]["read_gbs"].is_null()) << summary["storage_read"].dump();
  EXPECT_NE(r.out.find("tokens/s            not measured: no step after warm-up"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("bottleneck"), std::string::npos) << r.out;
}

// The same stall under burn-in: the verdict is FAIL (exit 4) for that
// reason alone, not also for "no step was measured" as if --duration were
// too short.
TEST_F(LoaderCli, ABurnInWhoseStorageStallsFailsForThatReason) {
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) +
                                      " burnin tiny --duration 30s --set data.inject_delay_ms=2000"
                                      " --set data.timeout_s=1 --out " + dir_ + "/b.json");
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("trainbench: burn-in: job: FAIL: data_read: data: no batch from reader 0", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one finding: " << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir_ + "/b.json"));
  EXPECT_EQ(result["burnin"]["verdict"], "FAIL");
}

// 4 shards over 3 readers: one reader has 2 an epoch, two have 1, and as
// batches come from the readers in turn the single shards are read twice
// as often. Said; 4 over 2 readers (or 4) is even, and nothing is said.
// bench io reads every shard once whatever data.readers says: nothing said.
TEST_F(LoaderCli, ShardsThatDoNotDivideAmongTheReadersAreWarnedOf) {
  const auto warnings_with = [&](int readers) {
    const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " run tiny --steps 6 --set data.readers=" +
                                        std::to_string(readers) + " --set data.shards=" + dir_ +
                                        "/good --set checkpoint.every_steps=0 --out " + dir_ + "/r.json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(read_whole_file(dir_ + "/r.json"))["warnings"].dump();
  };
  const std::string uneven = warnings_with(3);
  EXPECT_NE(uneven.find("4 shards over 1 rank(s) x 3 data.readers: 1 reader(s) get 2 shards an epoch and the rest 1"),
            std::string::npos) << uneven;
  EXPECT_NE(uneven.find("a multiple of 3 shards samples them evenly"), std::string::npos) << uneven;
  EXPECT_EQ(warnings_with(2).find("data.readers:"), std::string::npos);

  const CommandResult io = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --readers 1 --seconds 30"
                                       " --set data.readers=3 --set data.shards=" + dir_ + "/good --out " + dir_ +
                                       "/io.json");
  ASSERT_EQ(io.exit_code, 0) << io.err;
  EXPECT_EQ(io.out.find("data.readers:"), std::string::npos) << io.out;
  const std::string io_warnings = nlohmann::json::parse(read_whole_file(dir_ + "/io.json"))["warnings"].dump();
  EXPECT_EQ(io_warnings.find("data.readers:"), std::string::npos) << io_warnings;
}

TEST_F(LoaderCli, SkipCountsAndReportsAndTrainingGoesOn) {
  const std::string odd = shard_with("odd.tar", "u16", {1, 2, 3});
  const std::string junk = dir_ + "/junk.tar";
  std::ofstream(junk) << std::string(5000, 'x');
  const CommandResult r =
      run_with({odd, junk}, "--set data.on_corrupt=skip --set data.shuffle_buffer=0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir_ + "/result.json"));
  const nlohmann::json& read = result["summary"]["storage_read"];
  EXPECT_GE(read["samples_skipped"].get<int64_t>(), 1);
  EXPECT_GE(read["shards_skipped"].get<int64_t>(), 1);
  bool warned = false;
  for (const auto& w : result["warnings"]) warned = warned || w.get<std::string>().find("skip") != std::string::npos;
  EXPECT_TRUE(warned) << result["warnings"].dump();
}

// A shard cut at a member boundary and a tar with no sample read as whole to
// every tar reader: the run trains on (exit 0), counts them in the result
// and warns, naming the first, where it said nothing.
TEST_F(LoaderCli, AShardCutShortAndAnEmptyArchiveAreCountedAndWarnedOf) {
  const std::string cut = testing::copy_without_end_marker(good_.front(), dir_ + "/cut.tar");
  const std::string empty = dir_ + "/empty.tar";
  std::ofstream(empty, std::ios::binary) << std::string(1024, '\0');
  const CommandResult r = run_with({cut, empty}, "--set data.shuffle_buffer=0", 16);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir_ + "/result.json"));
  const nlohmann::json& read = result["summary"]["storage_read"];
  EXPECT_EQ(read["shards_cut_short"], 1) << read;
  EXPECT_EQ(read["shards_without_samples"], 1) << read;
  std::string warning;
  for (const auto& w : result["warnings"])
    if (w.get<std::string>().find("end-of-archive") != std::string::npos) warning = w.get<std::string>();
  EXPECT_NE(warning.find("1 shard(s) end without the tar end-of-archive marker"), std::string::npos) << warning;
  EXPECT_NE(warning.find("and 1 shard(s) hold no sample"), std::string::npos) << warning;
  EXPECT_TRUE(warning.find(cut) != std::string::npos || warning.find(empty) != std::string::npos) << warning;
  EXPECT_NE(r.out.find("warning: 1 shard(s) end without"), std::string::npos) << r.out;
  // The good shards alone: nothing counted, nothing said.
  const CommandResult whole = run_with({}, "--set data.shuffle_buffer=0");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const nlohmann::json clean = nlohmann::json::parse(read_whole_file(dir_ + "/result.json"));
  EXPECT_EQ(clean["summary"]["storage_read"]["shards_cut_short"], 0);
  EXPECT_EQ(clean["summary"]["storage_read"]["shards_without_samples"], 0);
  EXPECT_EQ(clean["warnings"].dump().find("end-of-archive"), std::string::npos) << clean["warnings"];
}

TEST_F(LoaderCli, DefaultRunReadsShardsItMadeAndReportsTheBytes) {
  const CommandResult r =
      run_command(std::string(TRAINBENCH_BINARY) + " run tiny --steps 8 --out " + dir_ + "/r.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("synthetic shards"), std::string::npos) << r.out;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir_ + "/r.json"));
  const nlohmann::json& read = result["summary"]["storage_read"];
  EXPECT_GT(read["bytes_read"].get<int64_t>(), 0);
  EXPECT_GT(read["samples"].get<int64_t>(), 0);
  EXPECT_GT(read["bytes_per_token"].get<double>(), 2.0);  // u16 tokens plus tar headers
  EXPECT_GT(read["required_read_gbs"].get<double>(), 0.0);
}

// The default run's shards in a TMPDIR without room for them: the
// environment's (exit 3), naming TMPDIR as the folder to move, for run and
// bench io alike (it said only "make fewer or smaller shards" of a folder
// the user never chose), and the folder made for them gone.
TEST_F(LoaderCli, TemporaryShardsOnAFullDiskNameTmpdir) {
  const testing::MountedFilesystem small(dir_ + "/small", "tmpfs", "size=256k");
  if (!small.mounted()) GTEST_SKIP() << small.why_not();
  const std::vector<std::string> commands = {" run tiny --steps 8 --out " + dir_ + "/r.json",
                                             " bench io tiny --readers 1 --seconds 1"};
  for (const std::string& command : commands) {
    const CommandResult r =
        run_command("env TMPDIR=" + small.path() + " timeout 60 " + std::string(TRAINBENCH_BINARY) + command);
    EXPECT_EQ(r.exit_code, 3) << command << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
    const std::vector<std::string> parts = {"shards need about ", "available: make fewer or smaller shards",
                                            "the temporary directory (TMPDIR=" + small.path() + ")",
                                            "set TMPDIR to a folder with room, or data.shards"};
    for (const std::string& part : parts)
      EXPECT_NE(r.err.find(part), std::string::npos) << command << ": " << r.err;
    EXPECT_TRUE(fs::is_empty(small.path())) << command << ": left behind in TMPDIR";
  }
  EXPECT_FALSE(fs::exists(dir_ + "/r.json"));
}

TEST_F(LoaderCli, BenchIoReadsEveryShardOncePerReaderCountAndComparesWithAPlainRead) {
  // A run to compare against, then bench io over the same shards.
  ASSERT_EQ(run_with({}).exit_code, 0);
  const std::string out = dir_ + "/bench-io.json";
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" +
                                      dir_ + "/good --readers 1,2 --seconds 30 --small-files --against " +
                                      dir_ + "/result.json --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("loader, 2 reader(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("x consumed"), std::string::npos) << r.out;
  const nlohmann::json bench = nlohmann::json::parse(read_whole_file(out));
  EXPECT_EQ(bench["schema"], "trainbench.bench_io/v1");
  EXPECT_TRUE(bench["version"].is_string()) << "which build measured it, as every other result says";
  int64_t shard_bytes = 0;
  for (const std::string& path : good_) shard_bytes += static_cast<int64_t>(fs::file_size(path));
  int64_t shard_tokens = 0;
  const CommandResult verify = run_command(std::string(TRAINBENCH_BINARY) + " shards verify " + dir_ +
                                           "/good --field u16 --vocab 512");
  ASSERT_EQ(verify.exit_code, 0) << verify.err;
  const size_t at = verify.out.find("tokens");
  ASSERT_NE(at, std::string::npos) << verify.out;
  shard_tokens = std::stoll(verify.out.substr(verify.out.find_first_of("0123456789", at)));
  EXPECT_EQ(bench["shard_bytes"], shard_bytes);
  ASSERT_EQ(bench["by_threads"].size(), 2u);
  for (const auto& row : bench["by_threads"]) {
    EXPECT_EQ(row["plain_read"]["bytes"], shard_bytes) << "the plain read reads every byte";
    // The loader reads one epoch, every shard once: exactly the shards'
    // bytes, samples and tokens. It used to stop on a byte count, with a
    // reader already into the next epoch (more bytes, samples short).
    EXPECT_EQ(row["loader"]["bytes"].get<int64_t>(), shard_bytes) << "threads " << row["threads"];
    EXPECT_EQ(row["loader"]["samples"].get<int64_t>(), 4 * 10) << "threads " << row["threads"];
    EXPECT_EQ(row["loader"]["tokens"].get<int64_t>(), shard_tokens) << "threads " << row["threads"];
    EXPECT_GT(row["loader_fraction_of_plain_read"].get<double>(), 0.0);
  }
  // The small-files tree holds every sample once: its token count is the shards'.
  EXPECT_EQ(bench["small_files"]["tokens"].get<int64_t>(), shard_tokens);
  EXPECT_EQ(bench["small_files"]["samples"].get<int64_t>(), 4 * 10);
  EXPECT_GT(bench["consumed_tokens_per_s_per_rank"].get<double>(), 0.0);
}

// --readers is measured in ascending order whatever the order typed: the
// one-thread pass is the single stream (`--readers 2,1` took the two-thread
// pass for it: "% 1-stream" 11% on the one-thread row), and the small files
// are compared with the widest plain read by the share of the data read per
// second (they hold the members' bytes alone, not the tar headers). An empty
// item is an error, not left out.
TEST_F(LoaderCli, BenchIoReaderCountsInAnyOrderAndSmallFilesCompareLikeWithLike) {
  const std::string out = dir_ + "/bench-io.json";
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" + dir_ +
                                      "/good --readers 2,1 --seconds 30 --small-files --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json bench = nlohmann::json::parse(read_whole_file(out));
  ASSERT_EQ(bench["by_threads"].size(), 2u);
  EXPECT_EQ(bench["by_threads"][0]["threads"], 1);
  EXPECT_EQ(bench["by_threads"][1]["threads"], 2);
  EXPECT_EQ(bench["single_stream_read"], bench["by_threads"][0]["plain_read"]);
  EXPECT_EQ(bench["first_read"], bench["by_threads"][0]["plain_read_first_pass"]);
  const auto& small = bench["small_files"];
  const auto& widest = bench["by_threads"][1]["plain_read"];
  ASSERT_EQ(small["complete"], true);
  ASSERT_EQ(widest["complete"], true);
  EXPECT_LT(small["bytes"].get<int64_t>(), bench["shard_bytes"].get<int64_t>()) << "members without tar headers";
  // Both read all of the data: the ratio is that of their times.
  EXPECT_NEAR(bench["small_files_fraction_of_plain_read"].get<double>(),
              widest["seconds"].get<double>() / small["seconds"].get<double>(), 1e-9);
  for (const std::string& list : {std::string("1,,2"), std::string(","), std::string("2,")}) {
    const CommandResult bad = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" +
                                          dir_ + "/good --readers " + list + " --seconds 1");
    EXPECT_EQ(bad.exit_code, 2) << list << ": " << bad.out;
    EXPECT_NE(bad.err.find("--readers"), std::string::npos) << list << ": " << bad.err;
    EXPECT_NE(bad.err.find("must be an integer between 1 and 256"), std::string::npos) << list << ": " << bad.err;
    EXPECT_EQ(bad.err.find('\n'), bad.err.size() - 1) << list << ": " << bad.err;
  }
  // A --small-files-dir that cannot take the folder is refused before the
  // measurements: it was found after them all (here 2 x 30 s of storage
  // slowed to a second a read), and no row was kept.
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult no_dir = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" +
                                           dir_ + "/good --readers 1 --seconds 30 --set data.inject_delay_ms=1000 "
                                           "--small-files --small-files-dir " + dir_ + "/nowhere --out " + out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_EQ(no_dir.exit_code, 2) << no_dir.err;
  EXPECT_EQ(no_dir.err.rfind("trainbench: --small-files-dir: cannot create a folder under " + dir_ + "/nowhere", 0), 0u)
      << no_dir.err;
  EXPECT_EQ(no_dir.err.find('\n'), no_dir.err.size() - 1) << no_dir.err;
  EXPECT_LT(seconds, 20.0) << "refused after measuring";
}

// --seconds bounds every measurement, the plain reads too: they read every
// shard whole, twice per reader count, whatever the data set's size (hours
// on terabytes). Storage slowed by data.inject_delay_ms (20 ms per read)
// cannot finish a pass within 10 ms, however fast the machine: each
// measurement stops, counts what it read, and says so.
TEST_F(LoaderCli, BenchIoStopsEveryMeasurementAtSecondsAndSaysSo) {
  const std::string out = dir_ + "/bench-io.json";
  const CommandResult r =
      run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" + dir_ +
                  "/good --set data.inject_delay_ms=20 --set data.shuffle_buffer=0 --readers 1,2 --seconds 0.01 "
                  "--small-files --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(stopped)"), std::string::npos) << r.out;
  const nlohmann::json bench = nlohmann::json::parse(read_whole_file(out));
  const int64_t shard_bytes = bench["shard_bytes"].get<int64_t>();
  ASSERT_EQ(bench["by_threads"].size(), 2u);
  for (const auto& row : bench["by_threads"]) {
    for (const char* what : {"plain_read", "loader"})
      EXPECT_EQ(row[what]["complete"], false) << what << ", threads " << row["threads"];
    // A thread stops after its first read, which counts: at most one shard
    // per thread. (The loader's first sample may come after 10 ms on a
    // loaded machine: its count is checked below, at 0.3 s.)
    EXPECT_GT(row["plain_read"]["bytes"].get<int64_t>(), 0) << "what it read by then counts";
    EXPECT_LT(row["plain_read"]["bytes"].get<int64_t>(), shard_bytes) << "threads " << row["threads"];
  }
  EXPECT_EQ(bench["small_files"]["complete"], false);
  EXPECT_LT(bench["small_files"]["samples"].get<int64_t>(), 4 * 10);
  // The loader stops at --seconds while its first batch still waits for the
  // shuffle buffer (256 samples, more than the 40 there are) to fill: it
  // read on to the end of the epoch (4 s at 100 ms a sample), 13 times over.
  // What it read by then counts (its first sample comes at 0.1 s).
  const CommandResult filling =
      run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" + dir_ +
                  "/good --set data.inject_delay_ms=100 --readers 1 --seconds 0.3 --out " + out);
  ASSERT_EQ(filling.exit_code, 0) << filling.err;
  const nlohmann::json filled = nlohmann::json::parse(read_whole_file(out));
  const auto& loader = filled["by_threads"][0]["loader"];
  EXPECT_EQ(loader["complete"], false) << loader.dump();
  EXPECT_GT(loader["bytes"].get<int64_t>(), 0) << "what it read by then counts: " << loader.dump();
  EXPECT_LT(loader["seconds"].get<double>(), 3.0) << "--seconds 0.3: " << loader.dump();
  EXPECT_LT(loader["samples"].get<int64_t>(), 4 * 10) << loader.dump();
  // Unslowed, everything is read whole, and said so. 8 readers over 4
  // shards: the loader is not measured there, and the result says why.
  const CommandResult whole = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" +
                                          dir_ + "/good --readers 1,2,8 --seconds 60 --out " + out);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.out.find("(stopped)"), std::string::npos) << whole.out;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(out));
  ASSERT_EQ(result["by_threads"].size(), 3u) << result.dump();
  for (const auto& row : result["by_threads"]) {
    EXPECT_EQ(row["plain_read"]["complete"], true);
    if (row["threads"] == 8)
      EXPECT_FALSE(row.contains("loader")) << row.dump();
    else
      EXPECT_EQ(row["loader"]["complete"], true);
  }
  EXPECT_NE(result["warnings"].dump().find("the loader was not measured with 8 readers: only 4 shards"),
            std::string::npos)
      << result["warnings"].dump();
  // On the temporary shards (no data.shards) there are as many as the
  // widest count asked: the default data measured 8 shards' worth.
  const CommandResult wide = run_command(std::string(TRAINBENCH_BINARY) +
                                         " bench io tiny --readers 12 --seconds 1 --out " + out);
  ASSERT_EQ(wide.exit_code, 0) << wide.out << wide.err;
  const nlohmann::json widened = nlohmann::json::parse(read_whole_file(out));
  ASSERT_EQ(widened["by_threads"].size(), 2u) << widened.dump();
  EXPECT_EQ(widened["by_threads"][1]["threads"], 12);
  EXPECT_TRUE(widened["by_threads"][1].contains("loader")) << widened["by_threads"][1].dump();
  // Every count above the shards': no loader to measure at all, which
  // passed with exit 0 and a warning; now exit 2 before reading, no result.
  std::remove(out.c_str());
  const CommandResult none = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" +
                                         dir_ + "/good --readers 5,8 --seconds 60 --out " + out);
  EXPECT_EQ(none.exit_code, 2) << none.out << none.err;
  EXPECT_NE(none.err.find("trainbench: --readers 5,8: only 4 shard(s), and a reader reads whole shards"),
            std::string::npos)
      << none.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// bench io --small-files unpacks the samples one file per member. Named by
// the members' names, a key that is an absolute path or climbs with "../"
// wrote outside the folder (over a file already there, left behind), and
// two shards of one stem (ds.v2-000000.tar and ds.v2-000001.tar both gave
// "ds") overwrote each other: the pass read a part of what the loader read,
// and said "all".
TEST_F(LoaderCli, BenchIoSmallFilesStayInTheirFolderAndKeepEverySample) {
  const std::string victim = dir_ + "/victim.u16";
  testing::write_file(victim, "precious");
  const std::string tokens(600, '\0');  // 300 u16 tokens of id 0
  const std::vector<testing::TestEntry> members = {
      {"s0.u16", tokens},
      {victim, tokens},  // key: the absolute path of victim
      {"../../../../../../../.." + dir_ + "/escaped/s1.u16", tokens}};
  fs::create_directories(dir_ + "/odd/a");
  fs::create_directories(dir_ + "/odd/b");
  testing::write_file(dir_ + "/odd/a/ds.v2-000000.tar", testing::make_tar(members));
  testing::write_file(dir_ + "/odd/b/ds.v2-000000.tar", testing::make_tar(members));
  testing::write_file(dir_ + "/odd/a/ds.v2-000001.tar", testing::make_tar(members));
  const std::string out = dir_ + "/small.json";
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" + dir_ +
                                      "/odd/a/ds.v2-000000.tar," + dir_ + "/odd/b/ds.v2-000000.tar," + dir_ +
                                      "/odd/a/ds.v2-000001.tar --readers 1 --seconds 30 --small-files"
                                      " --small-files-dir " + dir_ + " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(read_whole_file(victim), "precious");
  EXPECT_FALSE(fs::exists(dir_ + "/escaped")) << "written outside the small-files folder";
  const nlohmann::json bench = nlohmann::json::parse(read_whole_file(out));
  const nlohmann::json& loader = bench["by_threads"][0]["loader"];
  EXPECT_EQ(loader["samples"], 9) << bench.dump();
  EXPECT_EQ(bench["small_files"]["samples"], loader["samples"]) << bench.dump();
  EXPECT_EQ(bench["small_files"]["tokens"], loader["tokens"]) << bench.dump();
  EXPECT_EQ(bench["small_files"]["complete"], true);
  EXPECT_NE(r.out.find("small files: 9 files for the shards' samples (9 files, 9 samples read)"), std::string::npos)
      << r.out;
}

// Pages of `path` the page cache holds, as a fraction (-1 when it cannot tell).
double cached_fraction(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const auto size = static_cast<size_t>(fs::file_size(path));
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return -1;
  std::vector<unsigned char> pages((size + page - 1) / page);
  double fraction = -1;
  if (::mincore(map, size, pages.data()) == 0) {
    size_t resident = 0;
    for (const unsigned char p : pages) resident += p & 1;
    fraction = static_cast<double>(resident) / static_cast<double>(pages.size());
  }
  ::munmap(map, size);
  return fraction;
}

// The read bench took the faster of a plain pass before and after the
// loader as the storage's ceiling and dropped the other: on data that fits
// in memory the first pass (cold when the cache did not hold the files) was
// thrown away and a page-cache figure printed as the storage's, without a
// word. Both passes are reported now, each with the share of its bytes the
// page cache held before it (mincore), and a warning says the figures are
// page-cache figures and how to get the storage's. The test's own shards
// are evicted first (fdatasync + POSIX_FADV_DONTNEED: no root, nothing
// else touched), so the first pass is a cold read where the filesystem
// lets go of them (tmpfs does not: those checks are then left out).
TEST_F(LoaderCli, BenchIoReportsTheColdAndTheWarmPassApartAndWarnsOfThePageCache) {
  bool evicted = true;
  for (const std::string& path : good_) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    evicted = evicted && cached_fraction(path) == 0.0;
  }
  const std::string out = dir_ + "/bench-io.json";
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" + dir_ +
                                      "/good --readers 1 --seconds 60 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plain read, 1 thread(s), 1st pass"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plain read, 1 thread(s), 2nd pass"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cached"), std::string::npos) << r.out;
  // A few hundred KiB fit in any machine's memory: the warning is always due.
  const size_t warning = r.out.find("warning: the shards");
  ASSERT_NE(warning, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("page-cache figure", warning), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("drop_caches", warning), std::string::npos) << r.out;

  const nlohmann::json bench = nlohmann::json::parse(read_whole_file(out));
  const int64_t shard_bytes = bench["shard_bytes"].get<int64_t>();
  EXPECT_EQ(bench["shards_fit_in_memory"], true);
  EXPECT_GT(bench["memory_total_bytes"].get<int64_t>(), shard_bytes);
  ASSERT_EQ(bench["warnings"].size(), 1u) << bench["warnings"];
  EXPECT_NE(bench["warnings"][0].get<std::string>().find("drop_caches"), std::string::npos);
  const auto& row = bench["by_threads"][0];
  for (const char* pass : {"plain_read_first_pass", "plain_read_second_pass", "plain_read", "loader"}) {
    ASSERT_TRUE(row.contains(pass)) << pass;
    EXPECT_EQ(row[pass]["bytes"].get<int64_t>(), shard_bytes) << pass;
    const double cached = row[pass]["cached_fraction_before"].get<double>();
    EXPECT_GE(cached, 0.0) << pass;
    EXPECT_LE(cached, 1.0) << pass;
  }
  EXPECT_EQ(bench["first_read"], row["plain_read_first_pass"]) << "the first read of all is the 1-thread 1st pass";
  if (evicted) {
    EXPECT_EQ(bench["cached_fraction_at_start"].get<double>(), 0.0);
    EXPECT_EQ(row["plain_read_first_pass"]["cached_fraction_before"].get<double>(), 0.0) << "a cold read";
    // The first pass brought them in: the second reads memory.
    EXPECT_GT(row["plain_read_second_pass"]["cached_fraction_before"].get<double>(), 0.5) << "a warm read";
    EXPECT_NE(r.out.find("only the first pass (cached 0%) is a storage figure"), std::string::npos) << r.out;
  } else {
    // Reported as skipped, not passed (a printed note read as a pass): the
    // checks above ran, the cold-read ones did not.
    GTEST_SKIP() << "this filesystem kept the shards cached (tmpfs?): the cold-read checks were not made";
  }
}

TEST_F(LoaderCli, BenchIoNamesABadAgainstFile) {
  std::ofstream(dir_ + "/not-a-result.json") << R"({"schema": "trainbench.result/v1", "summary": {}})";
  const CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" +
                                      dir_ + "/good --against " + dir_ + "/not-a-result.json");
  expect_one_line_naming(r, {"--against", "not-a-result.json", "summary.tokens_per_s"});
  // Any JSON with the two numbers was taken as a run's (exit 0, "training
  // consumed 5 tokens/s per rank"): another schema's, and a bench compute
  // result's, a two-step job on resident tokens that read no storage.
  std::ofstream(dir_ + "/other.json") << R"({"schema": "not.trainbench/v9", "summary": {"tokens_per_s": 5},
                                             "environment": {"ranks": 1}})";
  std::ofstream(dir_ + "/compute.json") << R"({"schema": "trainbench.result/v1", "summary": {"tokens_per_s": 5},
                                               "environment": {"ranks": 1}, "compute_ceiling": {"tokens_per_s": 5}})";
  const std::map<std::string, std::string> not_runs = {
      {"other.json", "not a trainbench run or burnin result (schema 'not.trainbench/v9'"},
      {"compute.json", "a `trainbench bench compute` result (it has compute_ceiling)"}};
  for (const auto& [name, why] : not_runs)
    expect_one_line_naming(run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" + dir_ +
                                       "/good --against " + dir_ + "/" + name),
                           {"--against " + dir_ + "/" + name + ": " + why, "give a `trainbench run --out` result"});
  // Not JSON at all, or a run that measured no tokens/s (null): said in
  // trainbench's words, not the JSON library's.
  std::ofstream(dir_ + "/not-json.json") << "{bad";
  std::ofstream(dir_ + "/unmeasured.json")
      << R"({"schema": "trainbench.result/v1", "summary": {"tokens_per_s": null}, "environment": {"ranks": 1}})";
  for (const std::string name : {"not-json.json", "unmeasured.json"}) {
    const CommandResult bad = run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" +
                                          dir_ + "/good --against " + dir_ + "/" + name);
    expect_one_line_naming(bad, {"--against", name});
    EXPECT_EQ(bad.err.find("json.exception"), std::string::npos) << bad.err;
  }
  // An empty path compared with nothing, exit 0, without a word.
  expect_one_line_naming(run_command(std::string(TRAINBENCH_BINARY) + " bench io tiny --set data.shards=" + dir_ +
                                     "/good --against ''"),
                         {"--against", "the path is empty"});
  // A FIFO blocked the read forever; a folder failed inside the stream as
  // an internal error (exit 1).
  ASSERT_EQ(mkfifo((dir_ + "/fifo.json").c_str(), 0600), 0);
  fs::create_directories(dir_ + "/folder.json");
  for (const std::string name : {"fifo.json", "folder.json"}) {
    const CommandResult bad = run_command("timeout 60 " + std::string(TRAINBENCH_BINARY) +
                                          " bench io tiny --set data.shards=" + dir_ + "/good --against " + dir_ +
                                          "/" + name);
    expect_one_line_naming(bad, {"--against " + dir_ + "/" + name + ": not a regular file"});
  }
  // --out naming the --against file replaced the run's result with the
  // bench's (exit 0): refused before anything is read, the file kept.
  const std::string run_result =
      R"({"schema": "trainbench.result/v1", "summary": {"tokens_per_s": 1000}, "environment": {"ranks": 1}})";
  std::ofstream(dir_ + "/run.json") << run_result;
  const CommandResult same = run_command("timeout 60 " + std::string(TRAINBENCH_BINARY) +
                                         " bench io tiny --set data.shards=" + dir_ + "/good --against " + dir_ +
                                         "/run.json --out " + dir_ + "/./run.json");
  expect_one_line_naming(same, {"--out " + dir_ + "/./run.json is the --against file",
                                "give --out another path"});
  EXPECT_EQ(testing::read_whole_file(dir_ + "/run.json"), run_result);
}

// --small-files unpacking onto a full disk: the environment's (exit 3), the
// file and errno named, and the folder it made removed (it was "internal
// error: cannot write ...", exit 1, the folder left behind, full).
TEST_F(LoaderCli, SmallFilesOnAFullDiskIsTheEnvironmentsAndLeaveNothing) {
  const testing::MountedFilesystem small(dir_ + "/small", "tmpfs", "size=64k");
  if (!small.mounted()) GTEST_SKIP() << small.why_not();
  const CommandResult r = run_command("timeout 60 " + std::string(TRAINBENCH_BINARY) +
                                      " bench io tiny --set data.shards=" + dir_ + "/good --readers 1 --seconds 1"
                                      " --small-files --small-files-dir " + small.path());
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  for (const std::string part : {"--small-files: cannot ", "No space left on device", "give --small-files-dir a disk with room"})
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_empty(small.path())) << "the unpacked files were left on the full disk";
}

// A FIFO named like a shard would block the open, a device never ends:
// run and bench io name the file, exit 2, and do not hang.
TEST_F(LoaderCli, ShardsThatAreNotRegularFilesAreRefused) {
  fs::create_directories(dir_ + "/special");
  ASSERT_EQ(mkfifo((dir_ + "/special/a.tar").c_str(), 0600), 0);
  const std::string tb = "timeout 60 " + std::string(TRAINBENCH_BINARY);
  expect_one_line_naming(run_command(tb + " run tiny --steps 6 --set data.shards=" + dir_ + "/special --out " +
                                     dir_ + "/r.json"),
                         {dir_ + "/special/a.tar", "is not a regular file"});
  expect_one_line_naming(run_command(tb + " bench io tiny --set data.shards=" + dir_ +
                                     "/special --readers 1 --seconds 2"),
                         {dir_ + "/special/a.tar", "is not a regular file"});
  expect_one_line_naming(run_command(tb + " run tiny --steps 6 --set data.shards=/dev/urandom --out " + dir_ +
                                     "/r.json"),
                         {"/dev/urandom", "is not a regular file"});
}

// Samples whose token members are all empty would train on nothing but the
// EOS separators: the run names the shard and exits 2.
TEST_F(LoaderCli, ADataSetWithoutTokensIsRefused) {
  const std::string path = dir_ + "/empty-tokens.tar";
  TarShardWriter writer;
  writer.open(path);
  for (const char* key : {"s0", "s1", "s2", "s3", "s4"}) writer.write_sample(key, {{"u16", nullptr, 0}});
  writer.close();
  const CommandResult r = run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                                      " run tiny --steps 6 --set data.readers=1 --set data.shards=" + path +
                                      " --set checkpoint.every_steps=0 --out " + dir_ + "/r.json");
  expect_one_line_naming(r, {path, "no readable sample with tokens"});
  // bench io's loader reads the same epoch: no figure of nothing (it exited 0 with a rate of "-").
  expect_one_line_naming(run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                                     " bench io tiny --readers 1 --seconds 20 --set data.shards=" + path),
                         {"read all 1 shard(s) and found no readable sample with tokens"});
}

// bench io under data.on_corrupt=skip says what its loader left out, as run
// does; its figures are the rest's (it said "all" and nothing else).
TEST_F(LoaderCli, BenchIoSaysWhatSkipLeftOut) {
  const std::string odd = shard_with("odd.tar", "u16", {1, 2, 3});
  const std::string junk = dir_ + "/junk.tar";
  std::ofstream(junk) << std::string(5000, 'x');
  const std::string list = dir_ + "/list.txt";
  std::ofstream(list) << good_[0] << "\n" << odd << "\n" << junk << "\n";
  const CommandResult r = run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                                      " bench io tiny --readers 1 --seconds 20 --set data.on_corrupt=skip " +
                                      "--set data.shards=" + list + " --out " + dir_ + "/io.json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("all but skipped"), std::string::npos) << r.out;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir_ + "/io.json"));
  const nlohmann::json& loader = result.at("by_threads").at(0).at("loader");
  EXPECT_EQ(loader.at("samples_skipped"), 1) << loader;
  EXPECT_EQ(loader.at("shards_skipped"), 1) << loader;
  bool warned = false;
  for (const auto& w : result.at("warnings"))
    warned = warned || w.get<std::string>().find("data.on_corrupt=skip left out 1 corrupt sample(s) and 1 shard(s)") !=
                           std::string::npos;
  EXPECT_TRUE(warned) << result.at("warnings").dump();
  EXPECT_EQ(loader.at("shards_cut_short"), 0) << loader;
  EXPECT_EQ(loader.at("shards_without_samples"), 0) << loader;

  // --small-files leaves them out as well (its first corrupt sample ended
  // the whole bench, exit 2, after the loader's rows had skipped it).
  const CommandResult small = run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                                          " bench io tiny --readers 1 --seconds 20 --small-files "
                                          "--set data.on_corrupt=skip --set data.shards=" + list + " --out " + dir_ +
                                          "/small.json");
  ASSERT_EQ(small.exit_code, 0) << small.err << small.out;
  const nlohmann::json small_result = nlohmann::json::parse(read_whole_file(dir_ + "/small.json"));
  const nlohmann::json& files = small_result.at("small_files");
  EXPECT_EQ(files.at("samples_skipped"), 1) << files;
  EXPECT_EQ(files.at("shards_skipped"), 1) << files;
  EXPECT_GT(files.at("tokens").get<int64_t>(), 0) << files;
  bool small_warned = false;
  for (const auto& w : small_result.at("warnings"))
    small_warned = small_warned || w.get<std::string>().find("left out 1 corrupt sample(s) and 1 shard(s) of the "
                                                             "small files") != std::string::npos;
  EXPECT_TRUE(small_warned) << small_result.at("warnings").dump();

  // A sample without the field's member is left out by both, as by the
  // loader (the small files counted it as a sample of 0 tokens).
  const std::string bare = shard_with("bare.tar", "txt", {'h', 'i'});
  std::ofstream(list) << good_[0] << "\n" << bare << "\n";
  const CommandResult without = run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                                            " bench io tiny --readers 1 --seconds 20 --small-files "
                                            "--set data.on_corrupt=skip --set data.shards=" + list + " --out " +
                                            dir_ + "/bare.json");
  ASSERT_EQ(without.exit_code, 0) << without.err << without.out;
  const nlohmann::json bare_result = nlohmann::json::parse(read_whole_file(dir_ + "/bare.json"));
  const nlohmann::json& bare_loader = bare_result.at("by_threads").at(0).at("loader");
  const nlohmann::json& bare_files = bare_result.at("small_files");
  EXPECT_EQ(bare_loader.at("samples_skipped"), 1) << bare_loader;
  EXPECT_EQ(bare_files.at("samples_skipped"), 1) << bare_files;
  EXPECT_EQ(bare_files.at("samples"), bare_loader.at("samples")) << bare_result.dump();
  EXPECT_EQ(bare_files.at("tokens"), bare_loader.at("tokens")) << bare_result.dump();
  // Without skip: the first such sample fails the bench, named, as the loader's does.
  const CommandResult failed = run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                                           " bench io tiny --readers 1 --seconds 20 --small-files "
                                           "--set data.shards=" + list);
  EXPECT_EQ(failed.exit_code, 2) << failed.err << failed.out;
  EXPECT_NE(failed.err.find("sample3"), std::string::npos) << failed.err;
}

// A shard cut at a member boundary is read to its end by the loader's epoch
// and said, as `run` says it.
TEST_F(LoaderCli, BenchIoSaysWhichShardEndsWithoutTheEndMarker) {
  const std::string cut = testing::copy_without_end_marker(good_.front(), dir_ + "/cut.tar");
  const std::string list = dir_ + "/list.txt";
  std::ofstream(list) << good_[1] << "\n" << cut << "\n";
  const CommandResult r = run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                                      " bench io tiny --readers 1 --seconds 20 --set data.shards=" + list +
                                      " --out " + dir_ + "/io.json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const nlohmann::json result = nlohmann::json::parse(read_whole_file(dir_ + "/io.json"));
  const nlohmann::json& loader = result.at("by_threads").at(0).at("loader");
  EXPECT_EQ(loader.at("shards_cut_short"), 1) << loader;
  EXPECT_EQ(loader.at("shards_without_samples"), 0) << loader;
  bool warned = false;
  for (const auto& w : result.at("warnings"))
    warned = warned || (w.get<std::string>().find("1 shard(s) end without the tar end-of-archive marker") !=
                            std::string::npos &&
                        w.get<std::string>().find(cut) != std::string::npos);
  EXPECT_TRUE(warned) << result.at("warnings").dump();
}

// A member name is the tar's to choose: a newline or an escape in it is
// written as \xNN, and the error stays one line.
TEST_F(LoaderCli, ControlCharactersInAMemberNameStayOnTheErrorsLine) {
  const std::string path = dir_ + "/names.tar";
  std::string tokens(160, '\1');
  testing::write_file(path, testing::make_tar({{"s0.u16", tokens}, {"evil\nline\x1b[31m.u16", "abc"}, {"s1.u16", tokens}},
                                     testing::TarFormat::kPax));
  const CommandResult r = run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) +
                                      " run tiny --steps 6 --set data.readers=1 --set data.shards=" + path +
                                      " --set checkpoint.every_steps=0 --out " + dir_ + "/r.json");
  expect_one_line_naming(r, {path, "evil\\x0aline\\x1b[31m"});
  const CommandResult verify =
      run_command(std::string(TRAINBENCH_BINARY) + " shards verify " + path + " --field u16");
  EXPECT_EQ(verify.exit_code, 2) << verify.out << verify.err;
  EXPECT_EQ(verify.out.find('\x1b'), std::string::npos) << verify.out;
  EXPECT_NE(verify.out.find("evil\\x0aline"), std::string::npos) << verify.out;
}

}  // namespace
}  // namespace trainbench
