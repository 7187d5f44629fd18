// LD_PRELOAD into a real trainbench process: what a loaded host does now
// and then by chance, every time. OpenBLAS's worker thread (started before
// main) maps its GEMM buffer late, after the run's address-space check, and
// just before take_blas_buffers maps the main thread's. The first mapping of
// 64 MiB or more by a thread other than the main one keeps running (as a
// thread the scheduler has not reached yet looks) until the main thread asks
// for one (or TRAINBENCH_TEST_LATE_WORKER_MS have passed, 1000 by default),
// and the main thread's waits until it is done. Each is an anonymous mmap,
// which libopenblas imports from libc.
#include <dlfcn.h>     // dlsym(RTLD_NEXT)
#include <sched.h>     // sched_yield
#include <sys/mman.h>  // mmap
#include <unistd.h>    // getpid, gettid

#include <atomic>
#include <chrono>
#include <cstdlib>  // getenv

namespace {

constexpr size_t kBufferBytes = size_t{64} << 20;

std::atomic<bool> worker_claimed{false};  // the late mapping is taken
std::atomic<bool> main_asked{false};
std::atomic<bool> worker_done{false};

using MmapFunction = void* (*)(void*, size_t, int, int, int, off_t);

void spin_until(const std::atomic<bool>& flag) {
  const char* set = std::getenv("TRAINBENCH_TEST_LATE_WORKER_MS");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(set ? std::atoll(set) : 1000);
  while (!flag.load() && std::chrono::steady_clock::now() < deadline) ::sched_yield();
}

}  // namespace

extern "C" void* mmap(void* address, size_t length, int protection, int flags, int fd, off_t offset) {
  static const auto libc_mmap = reinterpret_cast<MmapFunction>(::dlsym(RTLD_NEXT, "mmap"));
  if (length < kBufferBytes || (flags & MAP_ANONYMOUS) == 0)
    return libc_mmap(address, length, protection, flags, fd, offset);
  if (::gettid() == ::getpid()) {
    main_asked.store(true);
    if (worker_claimed.load()) spin_until(worker_done);
    return libc_mmap(address, length, protection, flags, fd, offset);
  }
  if (worker_claimed.exchange(true)) return libc_mmap(address, length, protection, flags, fd, offset);
  spin_until(main_asked);
  void* mapped = libc_mmap(address, length, protection, flags, fd, offset);
  worker_done.store(true);
  return mapped;
}
