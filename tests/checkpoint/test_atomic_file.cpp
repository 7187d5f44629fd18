// write_file_atomically: replaces whole files, and a failure leaves the old
// file and no temporary behind.
#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"
#include <sys/stat.h>  // mkdir

#include <dirent.h>
#include <atomic>  // the writers' failures
#include <cerrno>  // EIO
#include <mutex>
#include <thread>  // two writers of one process ID
#include <fstream>
#include <sstream>
#include <string>

#include "checkpoint/atomic_file.h"
#include "tests/support/failing_syscalls.h"

namespace trainbench {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int count_entries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  int n = 0;
  while (dirent* e = readdir(d))
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  closedir(d);
  return n;
}

class AtomicFile : public ::testing::Test {
 protected:
  testing::TempDir temp_{"trainbench_atomic"};
  const std::string dir_ = temp_.path();
};

TEST_F(AtomicFile, WritesAndReplacesTheWholeFile) {
  const std::string path = dir_ + "/result.json";
  write_file_atomically(path, "first version, longer than the second");
  EXPECT_EQ(read_file(path), "first version, longer than the second");
  write_file_atomically(path, "second");
  EXPECT_EQ(read_file(path), "second");
  EXPECT_EQ(count_entries(dir_), 1) << "no temporary file left behind";
}

TEST_F(AtomicFile, FailureNamesThePathAndLeavesNothingBehind) {
  const std::string path = dir_ + "/keep.json";
  write_file_atomically(path, "precious");
  // A missing directory fails at creation even for root (who ignores permissions).
  const std::string unreachable = dir_ + "/missing/sub.json";
  try {
    write_file_atomically(unreachable, "x");
    FAIL() << "expected an AtomicWriteError";
  } catch (const AtomicWriteError& e) {
    EXPECT_NE(std::string(e.what()).find(unreachable), std::string::npos) << e.what();
    EXPECT_FALSE(e.replaced);
  }
  EXPECT_EQ(read_file(path), "precious");
  EXPECT_EQ(count_entries(dir_), 1);
}

TEST_F(AtomicFile, RenameOntoADirectoryFailsAndRemovesTheTemporary) {
  const std::string target = dir_ + "/is_a_dir";
  mkdir(target.c_str(), 0755);
  EXPECT_THROW(write_file_atomically(target, "data"), AtomicWriteError);
  EXPECT_EQ(count_entries(dir_), 1) << "only the directory itself remains";
}

// The folder's fsync comes after the rename: its failure must say the file
// was replaced already, or a caller would undo a rename it thinks undone.
TEST_F(AtomicFile, AFolderFsyncFailureSaysTheFileWasReplaced) {
  const std::string path = dir_ + "/pointer";
  write_file_atomically(path, "old");
  testing::FailingDirectoryFsync fault(EIO, [&](const std::string& folder) { return folder == dir_; });
  try {
    write_file_atomically(path, "new");
    FAIL() << "expected an AtomicWriteError";
  } catch (const AtomicWriteError& e) {
    EXPECT_TRUE(e.replaced);
    EXPECT_NE(std::string(e.what()).find("cannot fsync directory " + dir_), std::string::npos) << e.what();
  }
  EXPECT_EQ(fault.failed(), 1);
  EXPECT_EQ(read_file(path), "new");
  EXPECT_EQ(count_entries(dir_), 1) << "no temporary file left behind";
}

// Two writers of one process ID writing one path at once — two containers'
// PID 1 on a shared folder, two hosts, here two threads — each replace it
// whole. The temporary was PATH.tmp.PID, opened with O_TRUNC: both wrote
// into one file, a short text over a long one's tail was renamed into
// place (a broken JSON), and the other's rename found nothing (ENOENT).
TEST_F(AtomicFile, WritersOfOneProcessIdReplaceTheFileWholeAtOnce) {
  const std::string path = dir_ + "/result.json";
  const std::string long_text(64 << 10, 'L');
  const std::string short_text = "short";
  std::atomic<int> failures{0};
  std::string failure;
  std::mutex failure_mutex;
  auto writer = [&](const std::string& text) {
    for (int i = 0; i < 100; ++i) {
      try {
        write_file_atomically(path, text);
      } catch (const AtomicWriteError& e) {
        if (failures++ == 0) {
          std::lock_guard<std::mutex> guard(failure_mutex);
          failure = e.what();
        }
      }
      const std::string now = read_file(path);
      if (now != long_text && now != short_text && failures++ == 0) {
        std::lock_guard<std::mutex> guard(failure_mutex);
        failure = "a file of " + std::to_string(now.size()) + " bytes, neither text";
      }
    }
  };
  std::thread long_writer(writer, long_text), short_writer(writer, short_text);
  long_writer.join();
  short_writer.join();
  EXPECT_EQ(failures.load(), 0) << "first: " << failure;
  EXPECT_EQ(count_entries(dir_), 1) << "no temporary file left behind";
}

// The temporary is made as open(0644) makes a file, under the umask (mkostemp
// makes it 0600): a result stays readable by whom it was.
TEST_F(AtomicFile, TheFileHasTheModeOfAFileMadeUnderTheUmask) {
  const std::string path = dir_ + "/result.json";
  const mode_t before = ::umask(027);
  write_file_atomically(path, "x");
  ::umask(before);
  struct stat status {};
  ASSERT_EQ(::stat(path.c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0640u);
}

}  // namespace
}  // namespace trainbench
