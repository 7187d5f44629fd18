// `trainbench bench io --write`: the real CLI persists a small checkpoint
// beside a plain sequential write and reports both; a bad folder is a user
// error with one line, and so is an option of the read bench given to --write
// (or the reverse).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>  // std::pair
#include <chrono>
#include <thread>   // sleep_for: the hook's wait

#include <nlohmann/json.hpp>

#include "checkpoint/write_bench.h"  // write_bench_footprint
#include "tests/support/mounted_filesystem.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

using testing::run_command;

TEST(BenchIoWrite, ReportsPersistAndPlainWriteAndTheirRatio) {
  testing::TempDir temp{"trainbench_bench_write"};
  const std::string json = temp.file("write.json");
  const testing::CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " bench io --write --bytes 4M --repeats 2 --dir " +
                                               temp.path() + " --out " + json);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checkpoint persist ="), std::string::npos) << r.out;
  std::ifstream in(json);
  const nlohmann::json result = nlohmann::json::parse(in);
  EXPECT_EQ(result["schema"], "trainbench.bench_io_write/v1");
  EXPECT_NE(result.value("command", "").find(" bench io --write --bytes 4M --repeats 2 --dir "), std::string::npos)
      << result.dump();
  EXPECT_GE(result["bytes"].get<int64_t>(), 4 << 20);
  EXPECT_GT(result["checkpoint_persist"]["gbs"].get<double>(), 0);
  EXPECT_GT(result["plain_write"]["gbs"].get<double>(), 0);
  EXPECT_GT(result["plain_write_from_state"]["gbs"].get<double>(), 0);
  EXPECT_EQ(result["checkpoint_persist"]["gbs_each"].size(), 2u);
  EXPECT_NEAR(result["ratio"].get<double>(),
              result["checkpoint_persist"]["gbs"].get<double>() / result["plain_write"]["gbs"].get<double>(), 1e-9);
  EXPECT_EQ(result["files"].size(), 2u) << "two writers by default";
  // Nothing left but the JSON: the bench's folder is removed.
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(temp.path())) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "write.json");
  }
  EXPECT_EQ(entries, 1);
}

// More writers than the checkpoint has sections: a file holds whole
// sections, so the extra writers have nothing to write. The report said
// "in 1024 file(s)" while 4 were written.
TEST(BenchIoWrite, MoreFilesThanSectionsSaysHowManyWereWritten) {
  testing::TempDir temp{"trainbench_bench_write_files"};
  const std::string json = temp.file("write.json");
  const testing::CommandResult r =
      run_command(std::string(TRAINBENCH_BINARY) + " bench io --write --bytes 1M --files 64 --repeats 1 --buffered --dir " +
                  temp.path() + " --out " + json);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(json);
  const nlohmann::json result = nlohmann::json::parse(in);
  const size_t written = result["files"].size();
  ASSERT_LT(written, 64u);
  EXPECT_EQ(result["files_asked"], 64);
  EXPECT_NE(r.out.find(" in " + std::to_string(written) + " file(s) (of the 64 asked: a file holds whole sections)"),
            std::string::npos)
      << r.out;
}

TEST(BenchIoWrite, AnUnwritableFolderIsAUserErrorInOneLine) {
  testing::TempDir temp{"trainbench_bench_write"};
  { std::ofstream(temp.file("a_file")) << "x"; }
  const testing::CommandResult r =
      run_command(std::string(TRAINBENCH_BINARY) + " bench io --write --bytes 4M --dir " + temp.file("a_file") + "/sub");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--dir"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(temp.file("a_file")), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
}

// A folder on a full disk is the machine's (exit 3), as checkpoint.dir's
// is; under the system's temporary directory it is named as the user mends
// it, TMPDIR (it said "--dir: checkpoint.dir ...", exit 2, with no --dir given).
TEST(BenchIoWrite, AFullDiskOrTemporaryDirectoryIsTheEnvironmentsInOneLine) {
  testing::TempDir temp{"trainbench_bench_write"};
  const testing::MountedFilesystem full(temp.file("full"), "tmpfs", "size=64k");
  if (!full.mounted()) GTEST_SKIP() << full.why_not();
  { std::ofstream(full.path() + "/filler") << std::string(64 << 10, 'x'); }
  const testing::CommandResult given = run_command(std::string(TRAINBENCH_BINARY) +
                                                   " bench io --write --bytes 1M --repeats 1 --dir " + full.path());
  EXPECT_EQ(given.exit_code, 3) << given.out << given.err;
  EXPECT_EQ(given.err.rfind("trainbench: --dir " + full.path() + "/trainbench-bench-write-", 0), 0u) << given.err;
  EXPECT_NE(given.err.find("No space left on device"), std::string::npos) << given.err;
  EXPECT_EQ(given.err.find('\n'), given.err.size() - 1) << "one line: " << given.err;
  const testing::CommandResult temporary = run_command("env TMPDIR=" + full.path() + " " + TRAINBENCH_BINARY +
                                                       " bench io --write --bytes 1M --repeats 1");
  EXPECT_EQ(temporary.exit_code, 3) << temporary.out << temporary.err;
  EXPECT_EQ(temporary.err.rfind("trainbench: the temporary directory (TMPDIR=" + full.path() + "): the bench's folder ",
                                0),
            0u)
      << temporary.err;
  EXPECT_NE(temporary.err.find("; set TMPDIR to a folder with room, or give --dir"), std::string::npos)
      << temporary.err;
  std::filesystem::remove(full.path() + "/filler");
  EXPECT_TRUE(std::filesystem::is_empty(full.path())) << "the bench's folders are removed";
}

// A checkpoint image and a disk too small for what the bench asks for are
// refused before anything is allocated or written: exit 3, one line with
// needed vs available, nothing left in --dir.
TEST(BenchIoWrite, MoreThanTheMemoryOrTheDiskExits3BeforeStarting) {
  testing::TempDir temp{"trainbench_bench_write"};
  const std::string command = std::string(TRAINBENCH_BINARY) + " bench io --write --dir " + temp.path();
  const testing::CommandResult memory = run_command(command + " --bytes 1024T");
  EXPECT_EQ(memory.exit_code, 3) << memory.out << memory.err;
  EXPECT_NE(memory.err.find("host memory"), std::string::npos) << memory.err;
  EXPECT_NE(memory.err.find("available"), std::string::npos) << memory.err;
  EXPECT_EQ(memory.err.find('\n'), memory.err.size() - 1) << "one line: " << memory.err;
  EXPECT_TRUE(std::filesystem::is_empty(temp.path())) << "the bench's folder is removed";

  const testing::MountedFilesystem disk(temp.file("disk"), "tmpfs", "size=24m");
  if (!disk.mounted()) GTEST_SKIP() << disk.why_not();
  const std::string on_disk = std::string(TRAINBENCH_BINARY) + " bench io --write --dir " + disk.path();
  const testing::CommandResult full = run_command(on_disk + " --bytes 32M --repeats 1");
  EXPECT_EQ(full.exit_code, 3) << full.out << full.err;
  EXPECT_NE(full.err.find("needs 32.0"), std::string::npos) << full.err;
  EXPECT_NE(full.err.find("free in " + disk.path() + " ("), std::string::npos) << full.err;
  EXPECT_EQ(full.err.find('\n'), full.err.size() - 1) << "one line: " << full.err;
  EXPECT_TRUE(std::filesystem::is_empty(disk.path()));
  // A disk that holds the image of --bytes 1M exactly (its 4 sections,
  // 1060864 bytes at 4096-byte alignment) has no room for the rank record
  // beside it: refused before the write, where the write failed at the record.
  const testing::MountedFilesystem exact(temp.file("exact"), "tmpfs", "size=1060864");
  ASSERT_TRUE(exact.mounted()) << exact.why_not();
  const testing::CommandResult no_room = run_command(std::string(TRAINBENCH_BINARY) + " bench io --write --dir " +
                                                     exact.path() + " --bytes 1M --repeats 1");
  EXPECT_EQ(no_room.exit_code, 3) << no_room.out << no_room.err;
  EXPECT_NE(no_room.err.find("free in " + exact.path() + " ("), std::string::npos) << no_room.err;
  EXPECT_TRUE(std::filesystem::is_empty(exact.path()));
  // Repeats never hold two writes' files at once: 16M three times fits in
  // 24M (twice the bytes were asked for from the second repeat on).
  const testing::CommandResult repeated = run_command(on_disk + " --bytes 16M --repeats 3");
  EXPECT_EQ(repeated.exit_code, 0) << repeated.out << repeated.err;
}

TEST(BenchIoWrite, FootprintIsTheImagePlusDdsBufferAndOneCopyOnDisk) {
  WriteBenchOptions options;
  options.bytes = 256LL << 20;
  options.repeats = 3;
  const WriteBenchFootprint three = write_bench_footprint(options);
  EXPECT_GE(three.memory_bytes, options.bytes + (64LL << 20));
  EXPECT_LT(three.memory_bytes, options.bytes + (65LL << 20));
  EXPECT_GE(three.disk_bytes, options.bytes);
  EXPECT_LT(three.disk_bytes, options.bytes + (1LL << 20));
  options.repeats = 1;
  EXPECT_EQ(write_bench_footprint(options).disk_bytes, three.disk_bytes);
}

// The ceiling's and burn-in's way: the persist alone, nothing written
// beside it, and the hook run once, after the images are filled and before
// the timed write (the ranks agree there to start together): its time is
// not the persist's.
TEST(BenchIoWrite, PersistOnlyWritesNothingElseAndRunsItsHookBeforeTheTimedWrite) {
  testing::TempDir temp{"trainbench_bench_persist_only"};
  WriteBenchOptions options;
  options.folder = temp.path();
  options.bytes = 4LL << 20;
  options.repeats = 1;
  options.persist_only = true;
  int calls = 0;
  double hook_seconds = 0;
  options.before_persist = [&] {
    ++calls;
    EXPECT_TRUE(std::filesystem::is_empty(temp.path())) << "nothing written before the hook";
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    hook_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const auto start = std::chrono::steady_clock::now();
  const WriteBenchResult result = run_write_bench(options);
  const double total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(result.persist_seconds.size(), 1u);
  // The persist and the hook, one after the other, inside the call: a
  // persist timed across the hook is at least its 0.5 s over that, however
  // fast or slow the disk (a fixed 3 s bound read a loaded disk instead).
  EXPECT_LE(result.persist_seconds[0] + hook_seconds, total_seconds + 0.01)
      << "the hook's wait was timed as the persist's";
  EXPECT_GT(result.persist_gbs, 0);
  EXPECT_TRUE(result.plain_seconds.empty());
  EXPECT_TRUE(result.plain_from_state_seconds.empty());
  EXPECT_EQ(result.plain_gbs, 0);
  EXPECT_EQ(result.ratio, 0);
  EXPECT_TRUE(std::filesystem::is_empty(temp.path())) << "the bench leaves nothing";
}

TEST(BenchIoWrite, BadSizesAreUserErrors) {
  for (const char* option : {"--block-bytes 5000", "--bytes 1K", "--files 0", "--repeats 0"}) {
    const testing::CommandResult r =
        run_command(std::string(TRAINBENCH_BINARY) + " bench io --write " + option);
    EXPECT_EQ(r.exit_code, 2) << option << ": " << r.out << r.err;
  }
  // An empty folder is no folder (it wrote into the temporary directory).
  // So for the read bench's --small-files-dir.
  for (const char* option : {"--write --dir ''", "--small-files --small-files-dir ''"}) {
    const testing::CommandResult r = run_command(std::string(TRAINBENCH_BINARY) + " bench io " + option);
    EXPECT_EQ(r.exit_code, 2) << option << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("the path is empty"), std::string::npos) << option << ": " << r.err;
  }
}

// bench io is two benches: an option of the one not run was ignored without
// a word (exit 0). Each is refused, one line naming it, before any shard or
// folder is made.
TEST(BenchIo, AnOptionOfTheOtherBenchIsAUserErrorNamingIt) {
  const std::pair<std::string, std::string> cases[] = {
      {"--write --readers 2", "bench io --write: --readers belongs to the read bench"},
      {"--write --small-files", "bench io --write: --small-files belongs to the read bench"},
      {"--write --seconds 5", "bench io --write: --seconds belongs to the read bench"},
      {"--write --against r.json", "bench io --write: --against belongs to the read bench"},
      {"--write --set data.readers=2", "bench io --write: --set belongs to the read bench"},
      {"--write tiny", "bench io --write: CONFIG 'tiny' belongs to the read bench"},
      {"--bytes 4M", "bench io: --bytes applies to --write only"},
      {"--repeats 2", "bench io: --repeats applies to --write only"},
      {"tiny --files 3", "bench io: --files applies to --write only"},
      {"--buffered", "bench io: --buffered applies to --write only"},
      {"--block-bytes 1M", "bench io: --block-bytes applies to --write only"},
      {"--dir /tmp", "bench io: --dir applies to --write only"},
      {"--small-files-dir /tmp", "bench io: --small-files-dir is where --small-files unpacks"},
  };
  for (const auto& [args, expected] : cases) {
    const testing::CommandResult r =
        run_command("timeout 60 " + std::string(TRAINBENCH_BINARY) + " bench io " + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out << r.err;
    EXPECT_EQ(r.err.rfind("trainbench: " + expected, 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": one line: " << r.err;
    EXPECT_TRUE(r.out.empty()) << args << ": nothing measured: " << r.out;
  }
}

}  // namespace
}  // namespace trainbench
