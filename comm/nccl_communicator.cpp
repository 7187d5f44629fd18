// The NCCL backend: device buffers, one process per GPU, its own CUDA stream.
//
// Never a hang: the NCCL communicator is created non-blocking
// (ncclConfig_t.blocking = 0), so no NCCL call waits for a peer inside NCCL.
// Every wait is this file's own loop — ncclCommGetAsyncError while a call
// reports ncclInProgress, cudaEventQuery plus ncclCommGetAsyncError while a
// collective runs on the stream — against a deadline (set_timeout). Past it,
// or on any CUDA/NCCL error, abort(): ncclCommAbort, then the bootstrap
// communicator's abort, which ends every rank (MPI_Abort) with the message.
//
// Background all-reduces (start_all_reduce*) are enqueued on the one comm
// stream, so they complete in the order they were started, with no thread:
// each carries two CUDA events, whose elapsed time is its comm_s; wait()
// polls the end event. The host control collectives (all_gather of one
// double, barrier, broadcast) go to the bootstrap communicator: they carry a
// few host bytes (a checksum, a go, the ncclUniqueId itself), which through
// NCCL would need device scratch, two copies and a stream sync for nothing;
// the bootstrap applies the same timeout and abort rules.
//
// One thread drives a communicator (the trainer's main thread); it is not
// thread-safe, as the device's stream already orders the work.
#include <cuda_runtime.h>  // streams, events, cudaSetDevice
#include <nccl.h>          // the collectives, ncclConfig_t, ncclCommAbort

#include <algorithm>  // std::max: waiting_since
#include <atomic>     // the abort latch; the comm, cleared by an abort on another thread
#include <chrono>
#include <cstdint>    // int64_t
#include <cstdio>     // std::fprintf, std::snprintf
#include <cstdlib>    // std::_Exit
#include <deque>      // the background requests in flight, oldest first
#include <exception>  // std::uncaught_exceptions: a destructor run by an error skips the orderly shutdown
#include <mutex>      // the context, read by the abort watchdog's message
#include <stdexcept>  // std::invalid_argument
#include <string>
#include <thread>     // sleeping between polls, the abort watchdog
#include <utility>    // std::move
#include <vector>

#include "comm/communicator.h"
#include "comm/deadline_clock.h"  // seconds ↔ durations for the timeouts

// Every CUDA and NCCL call of this file: a failure aborts every rank with the
// call, the collective it served and the library's own reason.
#define TRAINBENCH_COMM_CUDA_CHECK(call, collective) check_cuda((call), #call, (collective))
#define TRAINBENCH_NCCL_CHECK(call, collective) check_nccl((call), #call, (collective))

namespace trainbench {

namespace {

using namespace comm_clock;  // Clock, seconds_of, duration_of, format_seconds

// Polled back to back for the first moments, where small collectives end,
// then with a short sleep, so a long transfer leaves the CPU to the loader.
constexpr auto kSpinPhase = std::chrono::microseconds(200);
constexpr auto kPollSleep = std::chrono::microseconds(20);
// ncclCommAbort may block on a wedged GPU; past this the rank ends anyway.
constexpr auto kAbortGrace = std::chrono::seconds(10);

ncclDataType_t nccl_type(DataType dtype) {
  return dtype == DataType::kFloat32 ? ncclFloat32 : ncclBfloat16;
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclAvg; }

void require_count(int64_t count, const char* collective) {
  if (count < 0)
    throw std::invalid_argument(std::string(collective) + ": negative count " + std::to_string(count));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> bootstrap, int device, double init_timeout_s);
  ~NcclCommunicator() override;

  const char* backend_name() const override { return "nccl"; }
  bool device_buffers() const override { return true; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return bootstrap_->local_rank(); }
  std::string host_name() const override { return bootstrap_->host_name(); }

  void all_reduce_sum(float* data, int64_t count) override {
    all_reduce(data, count, DataType::kFloat32, ReduceOp::kSum);
  }
  void all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) override;
  // Host control collectives: the bootstrap's (see the top of the file).
  void all_gather(double value, double* out) override { bootstrap_->all_gather(value, out); }
  void barrier() override { bootstrap_->barrier(); }
  void broadcast(void* data, int64_t bytes, int root) override { bootstrap_->broadcast(data, bytes, root); }
  void reduce_scatter_sum(const float* send, float* recv, int64_t count) override;
  void all_gather_floats(const float* send, float* recv, int64_t count) override;

  Ticket start_all_reduce_sum(float* data, int64_t count) override {
    return start_all_reduce(data, count, DataType::kFloat32, ReduceOp::kSum);
  }
  Ticket start_all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) override;
  double wait(Ticket ticket) override;
  double take_comm_seconds() override;
  double last_completion_time() const override { return last_completion_s_; }
  // The control collectives wait in the bootstrap.
  double waiting_since() const override {
    return std::max(Communicator::waiting_since(), bootstrap_->waiting_since());
  }

  void* device_stream() const override { return stream_; }
  void wait_for_device_event(void* cuda_event) override;

  void set_timeout(double seconds) override {
    timeout_s_ = seconds;
    bootstrap_->set_timeout(seconds);
  }
  void set_context(const std::string& context) override {
    {
      std::lock_guard lock(context_mutex_);
      context_ = context;
    }
    bootstrap_->set_context(context);
  }
  [[noreturn]] void abort(int exit_code, const std::string& message) override;
  bool abandon_collectives() override;

 private:
  // A background all-reduce on the stream: its events bracket it.
  struct Request {
    Ticket ticket;
    cudaEvent_t start;
    cudaEvent_t end;
    int64_t bytes;
  };

  // " at <context> (rank R of W, GPU D)": where a failure message says it happened.
  std::string where() const;
  void check_cuda(cudaError_t result, const char* call, const char* collective);
  void check_nccl(ncclResult_t result, const char* call, const char* collective);
  // The collectives may run on a thread other than the constructor's: the
  // CUDA device is per thread.
  void use_device() { TRAINBENCH_COMM_CUDA_CHECK(cudaSetDevice(device_), "set device"); }
  // After a call returned ncclInProgress (a non-blocking communicator), polls
  // until NCCL has finished issuing it; nothing else may touch the
  // communicator or its stream before. `timeout_s` counts from `began`, taken
  // before the call was made: the time the call took to return and the
  // settling share one deadline (each had its own, up to twice the timeout
  // in all).
  void settle(ncclResult_t result, const char* call, const char* collective, int64_t bytes,
              double timeout_s, Clock::time_point began);
  // True once `event` has completed; aborts on a CUDA or asynchronous NCCL error.
  bool event_done(cudaEvent_t event, const char* collective);
  // A blocking collective: `issue` enqueues it (returns NCCL's result),
  // `after` (may be empty) enqueues device work that completes it; then waits
  // for the stream until the deadline.
  template <typename Issue, typename After>
  void run_blocking(const char* collective, const char* call, int64_t bytes, Issue issue, After after);
  // Retires the background requests whose end event has completed, oldest
  // first: their comm_s and completion time are taken here.
  void retire_completed();
  cudaEvent_t take_event();
  [[noreturn]] void timed_out(const char* collective, int64_t bytes, double timeout_s,
                              const std::string& why);
  // ncclCommAbort (the caller claimed it), the rank ended with exit 3 should
  // it not return within kAbortGrace; comm_ is null after.
  void abort_comm_within_grace();

  std::unique_ptr<Communicator> bootstrap_;  // first in, last out: abort() needs it to the end
  int device_ = 0;
  int rank_ = 0;
  int world_ = 1;
  double init_timeout_s_ = 300.0;
  double timeout_s_ = 300.0;
  mutable std::mutex context_mutex_;
  std::string context_;
  std::atomic<bool> aborting_{false};
  // Who calls ncclCommAbort, once: abort() on a watchdog's thread and
  // abandon_collectives() unwinding on the main thread could both
  // reach it while the other's call was blocked on a wedged GPU (a double
  // free of the comm).
  std::atomic<bool> comm_abort_claimed_{false};
  bool claim_comm_abort() { return comm_ != nullptr && !comm_abort_claimed_.exchange(true); }

  cudaStream_t stream_ = nullptr;      // the comm stream: every collective, in issue order
  cudaEvent_t sync_event_ = nullptr;   // the end of a blocking collective (no timing)
  // Atomic: abort() on a watchdog's thread (burn-in's hang watch, the
  // collective timeout) aborts and clears it while the main thread may be
  // about to pass it to its next NCCL call.
  std::atomic<ncclComm_t> comm_{nullptr};
  std::vector<cudaEvent_t> all_events_;   // every timing event made, destroyed at the end
  std::vector<cudaEvent_t> free_events_;  // those not bracketing a request now
  std::deque<Request> pending_;           // started, not yet seen complete; oldest first
  Ticket next_ticket_ = 0;
  Ticket completed_through_ = -1;  // tickets complete in order
  double comm_seconds_ = 0.0;      // since the last take_comm_seconds()
  double last_completion_s_ = 0.0;
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> bootstrap, int device,
                                   double init_timeout_s)
    : bootstrap_(std::move(bootstrap)), device_(device), init_timeout_s_(init_timeout_s) {
  if (!bootstrap_) throw std::invalid_argument("make_nccl_communicator: no bootstrap communicator");
  rank_ = bootstrap_->rank();
  world_ = bootstrap_->world_size();
  // comm.backend=auto comes here without the CLI's check.
  if (const std::string problem = nccl_environment_problem(); !problem.empty()) abort(2, "comm: " + problem + where());

  int device_count = 0;
  const cudaError_t count_result = cudaGetDeviceCount(&device_count);
  if (count_result != cudaSuccess)
    abort(3, std::string("comm: the nccl backend needs a GPU, and CUDA finds none: ") +
                 cudaGetErrorString(count_result) + where());
  if (device_ < 0 || device_ >= device_count)
    abort(3, "comm: the nccl backend was asked for GPU " + std::to_string(device_) + " (local rank " +
                 std::to_string(bootstrap_->local_rank()) + ") but this process sees " +
                 std::to_string(device_count) + " GPU(s): one rank per GPU on each host" + where());
  use_device();
  // Non-blocking: the comm stream does not wait for the legacy default stream.
  TRAINBENCH_COMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "init");
  TRAINBENCH_COMM_CUDA_CHECK(cudaEventCreateWithFlags(&sync_event_, cudaEventDisableTiming), "init");

  ncclUniqueId id{};
  if (rank_ == 0) TRAINBENCH_NCCL_CHECK(ncclGetUniqueId(&id), "init");
  bootstrap_->broadcast(&id, static_cast<int64_t>(sizeof(id)), 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait is ours, with a deadline (top of the file)
  const Clock::time_point began = Clock::now();
  // Non-blocking: the comm exists (and its errors can be polled) as soon as
  // the call returns, before the rendezvous is done.
  ncclComm_t made = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&made, world_, id, rank_, &config);
  comm_ = made;
  settle(started, "ncclCommInitRankConfig", "init", 0, init_timeout_s_, began);
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;  // abandoned: the stream and events go with the process
  // Unwinding from an error (a CUDA error the engine threw, a failed step),
  // or a context a sticky error broke: no orderly shutdown. Its first
  // checked CUDA call would fail on the broken context and end the process
  // with "failed in shutdown", and the error being reported (the kernel that
  // faulted) would never be printed. ncclCommAbort frees NCCL's side without
  // waiting for any peer; the stream and events go with the process.
  const cudaError_t device_state = cudaSetDevice(device_);
  const cudaError_t stream_state = device_state == cudaSuccess ? cudaStreamQuery(stream_) : device_state;
  if (std::uncaught_exceptions() > 0 || (stream_state != cudaSuccess && stream_state != cudaErrorNotReady)) {
    // Bounded as abandon_collectives' is: on a wedged GPU it may never return.
    if (claim_comm_abort()) abort_comm_within_grace();
    comm_ = nullptr;
    return;
  }
  // What was issued finishes first: the buffers may be freed right after.
  TRAINBENCH_COMM_CUDA_CHECK(cudaEventRecord(sync_event_, stream_), "shutdown");
  const Clock::time_point deadline = Clock::now() + duration_of(timeout_s_);
  while (!event_done(sync_event_, "shutdown")) {
    if (Clock::now() >= deadline)
      timed_out("shutdown", 0, timeout_s_, "collectives still running at the end");
    std::this_thread::sleep_for(kPollSleep);
  }
  retire_completed();
  // ncclCommFinalize waits for every rank's communicator to go quiet.
  const Clock::time_point finalizing = Clock::now();
  settle(ncclCommFinalize(comm_), "ncclCommFinalize", "shutdown", 0, timeout_s_, finalizing);
  TRAINBENCH_NCCL_CHECK(ncclCommDestroy(comm_), "shutdown");
  comm_ = nullptr;
  for (cudaEvent_t event : all_events_) TRAINBENCH_COMM_CUDA_CHECK(cudaEventDestroy(event), "shutdown");
  TRAINBENCH_COMM_CUDA_CHECK(cudaEventDestroy(sync_event_), "shutdown");
  TRAINBENCH_COMM_CUDA_CHECK(cudaStreamDestroy(stream_), "shutdown");
}

std::string NcclCommunicator::where() const {
  std::string context;
  {
    std::lock_guard lock(context_mutex_);
    context = context_;
  }
  return (context.empty() ? "" : " at " + context) + " (rank " + std::to_string(rank_) + " of " +
         std::to_string(world_) + ", GPU " + std::to_string(device_) + ")";
}

void NcclCommunicator::check_cuda(cudaError_t result, const char* call, const char* collective) {
  if (result == cudaSuccess) return;
  abort(3, std::string("comm: ") + call + " failed in " + collective + ": " + cudaGetErrorName(result) +
               " (" + cudaGetErrorString(result) + ")" + where());
}

void NcclCommunicator::check_nccl(ncclResult_t result, const char* call, const char* collective) {
  if (result == ncclSuccess) return;
  const char* detail = ncclGetLastError(comm_);
  abort(3, std::string("comm: ") + call + " failed in " + collective + ": " + ncclGetErrorString(result) +
               (detail != nullptr && detail[0] != '\0' ? std::string(" (") + detail + ")" : "") + where());
}

void NcclCommunicator::timed_out(const char* collective, int64_t bytes, double timeout_s,
                                 const std::string& why) {
  const std::string size = bytes > 0 ? " of " + std::to_string(bytes) + " bytes" : "";
  abort(3, std::string("comm: nccl ") + collective + size + " timed out after " + format_seconds(timeout_s) +
               " s" + where() + ": " + why);
}

void NcclCommunicator::settle(ncclResult_t result, const char* call, const char* collective,
                              int64_t bytes, double timeout_s, Clock::time_point began) {
  if (result != ncclInProgress) {
    check_nccl(result, call, collective);
    return;
  }
  // Issuing may wait for the peers (NCCL connects lazily, at a collective's
  // first use): a wait on them, not this rank stuck, to the hang watchdog.
  const PeerWait waiting(*this);
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = began + duration_of(timeout_s);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    TRAINBENCH_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), collective);
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) check_nccl(state, call, collective);
    const Clock::time_point now = Clock::now();
    if (now >= deadline)
      timed_out(collective, bytes, timeout_s,
                std::string(call) + " did not finish: a rank died, stalled or never joined");
    if (now - start < kSpinPhase) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
}

bool NcclCommunicator::event_done(cudaEvent_t event, const char* collective) {
  const cudaError_t query = cudaEventQuery(event);
  if (query == cudaSuccess) return true;
  if (query != cudaErrorNotReady) check_cuda(query, "cudaEventQuery", collective);
  // A peer's failure (a broken connection) shows here, not on the stream.
  ncclResult_t state = ncclSuccess;
  TRAINBENCH_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state), collective);
  if (state != ncclSuccess && state != ncclInProgress)
    check_nccl(state, "a collective on the comm stream", collective);
  return false;
}

template <typename Issue, typename After>
void NcclCommunicator::run_blocking(const char* collective, const char* call, int64_t bytes, Issue issue,
                                    After after) {
  use_device();
  const PeerWait waiting(*this);
  const double timeout_s = timeout_s_;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + duration_of(timeout_s);
  settle(issue(), call, collective, bytes, timeout_s, start);
  after();
  TRAINBENCH_COMM_CUDA_CHECK(cudaEventRecord(sync_event_, stream_), collective);
  // Background requests ahead of it on the stream are waited for as well.
  const size_t ahead = pending_.size();
  while (!event_done(sync_event_, collective)) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline)
      timed_out(collective, bytes, timeout_s,
                "a rank died or stalled" +
                    (ahead > 0 ? " (" + std::to_string(ahead) + " background all_reduce(s) were ahead of it)"
                               : std::string()));
    if (now - start < kSpinPhase) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
  retire_completed();
}

void NcclCommunicator::all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) {
  require_count(count, "all_reduce");
  run_blocking(
      "all_reduce", "ncclAllReduce", count * data_type_bytes(dtype),
      [&] {
        return ncclAllReduce(data, data, static_cast<size_t>(count), nccl_type(dtype), nccl_op(op), comm_,
                             stream_);
      },
      [] {});
}

void NcclCommunicator::reduce_scatter_sum(const float* send, float* recv, int64_t count) {
  require_count(count, "reduce_scatter");
  // The interface's in-place form (send == recv, result in the first block)
  // is MPI's; NCCL's in-place form puts the result at this rank's own block,
  // which is then moved to the first.
  const bool in_place = send == recv;
  float* nccl_recv = in_place ? recv + rank_ * count : recv;
  run_blocking(
      "reduce_scatter", "ncclReduceScatter", count * world_ * static_cast<int64_t>(sizeof(float)),
      [&] {
        return ncclReduceScatter(send, nccl_recv, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_,
                                 stream_);
      },
      [&] {
        if (!in_place || rank_ == 0 || count == 0) return;
        const size_t bytes = static_cast<size_t>(count) * sizeof(float);
        TRAINBENCH_COMM_CUDA_CHECK(
            cudaMemcpyAsync(recv, nccl_recv, bytes, cudaMemcpyDeviceToDevice, stream_), "reduce_scatter");
      });
}

void NcclCommunicator::all_gather_floats(const float* send, float* recv, int64_t count) {
  require_count(count, "all_gather");
  // In place when send == recv + rank × count: NCCL's rule and the interface's.
  run_blocking(
      "all_gather", "ncclAllGather", count * world_ * static_cast<int64_t>(sizeof(float)),
      [&] { return ncclAllGather(send, recv, static_cast<size_t>(count), ncclFloat32, comm_, stream_); },
      [] {});
}

cudaEvent_t NcclCommunicator::take_event() {
  if (!free_events_.empty()) {
    const cudaEvent_t event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  TRAINBENCH_COMM_CUDA_CHECK(cudaEventCreate(&event), "background all_reduce");  // timing on: comm_s
  all_events_.push_back(event);
  return event;
}

Communicator::Ticket NcclCommunicator::start_all_reduce(void* data, int64_t count, DataType dtype,
                                                        ReduceOp op) {
  require_count(count, "start_all_reduce");
  use_device();
  retire_completed();  // keeps the event pool small
  const Request request{next_ticket_, take_event(), take_event(), count * data_type_bytes(dtype)};
  TRAINBENCH_COMM_CUDA_CHECK(cudaEventRecord(request.start, stream_), "background all_reduce");
  const Clock::time_point began = Clock::now();
  settle(ncclAllReduce(data, data, static_cast<size_t>(count), nccl_type(dtype), nccl_op(op), comm_, stream_),
         "ncclAllReduce", "background all_reduce", request.bytes, timeout_s_, began);
  TRAINBENCH_COMM_CUDA_CHECK(cudaEventRecord(request.end, stream_), "background all_reduce");
  pending_.push_back(request);
  return next_ticket_++;
}

void NcclCommunicator::retire_completed() {
  while (!pending_.empty() && event_done(pending_.front().end, "background all_reduce")) {
    const Request request = pending_.front();
    float milliseconds = 0.0f;
    TRAINBENCH_COMM_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, request.start, request.end),
                               "background all_reduce");
    comm_seconds_ += milliseconds * 1e-3;
    // When this rank saw it end: the host learns of a completion by polling.
    last_completion_s_ = seconds_of(Clock::now().time_since_epoch());
    completed_through_ = request.ticket;
    free_events_.push_back(request.start);
    free_events_.push_back(request.end);
    pending_.pop_front();
  }
}

double NcclCommunicator::wait(Ticket ticket) {
  const PeerWait waiting(*this);
  const Clock::time_point start = Clock::now();
  if (ticket < 0 || ticket >= next_ticket_)
    throw std::invalid_argument("wait: ticket " + std::to_string(ticket) + " was never started");
  const double timeout_s = timeout_s_;
  const Clock::duration limit = duration_of(timeout_s);
  Ticket seen = completed_through_;
  Clock::time_point deadline = start + limit;
  for (;;) {
    retire_completed();
    if (completed_through_ >= ticket) break;
    const Clock::time_point now = Clock::now();
    if (completed_through_ != seen) {
      seen = completed_through_;
      deadline = now + limit;  // the stream moves: the stall, if any, is further on
    } else if (now >= deadline) {
      timed_out("background all_reduce", pending_.front().bytes, timeout_s, "a rank died or stalled");
    }
    if (now - start < kSpinPhase) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
  return seconds_of(Clock::now() - start);
}

double NcclCommunicator::take_comm_seconds() {
  retire_completed();
  const double seconds = comm_seconds_;
  comm_seconds_ = 0.0;
  return seconds;
}

void NcclCommunicator::wait_for_device_event(void* cuda_event) {
  use_device();
  TRAINBENCH_COMM_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(cuda_event), 0),
                             "wait_for_device_event");
}

[[noreturn]] void NcclCommunicator::abort(int exit_code, const std::string& message) {
  // A failure while aborting (ncclCommAbort's own, on the aborting thread)
  // must not recurse: it ends the rank now. Another thread that meets the
  // abort's consequences (the main thread polling a communicator the burn-in
  // watchdog is aborting) waits instead: the first abort ends the process
  // with its own message and code, within its bounds (the cleanup, then
  // kAbortGrace), where ending here at once lost both and cut the cleanup.
  static thread_local bool this_thread_aborts = false;
  if (aborting_.exchange(true)) {
    if (this_thread_aborts) std::_Exit(exit_code);
    // Past the first abort's own bounds: the action before it (up to 30 s,
    // run_before_abort), then kAbortGrace.
    std::this_thread::sleep_for(kAbortGrace + std::chrono::seconds(35));
    std::_Exit(exit_code);
  }
  this_thread_aborts = true;
  std::fflush(stdout);  // what the rank printed so far comes before the message
  // The temporary folders go first (bounded): a wedged ncclCommAbort, the
  // usual case of a GPU timeout, ends the rank by the watchdog below and
  // never reaches the bootstrap's abort, which would run this too.
  run_before_abort(exit_code, message);
  // ncclCommAbort can block on a wedged device or a dead peer's connection:
  // the watchdog ends the rank regardless (the launcher then ends the rest).
  std::thread([exit_code, message] {
    std::this_thread::sleep_for(kAbortGrace);
    std::fprintf(stderr, "trainbench: %s (ncclCommAbort did not return within %lld s)\n", message.c_str(),
                 static_cast<long long>(kAbortGrace.count()));
    std::fflush(stderr);
    std::_Exit(exit_code);
  }).detach();
  if (claim_comm_abort()) ncclCommAbort(comm_);  // its result cannot change what happens next
  comm_ = nullptr;
  bootstrap_->abort(exit_code, message);  // prints the message, ends every rank
  std::_Exit(exit_code);  // the bootstrap's abort does not return; should it, the rank still ends
}

bool NcclCommunicator::abandon_collectives() {
  // The gradients' collectives are on the device; the bootstrap carries
  // only blocking host ones, none of which is under way while unwinding.
  if (aborting_.load() || !claim_comm_abort()) return false;
  abort_comm_within_grace();
  return false;
}

void NcclCommunicator::abort_comm_within_grace() {
  // ncclCommAbort can block on a wedged device: past the grace the rank
  // ends, as abort()'s own watchdog would end it (the error being unwound
  // is not printed; this line says why the rank ended).
  std::atomic<bool> returned{false};
  std::thread watchdog([&returned] {
    const Clock::time_point until = Clock::now() + kAbortGrace;
    while (!returned.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (returned.load()) return;
    std::fprintf(stderr, "trainbench: ending on an error: ncclCommAbort did not return within %lld s\n",
                 static_cast<long long>(kAbortGrace.count()));
    std::fflush(stderr);
    std::_Exit(3);  // the environment's, as a timed-out collective
  });
  (void)ncclCommAbort(comm_);  // its result has nowhere to go: the error being unwound is the one to tell
  returned = true;
  watchdog.join();
  comm_ = nullptr;
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> bootstrap, int device,
                                                     double init_timeout_s) {
  return std::make_unique<NcclCommunicator>(std::move(bootstrap), device, init_timeout_s);
}

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X, Y, Z): X·1000 + Y·100 + Z up to 2.8, X·10000 + Y·100 + Z after.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace trainbench
