// A filesystem mounted on a folder for one scope: a small tmpfs is a disk
// that fills up, a ramfs one that refuses O_DIRECT. Mounting needs root with
// CAP_SYS_ADMIN (CI has it); where it is not allowed, mounted() is false and
// why_not() says why, for the test's GTEST_SKIP.
#pragma once

#include <sys/mount.h>  // mount, umount2

#include <cerrno>
#include <cstring>  // std::strerror
#include <filesystem>
#include <string>

namespace trainbench::testing {

class MountedFilesystem {
 public:
  // Creates `path` if missing. `options`: e.g. "size=8m" for a tmpfs.
  MountedFilesystem(std::string path, const std::string& type, const std::string& options = "")
      : path_(std::move(path)) {
    std::filesystem::create_directories(path_);
    if (::mount(type.c_str(), path_.c_str(), type.c_str(), 0, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      why_not_ = "cannot mount a " + type + " on " + path_ + " (" + std::strerror(errno) +
                 "; needs root with CAP_SYS_ADMIN): this test did not run";
    }
  }
  // Lazy: a file a failed test left open does not keep the mount.
  ~MountedFilesystem() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  MountedFilesystem(const MountedFilesystem&) = delete;
  MountedFilesystem& operator=(const MountedFilesystem&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string why_not_;
};

}  // namespace trainbench::testing
