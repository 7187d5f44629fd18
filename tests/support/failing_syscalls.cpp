#include "tests/support/failing_syscalls.h"

#include <dirent.h>    // opendir
#include <dlfcn.h>     // dlsym(RTLD_NEXT)
#include <sys/stat.h>  // fstat
#include <unistd.h>    // readlink, pause

#include <atomic>
#include <cerrno>
#include <climits>  // PATH_MAX
#include <cstdlib>  // getenv
#include <mutex>
#include <stdexcept>

namespace {

struct Faults {
  std::mutex lock;
  bool fsync_armed = false;
  int fsync_error = 0;
  std::function<bool(const std::string&)> fsync_when;
  std::atomic<int> fsync_failed{0};
  std::atomic<int> flock_error{0};  // 0: not armed
  bool fsync_files = false;         // armed for files (FailingFileFsync), not folders
};

Faults& faults() {
  static Faults instance;
  return instance;
}

// libc's own definition of `name`, the one this file's stands in front of.
template <typename Function>
Function libc(const char* name) {
  return reinterpret_cast<Function>(::dlsym(RTLD_NEXT, name));
}

using FsyncFunction = int (*)(int);
using FlockFunction = int (*)(int, int);
using MkdirFunction = int (*)(const char*, mode_t);
using PreadFunction = ssize_t (*)(int, void*, size_t, off_t);
using RemoveFunction = int (*)(const char*);
using UnlinkFunction = int (*)(const char*);
using OpendirFunction = DIR* (*)(const char*);

FsyncFunction libc_fsync() {
  static const FsyncFunction real = libc<FsyncFunction>("fsync");
  return real;
}

FlockFunction libc_flock() {
  static const FlockFunction real = libc<FlockFunction>("flock");
  return real;
}

MkdirFunction libc_mkdir() {
  static const MkdirFunction real = libc<MkdirFunction>("mkdir");
  return real;
}

RemoveFunction libc_remove() {
  static const RemoveFunction real = libc<RemoveFunction>("remove");
  return real;
}

UnlinkFunction libc_unlink() {
  static const UnlinkFunction real = libc<UnlinkFunction>("unlink");
  return real;
}

OpendirFunction libc_opendir() {
  static const OpendirFunction real = libc<OpendirFunction>("opendir");
  return real;
}

PreadFunction libc_pread() {
  static const PreadFunction real = libc<PreadFunction>("pread");
  return real;
}

bool is_directory(int fd) {
  struct stat status {};
  return ::fstat(fd, &status) == 0 && S_ISDIR(status.st_mode);
}

std::string path_of(int fd) {
  char path[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), path, sizeof path);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

// TRAINBENCH_TEST_HANG_FSYNC, TRAINBENCH_TEST_HANG_MKDIR,
// TRAINBENCH_TEST_HANG_FLOCK, TRAINBENCH_TEST_HANG_PREAD,
// TRAINBENCH_TEST_HANG_REMOVE, TRAINBENCH_TEST_HANG_UNLINK,
// TRAINBENCH_TEST_HANG_OPENDIR: a part of a path. An fsync of a file or
// folder, a mkdir, a flock, a pread, a remove (std::filesystem's remove_all
// removes through it), an unlink or an opendir whose path contains it never
// returns, as on storage that stopped responding; signals
// do not end it either (pause() is resumed). True when `path` contains the
// part `variable` names.
bool named_by(const char* variable, const std::string& path) {
  const char* pattern = std::getenv(variable);
  return pattern != nullptr && *pattern != '\0' && path.find(pattern) != std::string::npos;
}

[[noreturn]] void hang() {
  for (;;) ::pause();
}

}  // namespace

extern "C" int fsync(int fd) {
  if (named_by("TRAINBENCH_TEST_HANG_FSYNC", path_of(fd))) hang();
  Faults& f = faults();
  {
    std::lock_guard<std::mutex> guard(f.lock);
    if (f.fsync_armed && is_directory(fd) != f.fsync_files && f.fsync_when(path_of(fd))) {
      ++f.fsync_failed;
      errno = f.fsync_error;
      return -1;
    }
  }
  return libc_fsync()(fd);
}

extern "C" int mkdir(const char* path, mode_t mode) {
  if (named_by("TRAINBENCH_TEST_HANG_MKDIR", path)) hang();
  return libc_mkdir()(path, mode);
}

extern "C" int remove(const char* path) {
  if (named_by("TRAINBENCH_TEST_HANG_REMOVE", path)) hang();
  return libc_remove()(path);
}

extern "C" int unlink(const char* path) {
  if (named_by("TRAINBENCH_TEST_HANG_UNLINK", path)) hang();
  return libc_unlink()(path);
}

extern "C" DIR* opendir(const char* path) {
  if (named_by("TRAINBENCH_TEST_HANG_OPENDIR", path)) hang();
  return libc_opendir()(path);
}

// A checkpoint's files are read with pread (read_rank_files); off_t is 64
// bits on the 64-bit targets built, where pread64 is the same function.
extern "C" ssize_t pread(int fd, void* buffer, size_t count, off_t offset) {
  if (named_by("TRAINBENCH_TEST_HANG_PREAD", path_of(fd))) hang();
  return libc_pread()(fd, buffer, count, offset);
}

extern "C" int flock(int fd, int operation) {
  if (named_by("TRAINBENCH_TEST_HANG_FLOCK", path_of(fd))) hang();
  // TRAINBENCH_TEST_NO_FLOCK: a part of a path whose flock fails with ENOLCK,
  // as on a filesystem without locks (some NFS mounts).
  if (named_by("TRAINBENCH_TEST_NO_FLOCK", path_of(fd))) {
    errno = ENOLCK;
    return -1;
  }
  const int error = faults().flock_error;
  if (error != 0) {
    errno = error;
    return -1;
  }
  return libc_flock()(fd, operation);
}

namespace trainbench::testing {

FailingDirectoryFsync::FailingDirectoryFsync(int error, std::function<bool(const std::string&)> when) {
  if (libc_fsync() == nullptr) throw std::runtime_error("FailingDirectoryFsync: libc's fsync not found");
  Faults& f = faults();
  std::lock_guard<std::mutex> guard(f.lock);
  if (f.fsync_armed) throw std::logic_error("FailingDirectoryFsync: one at a time");
  f.fsync_armed = true;
  f.fsync_error = error;
  f.fsync_when = std::move(when);
  f.fsync_failed = 0;
}

FailingDirectoryFsync::~FailingDirectoryFsync() {
  Faults& f = faults();
  std::lock_guard<std::mutex> guard(f.lock);
  f.fsync_armed = false;
  f.fsync_when = nullptr;
}

int FailingDirectoryFsync::failed() const { return faults().fsync_failed; }

FailingFlock::FailingFlock(int error) {
  if (libc_flock() == nullptr) throw std::runtime_error("FailingFlock: libc's flock not found");
  if (error == 0) throw std::invalid_argument("FailingFlock: an errno, not 0");
  int expected = 0;
  if (!faults().flock_error.compare_exchange_strong(expected, error))
    throw std::logic_error("FailingFlock: one at a time");
}

FailingFlock::~FailingFlock() { faults().flock_error = 0; }

FailingFileFsync::FailingFileFsync(int error, std::function<bool(const std::string&)> when)
    : directories_(error, std::move(when)) {
  Faults& f = faults();
  std::lock_guard<std::mutex> guard(f.lock);
  f.fsync_files = true;
}

FailingFileFsync::~FailingFileFsync() {
  Faults& f = faults();
  std::lock_guard<std::mutex> guard(f.lock);
  f.fsync_files = false;
}

}  // namespace trainbench::testing
