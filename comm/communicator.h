// NETWORK. The communicator every data-parallel step talks through. One
// implementation per backend, one file each: local (a single rank), mpi
// (host buffers, OpenMPI) and nccl (device buffers, nccl_communicator.cpp).
//
// Where the data lives: device_buffers() says. The host backends (local,
// mpi) take host pointers everywhere. The NCCL backend takes DEVICE pointers
// (of its device) for the data collectives — all_reduce_sum,
// reduce_scatter_sum, all_gather_floats, all_reduce, start_all_reduce_sum,
// start_all_reduce — and host memory for the small control collectives
// (all_gather of one double, barrier, broadcast), which it hands to the
// communicator it was bootstrapped with.
//
// Collectives never hang a job: each gives up after the timeout
// (set_timeout, comm.timeout_s) and aborts every rank with a message naming
// the collective and what the trainer was doing (set_context).
#pragma once

#include <algorithm>  // std::max_element, std::find_if, std::count: the reductions over ranks
#include <atomic>     // waiting_since, read by a watchdog thread
#include <chrono>     // PeerWait's clock
#include <cstdint>    // int64_t
#include <functional>  // std::hash: ranks_with_the_same_text; the action before an abort
#include <memory>     // std::unique_ptr
#include <numeric>    // std::accumulate for sum_over_ranks
#include <stdexcept>  // std::logic_error: what a host backend cannot do
#include <string>
#include <thread>     // run_before_abort: a second abort waits for the first
#include <vector>     // gather_from_ranks

namespace trainbench {

// Element types and reductions of the general all-reduce (all_reduce,
// start_all_reduce). The host backends do kFloat32 + kSum only.
enum class DataType { kFloat32, kBfloat16 };
enum class ReduceOp { kSum, kAvg };  // kAvg: the sum divided by world_size()

inline int64_t data_type_bytes(DataType dtype) { return dtype == DataType::kFloat32 ? 4 : 2; }
inline const char* data_type_name(DataType dtype) {
  return dtype == DataType::kFloat32 ? "fp32" : "bf16";
}
inline const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "avg"; }

// What a communicator's abort() runs before it ends the process, which it
// does without unwinding, with the abort's exit code and message: the
// trainer writes rank 0's partial result (trainer/partial_result.h) and
// removes its temporary folders there (the default run's synthetic shards,
// GBs, stayed in TMPDIR after every timed-out collective). Set once, in
// main, before any communicator exists. It must bound its own time.
using BeforeAbortAction = std::function<void(int exit_code, const std::string& message)>;
inline BeforeAbortAction& before_abort_action() {
  static auto* action = new BeforeAbortAction;  // never destroyed: an abort may come during the exit
  return *action;
}
inline void set_before_abort(BeforeAbortAction action) { before_abort_action() = std::move(action); }
// Each abort() calls it; the action runs once. An abort racing another, on
// another thread, waits for the first one's action (bounded: it may be
// stuck) before it ends the process in the middle of it.
inline void run_before_abort(int exit_code, const std::string& message) {
  static std::atomic<int> state{0};  // 0: not run, 1: running, 2: done
  int expected = 0;
  if (state.compare_exchange_strong(expected, 1)) {
    if (before_abort_action()) before_abort_action()(exit_code, message);
    state = 2;
    return;
  }
  // The trainer's action: the partial result (7 s, or twice that where a
  // signal's write came first), then the folders (8 s).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (state.load() == 1 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* backend_name() const = 0;
  // True when the data collectives take device pointers (NCCL), false for
  // host pointers (local, mpi). See the top of this file.
  virtual bool device_buffers() const { return false; }
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int local_rank() const = 0;  // rank among the processes on this host: picks the GPU
  virtual std::string host_name() const = 0;

  // --- Blocking collectives on host memory ---
  // In-place sum of `count` floats across all ranks.
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  // Gathers one double per rank into `out` (world_size() elements) on every rank.
  virtual void all_gather(double value, double* out) = 0;
  virtual void barrier() = 0;
  // `bytes` from `root` to every rank.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // `send` holds world_size() blocks of `count` floats; rank r receives the
  // sum over ranks of block r in `recv` (`count` floats). (ZeRO-1, bench comm.)
  // In place when send == recv: the result lands in the first block. The
  // NCCL backend also takes NCCL's own in-place form, recv == send + rank() ×
  // count (the result lands in this rank's block); the host backends do not
  // (MPI forbids overlapping buffers).
  virtual void reduce_scatter_sum(const float* send, float* recv, int64_t count) = 0;
  // Every rank's `count` floats, rank-major, into `recv` (world_size() × count).
  // In place when send == recv + rank() × count.
  virtual void all_gather_floats(const float* send, float* recv, int64_t count) = 0;

  // --- Overlapped gradient all-reduce ---
  // Starts an in-place sum of `count` floats and returns at once; it runs in
  // the background (the MPI backend's progress thread, NCCL's comm stream), overlapping with
  // compute. Requests complete in the order they were started. `data` must
  // stay untouched until wait() returns for it.
  using Ticket = int64_t;
  virtual Ticket start_all_reduce_sum(float* data, int64_t count) = 0;
  // Blocks until that request is done; returns the seconds it waited.
  virtual double wait(Ticket ticket) = 0;
  // Seconds the background requests spent in the collective (from the
  // transfer's start to its end, summed) since the last call; comm_s.
  // (NCCL: device time, from CUDA events around each request.)
  virtual double take_comm_seconds() = 0;
  // Steady-clock time (seconds, the clock of std::chrono::steady_clock) at
  // which the last completed background request ended; comm_exposed_s is
  // measured from it. (NCCL: when the host saw its completion event — in
  // wait(), or any later call that polls — so at most that late.)
  virtual double last_completion_time() const = 0;

  // --- Other element types and reductions (bf16 gradients, averages) ---
  // Blocking in-place all-reduce of `count` elements of `dtype`. The host
  // backends do fp32 sums only (they forward to all_reduce_sum) and throw
  // std::logic_error for anything else.
  virtual void all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) {
    require_fp32_sum("all_reduce", dtype, op);
    all_reduce_sum(static_cast<float*>(data), count);
  }
  // The background form: a ticket for wait(), counted in take_comm_seconds()
  // and last_completion_time(), ordered with start_all_reduce_sum's requests.
  virtual Ticket start_all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) {
    require_fp32_sum("start_all_reduce", dtype, op);
    return start_all_reduce_sum(static_cast<float*>(data), count);
  }

  // --- Device-side ordering (device_buffers() backends only) ---
  // The stream the collectives run on (a cudaStream_t), nullptr for host
  // backends. A caller may record its own events on it.
  virtual void* device_stream() const { return nullptr; }
  // The collectives issued after this call start on the device only once
  // `cuda_event` (a cudaEvent_t recorded on the caller's stream, e.g. "this
  // bucket's gradients are written") has completed; the host does not block.
  // Without it, the device data must be complete before a collective is
  // called (e.g. the caller synchronised its stream).
  virtual void wait_for_device_event(void* /*cuda_event*/) {
    throw std::logic_error(std::string("wait_for_device_event: the ") + backend_name() +
                           " backend has no device stream");
  }

  // --- Failure handling ---
  virtual void set_timeout(double seconds) = 0;
  // Fault injection (comm.inject_delay_ms): each background request, and
  // each reduce_scatter_sum and all_gather_floats (ZeRO-1's gradient
  // collectives), is held this long once its transfer has begun, as a slow
  // network would hold it; the time counts in comm_s and against the
  // timeout. Backends without it ignore it.
  virtual void set_injected_delay(double seconds_per_request) { (void)seconds_per_request; }
  // What the trainer is doing ("step 12"), for timeout and abort messages.
  virtual void set_context(const std::string& context) = 0;
  // Ends every rank of the job now with `message` on stderr and `exit_code`,
  // running the action set_before_abort gave once the message is out.
  [[noreturn]] virtual void abort(int exit_code, const std::string& message) = 0;
  // A run unwinding from an error calls it before its engine frees its
  // memory: the collectives in flight are abandoned without waiting for any
  // peer (cudaFree waits for the device, and a collective a peer never joins
  // would never finish), and those not begun are dropped. True when one may
  // still write the caller's host buffers once it returns (an MPI call
  // already under way cannot be cancelled): the caller keeps those buffers
  // until the job is aborted. Afterwards the communicator is only aborted or
  // destroyed.
  virtual bool abandon_collectives() { return false; }
  // Steady-clock seconds at which this rank began waiting for its peers in a
  // blocking call (a collective, wait()), 0 while it is not waiting. Read
  // from another thread: a watchdog (burnin) tells a rank held up by a peer
  // from one stuck in its own work, which is the one to blame.
  virtual double waiting_since() const { return waiting_since_.load(std::memory_order_relaxed); }

 protected:
  // Marks a blocking wait for peers for its scope (the outermost one counts).
  class PeerWait {
   public:
    explicit PeerWait(Communicator& comm) : comm_(comm), outer_(comm.waiting_since_.load() == 0.0) {
      if (outer_)
        comm_.waiting_since_ =
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }
    ~PeerWait() {
      if (outer_) comm_.waiting_since_ = 0.0;
    }
    PeerWait(const PeerWait&) = delete;
    PeerWait& operator=(const PeerWait&) = delete;

   private:
    Communicator& comm_;
    const bool outer_;
  };

 private:
  std::atomic<double> waiting_since_{0.0};

  void require_fp32_sum(const char* collective, DataType dtype, ReduceOp op) const {
    if (dtype == DataType::kFloat32 && op == ReduceOp::kSum) return;
    throw std::logic_error(std::string(collective) + ": the " + backend_name() +
                           " backend reduces fp32 sums only, not " + data_type_name(dtype) + " " +
                           reduce_op_name(op));
  }
};

// One double from every rank, on every rank (rank-major), and the two
// reductions of it the trainer reports: a collective, called by every rank.
inline std::vector<double> gather_from_ranks(Communicator& comm, double value) {
  std::vector<double> values(static_cast<size_t>(comm.world_size()));
  comm.all_gather(value, values.data());
  return values;
}
// The ranks whose `text` is this rank's, itself included, in rank order (a
// collective): each text hashed to 52 bits, which a double carries exactly.
inline std::vector<int> ranks_with_the_same_text(Communicator& comm, const std::string& text) {
  const double mine = static_cast<double>(std::hash<std::string>{}(text) & ((uint64_t{1} << 52) - 1));
  const std::vector<double> keys = gather_from_ranks(comm, mine);
  std::vector<int> ranks;
  for (size_t r = 0; r < keys.size(); ++r)
    if (keys[r] == mine) ranks.push_back(static_cast<int>(r));
  return ranks;
}
// Ranks on this rank's host, itself included (a collective): what shares
// one host's memory.
inline int ranks_on_this_host(Communicator& comm) {
  return static_cast<int>(ranks_with_the_same_text(comm, comm.host_name()).size());
}

// The hosts the job's ranks are on (a collective): the ranks that are their
// host's first (local rank 0), at least 1.
inline int hosts_of_job(Communicator& comm) {
  const std::vector<double> first_on_host = gather_from_ranks(comm, comm.local_rank() == 0 ? 1.0 : 0.0);
  return std::max(1, static_cast<int>(std::count(first_on_host.begin(), first_on_host.end(), 1.0)));
}

// `text` as rank `root` has it, on every rank: a collective.
inline std::string broadcast_string(Communicator& comm, std::string text, int root) {
  int64_t length = static_cast<int64_t>(text.size());
  comm.broadcast(&length, sizeof(length), root);
  text.resize(static_cast<size_t>(length));
  comm.broadcast(text.data(), length, root);
  return text;
}
// Every rank's `mine`, rank-major, on every rank: a collective of two small
// broadcasts per rank (the communicator moves bytes only by broadcast), for
// what is said once per run.
inline std::vector<std::string> strings_of_ranks(Communicator& comm, const std::string& mine) {
  std::vector<std::string> all;
  for (int r = 0; r < comm.world_size(); ++r)
    all.push_back(broadcast_string(comm, r == comm.rank() ? mine : std::string(), r));
  return all;
}
// Every rank's host name (rank-major), on every rank: a collective.
inline std::vector<std::string> host_names_of_ranks(Communicator& comm) {
  return strings_of_ranks(comm, comm.host_name());
}
// The first rank that has a reason ("" = none) and its words, on every rank:
// a collective. A failure one rank meets alone must stop every rank, in that
// rank's words, or its peers wait for it in their next collective until
// comm.timeout_s. rank is -1 when no rank has one. `kind` (> 0) travels with
// a reason, for a caller that tells kinds of failure apart (the machine's
// from the data's): the first rank's, 0 when no rank has one. `ranks`: how
// many ranks had one (the first among them).
struct RankReason {
  int rank = -1;
  std::string reason;
  int kind = 0;
  int ranks = 0;
};
inline RankReason first_reason_over_ranks(Communicator& comm, const std::string& mine, int kind = 1) {
  const std::vector<double> kinds = gather_from_ranks(comm, mine.empty() ? 0.0 : static_cast<double>(kind));
  const auto first = std::find_if(kinds.begin(), kinds.end(), [](double k) { return k != 0.0; });
  if (first == kinds.end()) return {};
  const int rank = static_cast<int>(first - kinds.begin());
  const int ranks = static_cast<int>(std::count_if(kinds.begin(), kinds.end(), [](double k) { return k != 0.0; }));
  return {rank, broadcast_string(comm, mine, rank), static_cast<int>(*first), ranks};
}
inline double sum_over_ranks(Communicator& comm, double value) {
  const std::vector<double> values = gather_from_ranks(comm, value);
  return std::accumulate(values.begin(), values.end(), 0.0);
}
inline double max_over_ranks(Communicator& comm, double value) {
  const std::vector<double> values = gather_from_ranks(comm, value);
  return *std::max_element(values.begin(), values.end());
}

// The one-rank communicator: every collective is the identity.
std::unique_ptr<Communicator> make_local_communicator();

// The MPI communicator: initialises MPI (MPI_THREAD_MULTIPLE, which it
// requires) and finalizes it when destroyed, so it can be made once per
// process (a second call throws std::logic_error). nullptr when this build
// has no MPI backend. Call it when launched by mpirun/srun, or always: a
// singleton MPI run is one rank. `timeout_s` (comm.timeout_s) bounds the
// collectives, as set_timeout does, and the start-up itself: a rank whose
// MPI_Init has not returned within it, because a peer never joined, ends
// with exit 3 and one line.
std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s = 300.0);

// The NCCL communicator for GPU `device` (one process per GPU: pass the
// local rank). `bootstrap` (mpi, or local for one rank) gives rank, world,
// local rank and host, broadcasts the ncclUniqueId, and carries the host
// control collectives (all_gather of a double, barrier, broadcast); the NCCL
// communicator owns it, and its own CUDA stream (device_stream()).
// `init_timeout_s` bounds ncclCommInitRankConfig. Any CUDA or NCCL failure,
// and any collective past the timeout, aborts every rank (exit 3) with a
// message naming the call or collective. nullptr when this build has no
// NCCL backend (TRAINBENCH_NCCL=OFF, no CUDA, or no NCCL found) — the
// bootstrap then goes with it: ask nccl_version() first when it must survive.
// One thread drives it (the device stream orders the work; the control
// collectives are as thread-safe as the bootstrap's). Destroy it before main
// returns: its destructor waits for the stream and finalizes NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> bootstrap,
                                                     int device, double init_timeout_s = 300.0);

// The NCCL library this binary runs with, "2.28.9"; "" when the NCCL backend
// is not built. Needs no GPU.
std::string nccl_version();

// Why the environment keeps the NCCL backend from keeping its timeouts (""
// when nothing does): NCCL_COMM_BLOCKING=1, which overrides the
// communicator's non-blocking config. Needs no GPU nor the NCCL backend.
std::string nccl_environment_problem();

// The MPI library this binary runs with, as it names itself in
// MPI_Get_library_version's first clause ("Open MPI v4.1.4"); "" when the MPI
// backend is not built. Callable before MPI_Init.
std::string mpi_library_version();

// True when the process was started by an MPI launcher (mpirun, srun --mpi).
bool launched_by_mpi();

}  // namespace trainbench
