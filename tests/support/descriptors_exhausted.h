// Every file descriptor taken, for one scope: the soft limit (ulimit -n)
// lowered to just above the descriptors open now and every free number below
// it filled with /dev/null, so the next open() fails with EMFILE whatever the
// process inherited. The destructor closes the fillers and restores the limit.
#pragma once

#include <fcntl.h>         // open
#include <sys/resource.h>  // getrlimit, setrlimit: RLIMIT_NOFILE
#include <unistd.h>        // close

#include <algorithm>   // std::max
#include <filesystem>  // /proc/self/fd
#include <string>
#include <vector>

namespace trainbench::testing {

class DescriptorsExhausted {
 public:
  DescriptorsExhausted() {
    if (::getrlimit(RLIMIT_NOFILE, &before_) != 0) return;
    int highest = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
      highest = std::max(highest, std::stoi(entry.path().filename().string()));
    struct rlimit lowered = before_;
    lowered.rlim_cur = static_cast<rlim_t>(highest) + 2;
    if (::setrlimit(RLIMIT_NOFILE, &lowered) != 0) return;
    lowered_ = true;
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers_.push_back(fd);
  }
  ~DescriptorsExhausted() {
    for (const int fd : fillers_) ::close(fd);
    if (lowered_) ::setrlimit(RLIMIT_NOFILE, &before_);
  }
  DescriptorsExhausted(const DescriptorsExhausted&) = delete;
  DescriptorsExhausted& operator=(const DescriptorsExhausted&) = delete;

  // False when the limit could not be lowered: the test cannot run.
  bool exhausted() const { return lowered_; }

 private:
  struct rlimit before_ {};
  bool lowered_ = false;
  std::vector<int> fillers_;
};

}  // namespace trainbench::testing
