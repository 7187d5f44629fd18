// Test-only fault injection for what a real machine seldom does on demand:
// an fsync(2) of a directory that fails (EIO from a dying disk, a network
// filesystem's server gone), a filesystem without flock(2) (ENOLCK on an NFS
// mount without a lock manager), an fsync or a mkdir that never returns
// (storage that stopped responding). failing_syscalls.cpp defines fsync,
// mkdir and flock themselves, so in an executable it is linked into, the
// code under test calls them instead of libc's; every call not failed goes
// on to libc's. Built as a library of its own too (failing_syscalls_preload),
// for LD_PRELOAD into a real trainbench process, where the environment arms
// it: TRAINBENCH_TEST_HANG_FSYNC=PART (TRAINBENCH_TEST_HANG_MKDIR=PART) makes
// every fsync (mkdir) of a path containing PART hang for ever.
#pragma once

#include <functional>
#include <string>

namespace trainbench::testing {

// While alive, fsync of a directory for which `when(path)` is true fails
// with `error` (and nothing is synced). One at a time.
class FailingDirectoryFsync {
 public:
  FailingDirectoryFsync(int error, std::function<bool(const std::string& directory)> when);
  ~FailingDirectoryFsync();
  FailingDirectoryFsync(const FailingDirectoryFsync&) = delete;
  FailingDirectoryFsync& operator=(const FailingDirectoryFsync&) = delete;

  int failed() const;  // fsyncs failed so far
};

// While alive, every flock fails with `error`. One at a time.
class FailingFlock {
 public:
  explicit FailingFlock(int error);
  ~FailingFlock();
  FailingFlock(const FailingFlock&) = delete;
  FailingFlock& operator=(const FailingFlock&) = delete;
};

// The same for an fsync of a file, not a folder (ENOSPC at the fsync of a
// file just written, as a network filesystem reports a full disk). One
// FailingDirectoryFsync or FailingFileFsync at a time.
class FailingFileFsync {
 public:
  FailingFileFsync(int error, std::function<bool(const std::string& file)> when);
  ~FailingFileFsync();
  FailingFileFsync(const FailingFileFsync&) = delete;
  FailingFileFsync& operator=(const FailingFileFsync&) = delete;

 private:
  FailingDirectoryFsync directories_;  // arms the fault; fsync_files turns it to files
};

}  // namespace trainbench::testing
