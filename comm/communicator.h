// NETWORK. The communicator every data-parallel step talks through. One
// implementation per backend, one file each: local (a single rank), mpi
// (host buffers, OpenMPI) and nccl (device buffers, with its issue).
//
// Collectives never hang a job: each gives up after the timeout
// (set_timeout, comm.timeout_s) and aborts every rank with a message naming
// the collective and what the trainer was doing (set_context).
#pragma once

#include <cstdint>  // int64_t
#include <memory>   // std::unique_ptr
#include <string>

namespace trainbench {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* backend_name() const = 0;
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
  // In place when send == recv: the result lands in the first block.
  virtual void reduce_scatter_sum(const float* send, float* recv, int64_t count) = 0;
  // Every rank's `count` floats, rank-major, into `recv` (world_size() × count).
  // In place when send == recv + rank() × count.
  virtual void all_gather_floats(const float* send, float* recv, int64_t count) = 0;

  // --- Overlapped gradient all-reduce ---
  // Starts an in-place sum of `count` floats and returns at once; it runs in
  // the background (the MPI backend's progress thread), overlapping with
  // compute. Requests complete in the order they were started. `data` must
  // stay untouched until wait() returns for it.
  using Ticket = int64_t;
  virtual Ticket start_all_reduce_sum(float* data, int64_t count) = 0;
  // Blocks until that request is done; returns the seconds it waited.
  virtual double wait(Ticket ticket) = 0;
  // Seconds the background requests spent in the collective (from the
  // transfer's start to its end, summed) since the last call; comm_s.
  virtual double take_comm_seconds() = 0;
  // Steady-clock time (seconds, the clock of std::chrono::steady_clock) at
  // which the last completed background request ended; comm_exposed_s is
  // measured from it.
  virtual double last_completion_time() const = 0;

  // --- Failure handling ---
  virtual void set_timeout(double seconds) = 0;
  // What the trainer is doing ("step 12"), for timeout and abort messages.
  virtual void set_context(const std::string& context) = 0;
  // Ends every rank of the job now with `message` on stderr and `exit_code`.
  [[noreturn]] virtual void abort(int exit_code, const std::string& message) = 0;
};

// The one-rank communicator: every collective is the identity.
std::unique_ptr<Communicator> make_local_communicator();

// The MPI communicator: initialises MPI (MPI_THREAD_MULTIPLE, which it
// requires) and finalizes it when destroyed, so it can be made once per
// process (a second call throws std::logic_error). nullptr when this build
// has no MPI backend. Call it when launched by mpirun/srun, or always: a
// singleton MPI run is one rank.
std::unique_ptr<Communicator> make_mpi_communicator();

// True when the process was started by an MPI launcher (mpirun, srun --mpi).
bool launched_by_mpi();

}  // namespace trainbench
