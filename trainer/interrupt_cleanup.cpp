#include "trainer/interrupt_cleanup.h"

#include <fcntl.h>   // O_CLOEXEC
#include <signal.h>  // sigaction, raise
#include <unistd.h>  // pipe2, read, write, _exit

#include <atomic>
#include <cerrno>
#include <chrono>      // the pause between removal rounds

#include <csignal>     // std::signal
#include <cstdlib>     // std::getenv, std::atol: the test hooks
#include <filesystem>  // exists, rename
#include <memory>      // std::make_shared: the abort's removal, waited for a bounded time
#include <mutex>
#include <system_error>
#include <string>
#include <thread>
#include <utility>     // std::move
#include <vector>

#include "trainer/hung_storage.h"      // run_for_at_most: the cleanup, bounded
#include "trainer/temporary_folder.h"  // remove_temporary_folder

namespace trainbench {

namespace {

// Never destroyed: a signal can arrive while the process exits (mpirun
// ends the other ranks when one fails), and the cleanup thread then ran on
// a list and a mutex the exit had already destroyed (a segfault).
std::mutex& folders_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}

std::vector<std::string>& folders() {
  static auto* list = new std::vector<std::string>;
  return *list;
}

std::vector<std::function<void()>>& actions() {  // under folders_mutex too
  static auto* list = new std::vector<std::function<void()>>;
  return *list;
}

bool exiting = false;  // under folders_mutex: main has returned its code
// An abort's cleanup has the lock, for good: a signal then ends the process
// at once instead of waiting for a lock nobody will give up (a stalled
// MPI_Abort could be ended only by SIGKILL).
std::atomic<bool> abort_has_the_lock{false};

// Under folders_mutex. The other threads go on meanwhile (a checkpoint may be
// committing into a folder), so each folder is first renamed away in one
// step, and removed again should a writer have re-created its path since.
void remove_folders_then_run_actions() {
  for (int round = 0; round < 5; ++round) {
    bool any_left = false;
    for (const std::string& folder : folders()) {
      std::error_code renamed, ignored;  // already removed, or being written: what can go, goes
      if (!std::filesystem::exists(folder, ignored)) continue;
      any_left = true;
      const std::string doomed = folder + std::string(kInterruptedSuffix);
      std::filesystem::rename(folder, doomed, renamed);
      remove_temporary_folder(renamed ? folder : doomed);  // its owner lock file last
    }
    if (!any_left) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const std::function<void()>& action : actions()) action();
}

}  // namespace

std::string make_removed_on_interrupt(const std::function<std::string()>& make) {
  const std::lock_guard<std::mutex> lock(folders_mutex());
  // Those gone since (a committed checkpoint's step_N.tmp, a scratch folder
  // removed at its scope's end) leave the list: it grew by one a checkpoint
  // for the whole run, and a signal's cleanup looked at every one, oldest
  // first, within its bound. One that cannot be looked at stays.
  std::erase_if(folders(), [](const std::string& listed) {
    std::error_code error;
    return !std::filesystem::exists(listed, error) && !error;
  });
  std::string folder = make();
  // Test hook: the pause between making the folder and listing it, so a
  // test can land a signal there (the folder stayed when it did).
  static const long delay_ms = []() {
    const char* value = std::getenv("TRAINBENCH_TEST_LISTING_DELAY_MS");
    return value != nullptr ? std::atol(value) : 0L;
  }();
  if (delay_ms > 0 && !folder.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  if (!folder.empty()) folders().push_back(folder);
  return folder;
}

size_t folders_listed_for_interrupt() {
  const std::lock_guard<std::mutex> lock(folders_mutex());
  return folders().size();
}

void run_on_interrupt(std::function<void()> action) {
  const std::lock_guard<std::mutex> lock(folders_mutex());
  actions().push_back(std::move(action));
}

// The handler only passes the signal's number down a pipe (write is
// async-signal-safe; removing a tree is not): a thread of our own does the
// work. A handler rather than a blocked mask, because the mask would not
// cover threads that libraries start before main (OpenBLAS's pool), and a
// signal delivered to one of them killed the process at once.
namespace {
int interrupt_pipe[2] = {-1, -1};
// How long a signal's cleanup may take before the signal ends the process
// anyway: removing a healthy temporary folder takes well under a second, and
// Slurm sends SIGKILL 30 s after its SIGTERM (KillWait).
constexpr std::chrono::milliseconds kSignalCleanup{10'000};
std::atomic<bool> interrupted{false};  // the cleanup thread has the signal
// A signal has come, its cleanup maybe still waiting for the folders' lock
// (a maker stuck in its mkdir on hung storage holds it): main still waits
// for the signal's end, and its own exit code does not win over it.
std::atomic<bool> signal_received{false};

// With folders_mutex taken for good (the process is ending, by a signal or
// an abort): the folders and the actions, unless main has returned — then
// the folders went with their owners, and the actions' own state may have.
void clean_up_before_the_end() {
  if (exiting) return;
  interrupted = true;
  remove_folders_then_run_actions();
}

std::function<void(int)>& interrupt_report() {
  static auto* report = new std::function<void(int)>;  // never destroyed: a signal may come during the exit
  return *report;
}

extern "C" void pass_on_interrupt(int signal_number) {
  const int saved = errno;
  if (::write(interrupt_pipe[1], &signal_number, sizeof(signal_number)) < 0) {
    // Nothing to do in a handler: the signal is lost and the run goes on.
  }
  errno = saved;
}
}  // namespace

void set_interrupt_report(std::function<void(int signal_number)> report) { interrupt_report() = std::move(report); }

void wait_if_interrupted() {
  // Removing the folders can make the run fail on its own (its shards are
  // gone); it must not exit with that failure's code before the signal.
  while (interrupted || signal_received) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void end_interrupt_cleanup() {
  // Bounded: a maker stuck in its mkdir on storage that stopped responding
  // (a checkpoint writer abandoned there) holds the lock for good, and the
  // exit waited for it for ever. Without the lock `exiting` stays unset: a
  // signal from here on still cleans up, within kSignalCleanup.
  std::unique_lock<std::mutex> lock(folders_mutex(), std::defer_lock);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!lock.try_lock() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!interrupted && !signal_received) {
    if (lock.owns_lock()) exiting = true;
    return;
  }
  if (lock.owns_lock()) lock.unlock();
  wait_if_interrupted();
}

void remove_temporary_files_before_abort() {
  // Bounded: an abort ends a job that is stuck, and a removal stuck on a
  // hung file system (a folder under an NFS checkpoint.dir) must not stop it.
  (void)run_for_at_most(std::chrono::seconds(8), []() {
    // The signal's cleanup keeps the lock once it has it; the process is
    // then about to end by the signal, and that cleanup does this.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    bool locked = false;
    while (!(locked = folders_mutex().try_lock()) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (locked) {
      // Kept for good, as the signal's cleanup keeps it: the process is ending.
      abort_has_the_lock = true;
      clean_up_before_the_end();
    }
  });
}

void install_interrupt_cleanup() {
  // A file-size limit (ulimit -f) would kill a writer by SIGXFSZ without a
  // word; ignored, the write fails with EFBIG, reported like a full disk.
  std::signal(SIGXFSZ, SIG_IGN);
  if (::pipe2(interrupt_pipe, O_CLOEXEC) != 0) return;  // best effort: the default action stays
  std::thread cleanup;
  try {
    cleanup = std::thread([]() {
    int signal_number = 0;
    ssize_t got = -1;
    do {
      got = ::read(interrupt_pipe[0], &signal_number, sizeof(signal_number));
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(sizeof(signal_number))) return;
    signal_received = true;
    if (interrupt_report()) interrupt_report()(signal_number);
    // Test hook: the cleanup starts this long after the report, so that a
    // write the signal came during reaches its rename before its temporary
    // is removed.
    if (const char* delay = std::getenv("TRAINBENCH_TEST_INTERRUPT_CLEANUP_DELAY_MS"))
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(delay)));
    // Locked for good: the process is ending by the signal. A folder made
    // after the cleanup had passed stayed; its maker waits here instead.
    // An abort that has the lock has done (or is doing) this cleanup.
    // Bounded (kSignalCleanup): storage that stopped responding, or a maker
    // stuck in its mkdir there with the lock, kept the signal from ending
    // the process at all.
    const bool cleaned = run_for_at_most(kSignalCleanup, []() {
      bool locked = false;
      while (!(locked = folders_mutex().try_lock()) && !abort_has_the_lock)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (locked) clean_up_before_the_end();
    });
    if (!cleaned) {
      const std::string left = "trainbench: removing the temporary folders did not finish within " +
                               std::to_string(kSignalCleanup.count() / 1000) +
                               " s (storage not responding?): some may be left\n";
      if (::write(2, left.data(), left.size()) < 0) {
        // Nothing to do: the process ends by the signal all the same.
      }
    }
    // Test hook: the other threads go on this long between the cleanup and
    // the end, so what they do after a folder went is seen, not raced.
    if (const char* linger = std::getenv("TRAINBENCH_TEST_INTERRUPT_LINGER_MS"))
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(linger)));
    // Die by the signal itself, as without the handler.
    std::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
    ::_exit(128 + signal_number);  // not reached
    });
  } catch (const std::system_error&) {
    // No thread to be had (ulimit -v, -u): the signals keep their default
    // action; the run itself reports what it cannot get.
    ::close(interrupt_pipe[0]);
    ::close(interrupt_pipe[1]);
    return;
  }
  cleanup.detach();
  struct sigaction action {};
  action.sa_handler = pass_on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the other threads' reads and writes go on
  // SIGHUP: the terminal went (an ssh session dropped), which ends a run as
  // Ctrl-C does; nohup's ignored SIGHUP stays ignored below.
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    // A signal the parent set to be ignored stays ignored (a shell's
    // background job ignores SIGINT: Ctrl-C is not meant for it).
    struct sigaction before {};
    if (::sigaction(signal_number, nullptr, &before) == 0 && before.sa_handler == SIG_IGN) continue;
    ::sigaction(signal_number, &action, nullptr);
  }
}

}  // namespace trainbench
