// Where a collective benchmark's buffers live: the memory the communicator
// takes (device_buffers(): host memory for local and mpi, its GPU for nccl).
// The harness (collective_bench.cpp) fills and checks a host view and hands
// the collective data(); for host memory the two are one and the copies
// between them are nothing, for a GPU they are explicit copies made outside
// the timed loop. So bench comm, the network ceiling and burn-in's fabric
// check time NCCL on device buffers with the same harness and data check
// as MPI on host buffers.
#pragma once

#include <cstdint>  // int64_t
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace trainbench {

class BenchBuffer {
 public:
  virtual ~BenchBuffer() = default;
  BenchBuffer() = default;
  BenchBuffer(const BenchBuffer&) = delete;
  BenchBuffer& operator=(const BenchBuffer&) = delete;

  // What the collective is handed: a host or a device pointer, as the
  // communicator takes them.
  virtual float* data() = 0;
  // The host view the harness fills before and checks after a collective.
  virtual std::vector<float>& host() = 0;
  // host() → data(), complete when this returns.
  virtual void to_collective() = 0;
  // data() → host(), after the collectives on data() have completed (the
  // communicator's blocking calls and wait() return only then).
  virtual void to_host() = 0;
  // data() set to zeros, complete when this returns (the host view is left
  // as it is).
  virtual void zero() = 0;
};

// `count` floats where `comm` takes its data collectives' buffers. A GPU
// allocation goes to the current CUDA device, which the NCCL communicator
// set to its own; a failed one ends the job through comm.abort (exit 3)
// naming the size and the free memory.
std::unique_ptr<BenchBuffer> make_bench_buffer(Communicator& comm, int64_t count);

// Bytes of free memory on the device `comm`'s buffers live on (the current
// CUDA device), or -1 for a host-buffer communicator, whose memory the
// callers size from the host's own figures. `why` gets the reason when the
// device cannot be asked (then -1 too).
int64_t free_bench_buffer_bytes(const Communicator& comm, std::string* why = nullptr);

// What the bench leaves free on the GPU beside its buffers, for NCCL
// itself: its channel buffers are set up at the first collective of a kind
// (lazily, since NCCL 2.22), a few hundred MiB at most.
constexpr int64_t kDeviceBenchReserveBytes = int64_t{1} << 30;

// Why this rank cannot put `bytes` of bench buffers beside what its GPU
// already holds (a run's model and activations), "" when it can or when
// the communicator takes host buffers: the GPU's free memory less
// kDeviceBenchReserveBytes, and `host_room_bytes` (this rank's share of the
// host's available memory; -1: unknown) for their host copies, as large.
// Callers agree over ranks (first_reason_over_ranks) before measuring,
// since every rank must take part.
std::string device_bench_room_shortfall(const Communicator& comm, int64_t bytes, int64_t host_room_bytes);

// A device-buffer backend's buffer: on the current CUDA device. Defined in
// device_bench_buffer.cpp where the NCCL backend (which brings the CUDA
// runtime) is built; elsewhere no communicator takes device buffers and it
// throws std::logic_error.
std::unique_ptr<BenchBuffer> make_device_bench_buffer(Communicator& comm, int64_t count);
// cudaMemGetInfo's free bytes on the current device, or -1 with `why`.
int64_t free_device_bench_bytes(std::string* why);

// A buffer in host memory of its own, apart from its host view, copied as a
// device buffer's is: a communicator test's stand-in for device memory,
// which shows the harness moving the data both ways. to_collective() leaves
// NaN in the host view, as a GPU would never write it.
std::unique_ptr<BenchBuffer> make_separate_host_bench_buffer(int64_t count);

}  // namespace trainbench
