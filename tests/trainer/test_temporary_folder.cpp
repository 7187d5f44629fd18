// Temporary folders of a process killed outright (SIGKILL: no handler
// runs) are removed by the next command that makes one of the same kind;
// a live process's folder, and folders without an owner lock (an older
// trainbench's), are left alone.
#include <signal.h>    // kill
#include <stdlib.h>    // setenv
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // fork, pipe, pause

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"
#include "trainer/interrupt_cleanup.h"  // make_removed_on_interrupt: the folders a signal removes
#include "trainer/temporary_folder.h"

namespace trainbench {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "trainbench-test-owner";

// A child process makes a folder, tells its path, then either exits at
// once without removing it (a killed run) or waits to be killed (a live one).
struct Child {
  pid_t pid = -1;
  std::string folder;
  bool alive = false;
  void kill_now() {
    if (!alive) return;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    alive = false;
  }
  // A failed assertion must not leave a paused child holding CTest's pipe.
  ~Child() { kill_now(); }
};

void make_folder_in_child(bool stay_alive, Child* out) {
  int fds[2];
  if (pipe(fds) != 0) return;
  Child& child = *out;
  child.pid = fork();
  if (child.pid == 0) {
    close(fds[0]);
    const std::string folder = make_temporary_directory(kPrefix);
    (void)!write(fds[1], folder.data(), folder.size());
    close(fds[1]);
    if (stay_alive)
      for (;;) pause();
    _exit(0);  // no destructors, no cleanup: as SIGKILL would leave it
  }
  close(fds[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) child.folder.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  if (stay_alive)
    child.alive = true;
  else
    waitpid(child.pid, nullptr, 0);
}

class TemporaryFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = getenv("TMPDIR");
    if (old != nullptr) old_tmpdir_ = old;
    setenv("TMPDIR", temp_.path().c_str(), 1);
  }
  void TearDown() override {
    if (old_tmpdir_.empty())
      unsetenv("TMPDIR");
    else
      setenv("TMPDIR", old_tmpdir_.c_str(), 1);
  }
  testing::TempDir temp_{"trainbench_tmpfolder"};
  std::string old_tmpdir_;
};

TEST_F(TemporaryFolder, TheFoldersOfADeadOwnerGoThoseOfALiveOneStay) {
  // The live one first: making a folder sweeps, and would take the dead one's.
  Child live, dead;
  make_folder_in_child(true, &live);
  make_folder_in_child(false, &dead);
  ASSERT_TRUE(fs::is_directory(dead.folder)) << dead.folder;
  ASSERT_TRUE(fs::is_directory(live.folder)) << live.folder;
  EXPECT_TRUE(fs::exists(dead.folder + "/" + kOwnerLockName));
  // Neither an older trainbench's folder (no lock file) nor other names.
  const std::string legacy = temp_.file(std::string(kPrefix) + "-abcdef");
  const std::string other = temp_.file(std::string(kPrefix) + "-abcdefg");
  for (const std::string& folder : {legacy, other}) {
    fs::create_directories(folder);
    std::ofstream(folder + "/" + kOwnerLockName) << "";
  }
  fs::remove(legacy + "/" + kOwnerLockName);

  EXPECT_EQ(remove_abandoned_folders(temp_.path(), kPrefix), 1);
  EXPECT_FALSE(fs::exists(dead.folder));
  EXPECT_TRUE(fs::exists(live.folder)) << "its owner still runs";
  EXPECT_TRUE(fs::exists(legacy));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_EQ(remove_abandoned_folders(temp_.path(), "trainbench-test"), 0) << "another prefix's folders";

  // Once the live one is killed outright, the next folder made sweeps it.
  live.kill_now();
  const std::string next = make_temporary_directory(kPrefix);
  EXPECT_FALSE(fs::exists(live.folder));
  EXPECT_TRUE(fs::exists(next + "/" + kOwnerLockName));
  EXPECT_EQ(remove_abandoned_folders(temp_.path(), kPrefix), 0) << "this process holds its own";
  EXPECT_TRUE(fs::exists(next));
}

// SIGTERM's cleanup renames a folder to NAME.interrupted before removing
// it, and a sweeper to NAME.abandoned-PID: a process killed outright in
// between leaves the renamed folder, its lock file inside and unheld.
TEST_F(TemporaryFolder, RenamedFoldersOfADeadOwnerGoToo) {
  Child first, second;
  make_folder_in_child(false, &first);
  fs::rename(first.folder, first.folder + ".interrupted");
  make_folder_in_child(false, &second);  // its own sweep would take the first
  fs::rename(second.folder, second.folder + ".abandoned-12345");
  const std::string not_ours = temp_.file(std::string(kPrefix) + "-abcdef.other");
  fs::create_directories(not_ours);
  std::ofstream(not_ours + "/" + kOwnerLockName) << "";
  // The first went with the second's sweep, or goes now.
  remove_abandoned_folders(temp_.path(), kPrefix);
  EXPECT_FALSE(fs::exists(first.folder + ".interrupted"));
  EXPECT_FALSE(fs::exists(second.folder + ".abandoned-12345"));
  EXPECT_TRUE(fs::exists(not_ours)) << "another suffix is not a name trainbench gives";
  for (const fs::directory_entry& entry : fs::directory_iterator(temp_.path()))
    EXPECT_EQ(entry.path(), not_ours) << "left: " << entry.path();
}

// A folder with files in it, some in a subfolder, besides its lock file.
void fill(const std::string& folder) {
  fs::create_directories(folder + "/sub");
  for (int i = 0; i < 40; ++i) std::ofstream(folder + "/f" + std::to_string(i)) << i;
  std::ofstream(folder + "/sub/g") << "g";
}

// Its lock file goes last, whatever the directory's order: until then a
// process killed part-way leaves a folder the sweep recognises.
TEST_F(TemporaryFolder, TheLockFileGoesLast) {
  const std::string folder = make_temporary_directory(kPrefix);
  fill(folder);
  std::vector<std::string> order;
  remove_temporary_folder(folder, [&](const fs::path& entry) {
    order.push_back(entry.filename().string());
    EXPECT_TRUE(fs::exists(folder + "/" + kOwnerLockName)) << "the lock file went before " << entry;
  });
  ASSERT_EQ(order.size(), 42u) << "40 files, the subfolder, the lock file";
  EXPECT_EQ(order.back(), kOwnerLockName);
  EXPECT_FALSE(fs::exists(folder));
}

// A removal killed outright part-way (SIGKILL: the OOM killer, Slurm's
// kill after its grace period) — by its owner at the end of a run, by the
// signal's cleanup, or by another command's sweep — leaves a folder the
// next sweep removes. Killed at the first entry, half-way, and at the lock
// file itself.
TEST_F(TemporaryFolder, AFolderWhoseRemovalWasKilledIsSweptLater) {
  for (const int killed_at : {0, 20, 41}) {
    SCOPED_TRACE("killed before entry " + std::to_string(killed_at));
    Child child;
    make_folder_in_child(false, &child);
    ASSERT_TRUE(fs::is_directory(child.folder));
    fill(child.folder);
    const pid_t remover = fork();
    if (remover == 0) {
      int seen = 0;
      remove_temporary_folder(child.folder, [&](const fs::path&) {
        if (seen++ == killed_at) raise(SIGKILL);
      });
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(remover, &status, 0), remover);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the remover finished unkilled";
    ASSERT_TRUE(fs::exists(child.folder)) << "killed part-way, it left the folder";
    EXPECT_EQ(remove_abandoned_folders(temp_.path(), kPrefix), 1);
    EXPECT_FALSE(fs::exists(child.folder)) << "the folder stays for good";
  }
}

// The folders a signal's cleanup removes are those still there: each
// checkpoint's step_N.tmp stayed listed after its commit renamed it, one
// more a checkpoint for the whole run (30 KB per 500), all looked at
// within the cleanup's bound, the one being written last.
TEST_F(TemporaryFolder, FoldersGoneSinceLeaveTheInterruptList) {
  make_removed_on_interrupt([]() { return std::string(); });  // the earlier tests' folders, gone, leave first
  const size_t before = folders_listed_for_interrupt();
  std::vector<std::string> made;
  for (int i = 0; i < 3; ++i)
    made.push_back(make_removed_on_interrupt([&]() {
      const std::string folder = temp_.file("step_" + std::to_string(i) + ".tmp");
      std::filesystem::create_directory(folder);
      return folder;
    }));
  EXPECT_EQ(folders_listed_for_interrupt(), before + 3);
  std::filesystem::rename(made[0], temp_.file("step_0"));  // committed
  std::filesystem::remove(made[1]);                        // given up
  EXPECT_EQ(make_removed_on_interrupt([]() { return std::string(); }), "");
  EXPECT_EQ(folders_listed_for_interrupt(), before + 1) << "the folder still there stays listed";
  std::filesystem::remove(made[2]);
}

// With a parent given (checkpoint.dir, --dir: perhaps a shared filesystem
// whose flock is per node) nothing is swept and no lock file is made.
TEST_F(TemporaryFolder, AGivenParentIsNotSwept) {
  const std::string parent = temp_.file("shared");
  fs::create_directories(parent);
  const std::string made = make_temporary_directory(kPrefix, parent);
  EXPECT_FALSE(fs::exists(made + "/" + kOwnerLockName));
  EXPECT_TRUE(fs::is_empty(made));
}

// An empty TMPDIR is unset (mktemp, Python's tempfile): the folder goes
// under /tmp. libstdc++ took "" for the folder, and every default run failed
// with "the temporary directory (/tmp) is unusable" (exit 3).
TEST_F(TemporaryFolder, AnEmptyTmpdirIsTheSystemsTmp) {
  setenv("TMPDIR", "", 1);
  std::string made;
  ASSERT_NO_THROW(made = make_temporary_directory("trainbench-test-empty-tmpdir"));
  EXPECT_EQ(fs::path(made).parent_path(), fs::path("/tmp")) << made;
  EXPECT_TRUE(fs::is_directory(made));
  remove_temporary_folder(made);
}

}  // namespace
}  // namespace trainbench
