// The MPI backend: host buffers, any MPI that offers MPI_THREAD_MULTIPLE
// (OpenMPI, MPICH, Intel MPI). The main thread's collectives are the
// non-blocking MPI call polled with MPI_Test against a deadline, so a dead or
// stalled peer ends the job with a message instead of hanging it.
// Gradient all-reduces run on one progress thread, in the order they were
// started, as blocking MPI_Allreduce calls: OpenMPI 4.1's non-blocking
// all-reduce picks a binomial algorithm 2-3x slower than the blocking one
// (bench comm), and the thread that waits for them (wait()) enforces the
// timeout instead. They use their own duplicate of MPI_COMM_WORLD:
// collectives on one communicator must be issued in the same order on every
// rank, and the main thread's collectives (on a second duplicate) may be
// issued while background ones are in flight.
#include <mpi.h>

#include <algorithm>           // std::min
#include <atomic>              // the timeout, read by the progress thread
#include <chrono>
#include <condition_variable>  // queue → progress thread, completions → wait()
#include <cstdint>             // int64_t
#include <cstdio>              // std::fprintf
#include <cstdlib>             // std::exit, std::_Exit
#include <deque>               // the FIFO of background requests
#include <limits>              // MPI's int counts
#include <mutex>
#include <stdexcept>           // std::invalid_argument, std::logic_error
#include <string>
#include <system_error>        // a thread that cannot be had
#include <thread>              // the progress thread, the start-up deadline

#include "comm/communicator.h"
#include "comm/deadline_clock.h"  // seconds ↔ durations for the timeouts
#include "comm/launch_detect.h"  // launcher_task_count, launcher_rank

namespace trainbench {

namespace {

using namespace comm_clock;  // Clock, seconds_of, duration_of, format_seconds

// MPI counts are int: longer all-reduces and broadcasts go in pieces this long.
constexpr int64_t kMaxPieceElements = int64_t{1} << 30;

// A collective is polled back to back for its first moments, where small
// messages complete, then with a short sleep between polls, so the compute
// threads keep the CPU while a large transfer is on the wire.
constexpr auto kSpinPhase = std::chrono::microseconds(200);
constexpr auto kPollSleep = std::chrono::microseconds(20);


std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

// MPI_Init waits for every rank the launcher started (Open MPI's PMIx fence),
// so one that never gets there (its host down, or stuck before main on a
// binary, config or data path whose storage stopped responding) held the
// others in MPI_Init for ever, with no MPI yet to time out. This thread ends
// the rank past comm.timeout_s with one line instead; the launcher then ends
// the job (mpirun on any non-zero exit, srun with --kill-on-bad-exit as
// trainbench.sbatch runs it). It covers the constructor's collectives too.
// comm.timeout_s, as NCCL's own rendezvous (ncclCommInitRank) is bounded by
// it: one key for every wait on the other ranks, as PyTorch's
// init_process_group timeout is for its rendezvous and collectives.
class StartupDeadline {
 public:
  // The rank's number as the launcher gave it, read here rather than on the
  // thread: MPI_Init may set environment variables meanwhile.
  explicit StartupDeadline(double limit_s)
      : limit_s_(limit_s), rank_(launcher_rank()), tasks_(launcher_task_count()) {
    try {
      thread_ = std::thread([this] { watch(); });
    } catch (const std::system_error&) {
      // No thread to be had (a process limit): start unwatched, as before.
    }
  }
  ~StartupDeadline() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  StartupDeadline(const StartupDeadline&) = delete;
  StartupDeadline& operator=(const StartupDeadline&) = delete;

 private:
  void watch() {
    std::unique_lock lock(mutex_);
    if (wake_.wait_for(lock, duration_of(limit_s_), [this] { return done_; })) return;
    const std::string who = rank_ >= 0 && tasks_ > 0
                                ? " (rank " + std::to_string(rank_) + " of " + std::to_string(tasks_) + ")"
                                : "";
    std::fflush(stdout);
    std::fprintf(stderr,
                 "trainbench: comm: MPI start-up did not finish within comm.timeout_s=%s s%s: a rank never "
                 "joined it (its host down, or stuck before MPI_Init, e.g. on storage that stopped responding: "
                 "see its output; raise comm.timeout_s if the launcher is only slow to start ranks)\n",
                 format_seconds(limit_s_).c_str(), who.c_str());
    std::fflush(stderr);
    // No MPI_Abort before MPI_Init has returned: the launcher ends the rest.
    std::_Exit(3);
  }

  const double limit_s_;
  const int rank_, tasks_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s);
  ~MpiCommunicator() override;

  const char* backend_name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  std::string host_name() const override { return host_name_; }

  void all_reduce_sum(float* data, int64_t count) override {
    all_reduce_in_pieces(blocking_comm_, data, count, "all_reduce");
  }
  void all_gather(double value, double* out) override;
  void barrier() override;
  void broadcast(void* data, int64_t bytes, int root) override;
  void reduce_scatter_sum(const float* send, float* recv, int64_t count) override;
  void all_gather_floats(const float* send, float* recv, int64_t count) override;

  Ticket start_all_reduce_sum(float* data, int64_t count) override;
  double wait(Ticket ticket) override;
  bool abandon_collectives() override;
  double take_comm_seconds() override;
  double last_completion_time() const override;

  void set_timeout(double seconds) override { timeout_s_ = seconds; }
  void set_injected_delay(double seconds_per_request) override { injected_delay_s_ = seconds_per_request; }
  void set_context(const std::string& context) override {
    std::lock_guard lock(context_mutex_);
    context_ = context;
  }
  [[noreturn]] void abort(int exit_code, const std::string& message) override;
  // abort() at init where MPI sees this process alone: no peer to end, and
  // MPI_Abort's 7-line banner followed the one line the refusal is.
  [[noreturn]] void refuse_alone(int exit_code, const std::string& message);

 private:
  struct BackgroundRequest {
    Ticket ticket;
    float* data;
    int64_t count;
  };

  // " at <context> (rank R of W)": where a failure message says it happened.
  std::string where() const;
  // Aborts the job when an MPI call failed, with MPI's own reason.
  void check(int result, const char* call, const char* collective);
  // Element count for a call MPI takes as an int; larger ones abort.
  int mpi_count(int64_t count, const char* collective);
  // Polls `request` until it completes; aborts past the timeout.
  // `held`: the request counts as done no sooner than comm.inject_delay_ms
  // after it began (the gradient collectives of ZeRO-1), the timeout counting.
  void complete(MPI_Request& request, const char* collective, int64_t bytes, bool held = false);
  void all_reduce_in_pieces(MPI_Comm comm, float* data, int64_t count, const char* collective);
  void progress_loop();

  int rank_ = 0;
  int world_ = 1;
  int local_rank_ = 0;
  std::string host_name_;
  MPI_Comm blocking_comm_ = MPI_COMM_NULL;    // the main thread's collectives
  MPI_Comm background_comm_ = MPI_COMM_NULL;  // the progress thread's all-reduces
  std::atomic<double> timeout_s_{300.0};
  std::atomic<double> injected_delay_s_{0.0};  // comm.inject_delay_ms, read by the progress thread
  mutable std::mutex context_mutex_;
  std::string context_;

  // The progress thread's queue and what it reports back, under `mutex_`.
  mutable std::mutex mutex_;
  std::condition_variable request_queued_;
  std::condition_variable request_completed_;
  std::deque<BackgroundRequest> queue_;  // front: the next, or the one in flight
  bool in_flight_ = false;               // the front is inside MPI on the progress thread
  Ticket next_ticket_ = 0;
  Ticket completed_through_ = -1;  // tickets complete in order
  double comm_seconds_ = 0.0;      // since the last take_comm_seconds()
  double last_completion_s_ = 0.0;
  bool stopping_ = false;
  std::thread progress_thread_;
};

MpiCommunicator::MpiCommunicator(double timeout_s) : timeout_s_(timeout_s) {
  const StartupDeadline deadline(timeout_s);
  // What the launcher said, read before MPI_Init: a singleton's init sets
  // OpenMPI's own variables (OMPI_COMM_WORLD_RANK=0, ...) over them.
  const int launched_tasks = launcher_task_count();
  const int numbered = launcher_rank();
  int provided = MPI_THREAD_SINGLE;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    // Before MPI is up there is no MPI_Abort; the launcher ends the other ranks.
    std::fprintf(stderr, "trainbench: comm: MPI_Init_thread failed\n");
    std::exit(3);
  }
  // Errors come back as return codes, which end the job with a message
  // naming the collective, instead of MPI's own abort.
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", "init");
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank", "init");
  check(MPI_Comm_size(MPI_COMM_WORLD, &world_), "MPI_Comm_size", "init");
  if (provided < MPI_THREAD_MULTIPLE)
    abort(3, "comm: this MPI library offers " + thread_level_name(provided) +
                 ", trainbench needs MPI_THREAD_MULTIPLE (gradient all-reduces run on a progress "
                 "thread while the main thread computes): use an MPI built with thread support");
  if (launched_tasks > 1 && world_ != launched_tasks)
    refuse_alone(3, "comm: the launcher started " + std::to_string(launched_tasks) +
                 " tasks but MPI sees a world of " + std::to_string(world_) +
                 ": this MPI cannot reach the launcher (under Slurm: srun --mpi=pmix, or mpirun "
                 "inside the allocation)");
  // A launcher that numbered this process but gave no size (PMIX_RANK
  // alone, PMI_RANK without PMI_SIZE): it ran as rank 0 of a world of 1.
  if (numbered >= world_)
    refuse_alone(3, "comm: the launcher numbered this process rank " + std::to_string(numbered) +
                 " but MPI sees a world of " + std::to_string(world_) +
                 ": this MPI cannot reach the launcher (under Slurm: srun --mpi=pmix, or mpirun inside the "
                 "allocation)");

  MPI_Comm host_comm = MPI_COMM_NULL;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host_comm),
        "MPI_Comm_split_type", "init");
  check(MPI_Comm_rank(host_comm, &local_rank_), "MPI_Comm_rank", "init");
  check(MPI_Comm_free(&host_comm), "MPI_Comm_free", "init");
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int name_length = 0;
  check(MPI_Get_processor_name(name, &name_length), "MPI_Get_processor_name", "init");
  host_name_.assign(name, static_cast<size_t>(name_length));

  // The duplicates inherit MPI_ERRORS_RETURN.
  check(MPI_Comm_dup(MPI_COMM_WORLD, &blocking_comm_), "MPI_Comm_dup", "init");
  check(MPI_Comm_dup(MPI_COMM_WORLD, &background_comm_), "MPI_Comm_dup", "init");
  progress_thread_ = std::thread([this] { progress_loop(); });
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;  // the thread finishes what is queued first
  }
  request_queued_.notify_one();
  progress_thread_.join();
  check(MPI_Comm_free(&background_comm_), "MPI_Comm_free", "shutdown");
  check(MPI_Comm_free(&blocking_comm_), "MPI_Comm_free", "shutdown");
  // After MPI_Finalize nothing can abort the job any more: a failure here is
  // only reported.
  if (MPI_Finalize() != MPI_SUCCESS)
    std::fprintf(stderr, "trainbench: comm: MPI_Finalize failed (rank %d of %d)\n", rank_, world_);
}

std::string MpiCommunicator::where() const {
  std::string context;
  {
    std::lock_guard lock(context_mutex_);
    context = context_;
  }
  return (context.empty() ? "" : " at " + context) + " (rank " + std::to_string(rank_) + " of " +
         std::to_string(world_) + ")";
}

void MpiCommunicator::check(int result, const char* call, const char* collective) {
  if (result == MPI_SUCCESS) return;
  char reason[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(result, reason, &length) != MPI_SUCCESS) length = 0;
  abort(3, std::string("comm: ") + call + " failed in " + collective + ": " +
               (length > 0 ? std::string(reason, static_cast<size_t>(length)) : "unknown MPI error") +
               where());
}

int MpiCommunicator::mpi_count(int64_t count, const char* collective) {
  if (count < 0 || count > std::numeric_limits<int>::max())
    abort(3, std::string("comm: ") + collective + " of " + std::to_string(count) +
                 " elements per rank: MPI counts are int" + where());
  return static_cast<int>(count);
}

void MpiCommunicator::complete(MPI_Request& request, const char* collective, int64_t bytes, bool held) {
  const PeerWait waiting(*this);
  const Clock::time_point start = Clock::now();
  const double timeout_s = timeout_s_;
  const Clock::time_point deadline = start + duration_of(timeout_s);
  const Clock::time_point release = start + duration_of(held ? injected_delay_s_.load() : 0.0);
  for (;;) {
    int done = 0;  // a completed request is MPI_REQUEST_NULL, which tests done
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", collective);
    const Clock::time_point now = Clock::now();
    if (done && now >= release) return;
    if (now >= deadline)
      abort(3, std::string("comm: ") + collective + " of " + std::to_string(bytes) +
                   " bytes timed out after " + format_seconds(timeout_s) + " s" + where() +
                   ": a rank died or stalled");
    if (now - start < kSpinPhase) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
}

void MpiCommunicator::all_reduce_in_pieces(MPI_Comm comm, float* data, int64_t count,
                                           const char* collective) {
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  for (int64_t offset = 0; offset < count; offset += kMaxPieceElements) {
    const int piece = static_cast<int>(std::min(kMaxPieceElements, count - offset));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, data + offset, piece, MPI_FLOAT, MPI_SUM, comm, &request),
          "MPI_Iallreduce", collective);
    complete(request, collective, bytes);
  }
}

void MpiCommunicator::all_gather(double value, double* out) {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(&value, 1, MPI_DOUBLE, out, 1, MPI_DOUBLE, blocking_comm_, &request),
        "MPI_Iallgather", "all_gather");
  complete(request, "all_gather", world_ * static_cast<int64_t>(sizeof(double)));
}

void MpiCommunicator::barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(blocking_comm_, &request), "MPI_Ibarrier", "barrier");
  complete(request, "barrier", 0);
}

void MpiCommunicator::broadcast(void* data, int64_t bytes, int root) {
  char* bytes_data = static_cast<char*>(data);
  for (int64_t offset = 0; offset < bytes; offset += kMaxPieceElements) {
    const int piece = static_cast<int>(std::min(kMaxPieceElements, bytes - offset));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(bytes_data + offset, piece, MPI_BYTE, root, blocking_comm_, &request),
          "MPI_Ibcast", "broadcast");
    complete(request, "broadcast", piece);  // each piece has comm.timeout_s: its bytes are what timed out
  }
}

void MpiCommunicator::reduce_scatter_sum(const float* send, float* recv, int64_t count) {
  const int block = mpi_count(count, "reduce_scatter");
  // In place (send == recv): MPI's rule, the result lands in the first block.
  const void* send_buffer = send == recv ? MPI_IN_PLACE : send;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ireduce_scatter_block(send_buffer, recv, block, MPI_FLOAT, MPI_SUM, blocking_comm_,
                                  &request),
        "MPI_Ireduce_scatter_block", "reduce_scatter");
  complete(request, "reduce_scatter", count * world_ * static_cast<int64_t>(sizeof(float)), /*held=*/true);
}

void MpiCommunicator::all_gather_floats(const float* send, float* recv, int64_t count) {
  const int block = mpi_count(count, "all_gather");
  // In place: this rank's block already sits at its place in `recv`.
  const void* send_buffer = send == recv + rank_ * count ? MPI_IN_PLACE : send;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Iallgather(send_buffer, block, MPI_FLOAT, recv, block, MPI_FLOAT, blocking_comm_,
                       &request),
        "MPI_Iallgather", "all_gather");
  complete(request, "all_gather", count * world_ * static_cast<int64_t>(sizeof(float)), /*held=*/true);
}

Communicator::Ticket MpiCommunicator::start_all_reduce_sum(float* data, int64_t count) {
  Ticket ticket;
  {
    std::lock_guard lock(mutex_);
    ticket = next_ticket_++;
    queue_.push_back(BackgroundRequest{ticket, data, count});
  }
  request_queued_.notify_one();
  return ticket;
}

double MpiCommunicator::wait(Ticket ticket) {
  const PeerWait waiting(*this);
  const Clock::time_point start = Clock::now();
  // The in-flight request is a blocking MPI_Allreduce on the progress thread,
  // which cannot time out by itself: this deadline is its timeout.
  const Clock::duration limit = duration_of(timeout_s_);
  std::unique_lock lock(mutex_);
  if (ticket < 0 || ticket >= next_ticket_)
    throw std::invalid_argument("wait: ticket " + std::to_string(ticket) + " was never started");
  Ticket seen = completed_through_;
  Clock::time_point deadline = start + limit;
  while (completed_through_ < ticket) {
    request_completed_.wait_until(lock, deadline);
    if (completed_through_ != seen) {
      seen = completed_through_;
      deadline = Clock::now() + limit;  // the queue moves: the stall, if any, is further on
    } else if (Clock::now() >= deadline) {
      const int64_t bytes = queue_.empty() ? 0 : queue_.front().count * static_cast<int64_t>(sizeof(float));
      lock.unlock();  // where() and abort() do not need it; the progress thread may
      abort(3, "comm: background all_reduce of " + std::to_string(bytes) + " bytes timed out after " +
                   format_seconds(seconds_of(limit)) + " s" + where() + ": a rank died or stalled");
    }
  }
  return seconds_of(Clock::now() - start);
}

bool MpiCommunicator::abandon_collectives() {
  // What has not begun is dropped: the progress thread would otherwise
  // start it on buffers the unwinding caller is about to free. The one in
  // flight is a blocking MPI_Allreduce that nothing can cancel; it writes
  // its buffer until it ends, or the job is aborted.
  std::lock_guard lock(mutex_);
  if (queue_.empty()) return false;
  queue_.erase(queue_.begin() + (in_flight_ ? 1 : 0), queue_.end());
  return in_flight_;
}

double MpiCommunicator::take_comm_seconds() {
  std::lock_guard lock(mutex_);
  const double seconds = comm_seconds_;
  comm_seconds_ = 0.0;
  return seconds;
}

double MpiCommunicator::last_completion_time() const {
  std::lock_guard lock(mutex_);
  return last_completion_s_;
}

void MpiCommunicator::progress_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    // Idle: asleep on the condition variable, no polling.
    request_queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued is done
    const BackgroundRequest request = queue_.front();
    in_flight_ = true;
    lock.unlock();
    const Clock::time_point start = Clock::now();
    if (injected_delay_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(injected_delay_s_.load()));
    for (int64_t offset = 0; offset < request.count; offset += kMaxPieceElements) {
      const int piece = static_cast<int>(std::min(kMaxPieceElements, request.count - offset));
      check(MPI_Allreduce(MPI_IN_PLACE, request.data + offset, piece, MPI_FLOAT, MPI_SUM, background_comm_),
            "MPI_Allreduce", "background all_reduce");
    }
    const Clock::time_point end = Clock::now();
    lock.lock();
    in_flight_ = false;
    queue_.pop_front();
    completed_through_ = request.ticket;
    comm_seconds_ += seconds_of(end - start);
    last_completion_s_ = seconds_of(end.time_since_epoch());
    request_completed_.notify_all();
  }
}

[[noreturn]] void MpiCommunicator::abort(int exit_code, const std::string& message) {
  std::fflush(stdout);  // what the rank printed so far comes before the message
  std::fprintf(stderr, "trainbench: %s\n", message.c_str());
  std::fflush(stderr);
  run_before_abort(exit_code, message);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; should one, the rank still ends
}

[[noreturn]] void MpiCommunicator::refuse_alone(int exit_code, const std::string& message) {
  if (world_ > 1) abort(exit_code, message);
  std::fflush(stdout);
  std::fprintf(stderr, "trainbench: %s\n", message.c_str());
  std::fflush(stderr);
  run_before_abort(exit_code, message);
  MPI_Finalize();  // the main thread, before any other thread of MPI's or ours
  std::_Exit(exit_code);
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s) {
  // MPI can be initialised once per process (MPI_Finalize is final).
  static std::atomic<bool> created{false};
  if (created.exchange(true))
    throw std::logic_error("make_mpi_communicator: MPI can be initialised only once per process");
  return std::make_unique<MpiCommunicator>(timeout_s);
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string version(text, static_cast<size_t>(std::max(length, 0)));
  // "Open MPI v4.1.4, package: ..., ident: ...": the name and version only;
  // MPICH's "MPICH Version:\t4.0.2\n..." keeps its first line.
  version = version.substr(0, version.find_first_of(",\n"));
  while (!version.empty() && (version.back() == ' ' || version.back() == '\t')) version.pop_back();
  return version.empty() ? "unknown" : version;
}

}  // namespace trainbench
