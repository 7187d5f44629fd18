// Faults a checkpoint must survive: a full disk (a 2 MiB tmpfs) and a
// SIGKILL at each phase of a checkpoint (TRAINBENCH_TEST_CRASH_AT in a child
// process). After each, the newest committed checkpoint still loads, and
// the next checkpoint commits over what the crash left.
#include <gtest/gtest.h>

#include <fcntl.h>      // open
#include <signal.h>     // SIGKILL
#include <spawn.h>      // posix_spawn
#include <sys/wait.h>   // waitpid
#include <unistd.h>     // write, close

#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "tests/checkpoint/checkpoint_test_state.h"
#include "tests/support/mounted_filesystem.h"
#include "tests/support/run_command.h"  // read_whole_file
#include "tests/support/temp_dir.h"

extern char** environ;

namespace trainbench {
namespace {

namespace fs = std::filesystem;
using testing::compare_state;
using testing::make_state;
using testing::pointers;
using testing::read_whole_file;
using testing::write_and_commit;

// The newest committed checkpoint loads and holds step `step`'s state.
void expect_latest_loads(const std::string& dir, int64_t step, int64_t scale = 1) {
  const std::string folder = resolve_checkpoint("latest", dir);
  EXPECT_EQ(folder, committed_folder(dir, step));
  const nlohmann::json manifest = read_manifest(folder);
  EXPECT_EQ(manifest["step"], step);
  EXPECT_EQ(compare_state(read_rank_files(folder, manifest, 0), step, 0, scale), "");
}

// ---- disk full, and a filesystem without O_DIRECT -------------------------

// A filesystem of `type` mounted on a fresh folder for one test; the test
// skips, saying why, where mounting is not allowed.
class MountedFilesystem : public ::testing::Test {
 protected:
  void mount_or_skip(const char* type, const char* options) {
    mount_.emplace(dir_, type, options);
    if (!mount_->mounted()) GTEST_SKIP() << mount_->why_not();
  }
  testing::TempDir temp_{"trainbench_mounted"};
  const std::string dir_ = temp_.path() + "/mounted";
  std::optional<testing::MountedFilesystem> mount_;  // unmounted before temp_ is removed
};

class DiskFull : public MountedFilesystem {
 protected:
  void SetUp() override { mount_or_skip("tmpfs", "size=2m"); }
};

// ramfs refuses O_DIRECT at open (EINVAL), as some network filesystems do.
class NoDirectIo : public MountedFilesystem {
 protected:
  void SetUp() override { mount_or_skip("ramfs", ""); }
};

TEST_F(NoDirectIo, DirectIoFallsBackToBufferedWithAWarning) {
  prepare_pending_folder(dir_, 1);
  const std::vector<StateImage> images = make_state(1, 0, 2, 4);
  const std::vector<FileRecord> records =
      write_rank_files(pending_folder(dir_, 1), 0, pointers(images), {.direct_io = true, .block_bytes = 8192});
  for (const FileRecord& record : records) {
    EXPECT_FALSE(record.direct_io);
    EXPECT_NE(record.warning.find(pending_folder(dir_, 1) + "/" + record.name), std::string::npos) << record.warning;
    EXPECT_NE(record.warning.find("O_DIRECT"), std::string::npos) << record.warning;
    std::printf("[   INFO   ] %s\n", record.warning.c_str());
  }
  CommitRequest request;
  request.dir = dir_;
  request.step = 1;
  commit_checkpoint(request);
  expect_latest_loads(dir_, 1, 4);
}

TEST_F(DiskFull, DirectIoOnTmpfsWorksOrFallsBack) {
  prepare_pending_folder(dir_, 1);
  const std::vector<StateImage> images = make_state(1, 0, 1, 4);
  const std::vector<FileRecord> records =
      write_rank_files(pending_folder(dir_, 1), 0, pointers(images), {.direct_io = true, .block_bytes = 8192});
  std::printf("[   INFO   ] tmpfs: %s\n", records[0].direct_io ? "written with O_DIRECT" : records[0].warning.c_str());
  EXPECT_EQ(records[0].direct_io, records[0].warning.empty());
}

TEST_F(DiskFull, AWriteFailsAsDiskFullRemovesItsFilesAndKeepsThePreviousCheckpoint) {
  write_and_commit(dir_, 1, 2, 2, 8);  // ~100 KiB
  prepare_pending_folder(dir_, 2);
  const std::vector<StateImage> images = make_state(2, 0, 2, 400);  // ~2.8 MB: cannot fit
  for (bool direct_io : {true, false}) {
    try {
      write_rank_files(pending_folder(dir_, 2), 0, pointers(images), {.direct_io = direct_io, .block_bytes = 1 << 16});
      FAIL() << "expected a CheckpointWriteError";
    } catch (const CheckpointWriteError& e) {
      const std::string message = e.what();
      EXPECT_TRUE(e.disk_full) << message;
      EXPECT_NE(message.find(pending_folder(dir_, 2) + "/rank_00000_"), std::string::npos) << message;
      EXPECT_NE(message.find(std::strerror(ENOSPC)), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
    EXPECT_TRUE(fs::is_empty(pending_folder(dir_, 2))) << "partial files removed (direct_io " << direct_io << ")";
  }
  abandon_pending(dir_, 2);  // checkpoint.on_full: skip
  expect_latest_loads(dir_, 1, 8);
  write_and_commit(dir_, 3, 2, 2, 8);  // the run goes on checkpointing once there is room
  expect_latest_loads(dir_, 3, 8);
}

TEST_F(DiskFull, ACommitThatCannotWriteItsManifestLeavesLatestAlone) {
  write_and_commit(dir_, 1, 2, 2, 8);
  prepare_pending_folder(dir_, 2);
  const std::vector<StateImage> images = make_state(2, 0, 2, 8);
  write_rank_files(pending_folder(dir_, 2), 0, pointers(images), {});
  // Fill what is left, so the manifest finds no room.
  const std::string filler = dir_ + "/filler";
  const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const std::vector<char> block(4096, 'x');
  while (::write(fd, block.data(), block.size()) > 0) {
  }
  ::close(fd);
  CommitRequest request;
  request.dir = dir_;
  request.step = 2;
  try {
    commit_checkpoint(request);
    FAIL() << "expected a CheckpointWriteError";
  } catch (const CheckpointWriteError& e) {
    EXPECT_TRUE(e.disk_full) << e.what();
    EXPECT_NE(std::string(e.what()).find("manifest.json"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ + "/step_2"));
  EXPECT_EQ(read_whole_file(dir_ + "/latest"), "step_1\n");
  fs::remove(filler);
  expect_latest_loads(dir_, 1, 8);
}

// ---- kill -9 at each phase ---------------------------------------------

constexpr int64_t kChildScale = 64;  // crash_child.cpp's state

// Runs checkpoint_crash_child DIR STEP with TRAINBENCH_TEST_CRASH_AT set
// (or unset when empty); returns its wait status.
int run_crash_child(const std::string& dir, int64_t step, const std::string& crash_at) {
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "TRAINBENCH_TEST_CRASH_AT=", 25) != 0) environment.push_back(*e);
  if (!crash_at.empty()) environment.push_back("TRAINBENCH_TEST_CRASH_AT=" + crash_at);
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string program = CHECKPOINT_CRASH_CHILD;
  std::string step_text = std::to_string(step);
  std::string dir_text = dir;
  char* argv[] = {program.data(), dir_text.data(), step_text.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv, envp.data()) != 0) return -1;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

bool killed_by_sigkill(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }
bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

class CrashAt : public ::testing::TestWithParam<const char*> {
 protected:
  testing::TempDir temp_{"trainbench_crash"};
  const std::string dir_ = temp_.path() + "/ckpt";
};

TEST_P(CrashAt, TheNewestCommittedCheckpointStillLoadsAndTheNextCommitSucceeds) {
  const std::string phase = GetParam();
  ASSERT_TRUE(exited_ok(run_crash_child(dir_, 1, "")));
  expect_latest_loads(dir_, 1, kChildScale);

  ASSERT_TRUE(killed_by_sigkill(run_crash_child(dir_, 2, phase + "@2"))) << "killed at " << phase;
  expect_latest_loads(dir_, 1, kChildScale);
  // What the crash left is the state of that phase.
  const std::string pending = pending_folder(dir_, 2);
  if (phase == "copy") {
    EXPECT_FALSE(fs::exists(pending));
  } else if (phase == "write") {
    const std::string first_file = pending + "/" + rank_file_name(0, 0);
    ASSERT_TRUE(fs::exists(first_file));
    const StateImage full = std::move(testing::make_state(2, 0, 2, kChildScale)[0]);
    EXPECT_LT(fs::file_size(first_file), static_cast<uintmax_t>(full.bytes())) << "killed with the file part-written";
    EXPECT_FALSE(fs::exists(pending + "/" + rank_record_name(0)));
  } else if (phase == "before_rename") {
    EXPECT_TRUE(fs::exists(pending + "/manifest.json"));
    EXPECT_FALSE(fs::exists(committed_folder(dir_, 2)));
  } else if (phase == "after_rename") {
    EXPECT_FALSE(fs::exists(pending));
    EXPECT_TRUE(fs::exists(committed_folder(dir_, 2) + "/manifest.json"));
    EXPECT_EQ(read_whole_file(dir_ + "/latest"), "step_1\n") << "the commit point is `latest`";
  }

  // The resumed run checkpoints step 2 again (over a committed step_2 after
  // after_rename), then step 3; nothing stale is left.
  ASSERT_TRUE(exited_ok(run_crash_child(dir_, 2, "")));
  expect_latest_loads(dir_, 2, kChildScale);
  ASSERT_TRUE(exited_ok(run_crash_child(dir_, 3, "")));
  expect_latest_loads(dir_, 3, kChildScale);
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_2", "step_3"}));
}

INSTANTIATE_TEST_SUITE_P(Phases, CrashAt, ::testing::Values("copy", "write", "before_rename", "after_rename"));

TEST(CrashPoint, OnlyTheNamedStepAndPhaseKill) {
  testing::TempDir temp{"trainbench_crash"};
  const std::string dir = temp.path() + "/ckpt";
  EXPECT_TRUE(exited_ok(run_crash_child(dir, 1, "write@7"))) << "another step";
  EXPECT_TRUE(exited_ok(run_crash_child(dir, 2, "no_such_phase")));
  EXPECT_TRUE(exited_ok(run_crash_child(dir, 3, "write@x"))) << "a malformed step kills nothing";
  EXPECT_TRUE(killed_by_sigkill(run_crash_child(dir, 4, "before_rename"))) << "no step: any step";
  expect_latest_loads(dir, 3, kChildScale);
}

TEST(CrashPoint, UnsetIsANoOp) {
  ASSERT_EQ(std::getenv("TRAINBENCH_TEST_CRASH_AT"), nullptr) << "the test environment sets it";
  crash_point("write", 1);
  crash_point("after_rename", 2);
}

}  // namespace
}  // namespace trainbench
