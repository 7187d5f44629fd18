// write_file_atomically: replaces whole files, and a failure leaves the old
// file and no temporary behind.
#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"
#include <sys/stat.h>  // mkdir

#include <dirent.h>
#include <cerrno>  // EIO
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

}  // namespace
}  // namespace trainbench
