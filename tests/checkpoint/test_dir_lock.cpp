// CheckpointDirLock: one run per checkpoint folder, and a folder whose
// filesystem has no flock said to be unlocked rather than silently so.
#include <gtest/gtest.h>

#include <unistd.h>  // getpid

#include <cerrno>   // ENOLCK
#include <cstring>  // std::strerror
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

}  // namespace
}  // namespace trainbench
