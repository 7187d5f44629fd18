// CheckpointDirLock: one run per checkpoint folder, and a folder whose
// filesystem has no flock said to be unlocked rather than silently so.
#include <gtest/gtest.h>

#include <unistd.h>  // getpid

#include <cerrno>   // ENOLCK
#include <cstring>     // std::strerror
#include <filesystem>  // the unused folder
#include <fstream>     // a file that makes it used
#include <string>

#include "checkpoint/checkpoint_files.h"  // CheckpointError
#include "checkpoint/dir_lock.h"
#include "tests/support/failing_syscalls.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CheckpointDirLock, ASecondHolderIsRefusedWithTheHolderAndTheWayOut) {
  testing::TempDir dir("trainbench_lock");
  CheckpointDirLock first;
  first.acquire(dir.path());
  EXPECT_TRUE(first.held());
  EXPECT_EQ(first.unlocked_reason(), "");
  CheckpointDirLock second;  // its own open file: flock refuses it as another process
  try {
    second.acquire(dir.path());
    FAIL() << "expected a CheckpointError";
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(contains(message, "checkpoint.dir " + dir.path() + " is in use by another trainbench run (pid " +
                                      std::to_string(::getpid()) + " on "))
        << message;
    EXPECT_TRUE(contains(message, "remove " + dir.file(kCheckpointLockName) + ")")) << message;
  }
  EXPECT_FALSE(second.held());
  first.release();
  second.acquire(dir.path());
  EXPECT_TRUE(second.held()) << "free once the first lets go";
}

TEST(CheckpointDirLock, AFilesystemWithoutFlockRunsUnlockedAndSaysSo) {
  testing::TempDir dir("trainbench_lock");
  CheckpointDirLock lock;
  {
    testing::FailingFlock no_locks(ENOLCK);
    lock.acquire(dir.path());
  }
  EXPECT_FALSE(lock.held());
  EXPECT_EQ(lock.unlocked_reason(), "checkpoint.dir " + dir.path() + " is not locked against a second run (flock " +
                                        dir.file(kCheckpointLockName) + ": " + std::strerror(ENOLCK) +
                                        "): give each run its own checkpoint.dir");
  lock.acquire(dir.path());
  EXPECT_TRUE(lock.held());
  EXPECT_EQ(lock.unlocked_reason(), "") << "a later acquire that locks clears it";
}

// A run that made checkpoint.dir and failed before writing there removes
// the folder with its lock file; a run refused the lock removes nothing (two
// runs that both found the folder absent: the refused one removed the
// holder's lock file and folder); a folder holding anything else stays.
TEST(CheckpointDirLock, OnlyTheHolderRemovesAnUnusedFolder) {
  testing::TempDir parent("trainbench_lock");
  const std::string folder = parent.file("ck");
  std::filesystem::create_directory(folder);
  CheckpointDirLock holder, refused;
  holder.acquire(folder);
  EXPECT_THROW(refused.acquire(folder), CheckpointError);
  refused.release_removing_unused_folder();
  EXPECT_TRUE(std::filesystem::exists(folder + "/" + kCheckpointLockName)) << "the holder's lock file stays";
  holder.release_removing_unused_folder();
  EXPECT_FALSE(std::filesystem::exists(folder)) << "the holder's unused folder goes";

  std::filesystem::create_directory(folder);
  holder.acquire(folder);
  std::ofstream(folder + "/step_4.tmp") << "x";
  holder.release_removing_unused_folder();
  EXPECT_TRUE(std::filesystem::exists(folder + "/step_4.tmp")) << "a folder in use stays";
  EXPECT_FALSE(holder.held());
  CheckpointDirLock never_acquired;
  std::filesystem::remove(folder + "/step_4.tmp");
  never_acquired.release_removing_unused_folder();
  EXPECT_TRUE(std::filesystem::exists(folder)) << "no acquire, nothing removed";
}

// The folder gone when the lock is taken (made for this run, then removed by
// another run that made it too and failed, lock file and all): made again
// and locked, where the run went on unlocked, "cannot open ... No such file
// or directory". Here it is removed before the acquire.
TEST(CheckpointDirLock, AFolderGoneWhenTheLockIsTakenIsMadeAgainAndLocked) {
  testing::TempDir parent("trainbench_lock");
  const std::string folder = parent.file("ck");
  std::filesystem::create_directory(folder);
  std::filesystem::remove(folder);
  CheckpointDirLock lock;
  lock.acquire(folder);
  EXPECT_TRUE(lock.held()) << lock.unlocked_reason();
  EXPECT_EQ(lock.unlocked_reason(), "");
  EXPECT_TRUE(std::filesystem::exists(folder + "/" + kCheckpointLockName));
}

}  // namespace
}  // namespace trainbench
