// Data parallelism's gradient all-reduce, as PyTorch DDP does it: the flat
// gradient buffer is cut in reverse layer order into buckets (the first
// small, then comm.bucket_mb each), and a bucket's all-reduce starts as soon
// as backward has written all of its gradients, overlapping with the rest of
// backward. The optimizer waits for all of them.
//
// Host buffers (local, mpi) or device buffers (nccl, comm.device_buffers()):
// on the device, backward's readiness callback comes when the work producing
// a bucket is enqueued, not done, so before a bucket's all-reduce the comm
// stream is made to wait for an event recorded on the compute stream then.
#pragma once

#include <cstdint>     // int64_t
#include <functional>  // RecordComputeEventFn
#include <vector>

#include "comm/communicator.h"

namespace trainbench {

// Elements [begin, end) of the flat gradient buffer.
struct GradientBucket {
  int64_t begin = 0;
  int64_t end = 0;
};

// Buckets in the order backward finishes them: bucket 0 holds the end of the
// buffer (the LM head, whose gradients come first), the last one starts at
// element 0 (the embedding). The first bucket is first_bucket_bytes (DDP: 1
// MiB) or bucket_bytes if smaller, so communication starts early; the others
// are bucket_bytes; the last takes what is left. Sizes in fp32 gradient bytes.
std::vector<GradientBucket> plan_gradient_buckets(int64_t elements, int64_t bucket_bytes,
                                                  int64_t first_bucket_bytes = 1 << 20);

// The fp32 byte size of each bucket one step all-reduces: the buckets above
// with overlap, one bucket of the whole buffer without (comm.overlap=false).
std::vector<int64_t> gradient_bucket_bytes(int64_t elements, double bucket_mb, bool overlap);

// Records an event on the compute stream at this moment and returns it (a
// cudaEvent_t as void*): TrainingEngine::record_compute_event.
using RecordComputeEventFn = std::function<void*()>;

// One optimizer step's gradient all-reduce (fp32 sums, in place) over the flat
// gradient buffer: host memory for a host-buffer communicator, device memory
// for a device-buffer one (comm.device_buffers()).
class GradientSync {
 public:
  // overlap=false: one all-reduce of the whole buffer once backward is done
  // (what the report compares overlap against). With device buffers,
  // record_compute_event is required: the comm stream waits for its event
  // before the buckets that have become ready (std::invalid_argument without it).
  GradientSync(Communicator& comm, float* gradients, int64_t elements, int64_t bucket_bytes,
               bool overlap, RecordComputeEventFn record_compute_event = nullptr);

  // Backward's readiness callback for the step's last micro-batch: starts
  // every bucket that [ready_from, end) now covers.
  void on_gradients_ready(int64_t ready_from);
  // After backward: starts what is left and waits for everything (on the
  // host, so that work enqueued afterwards — the optimizer — is ordered after
  // the collectives on any stream). Returns the seconds this call waited.
  double finish();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }

 private:
  // Starts every bucket not yet started that lies within [ready_from, end).
  void start_buckets_ready_from(int64_t ready_from);

  Communicator& comm_;
  float* gradients_;
  bool overlap_;
  RecordComputeEventFn record_compute_event_;  // device buffers only
  std::vector<GradientBucket> buckets_;
  size_t started_ = 0;  // buckets started this step
  std::vector<Communicator::Ticket> tickets_;
};

}  // namespace trainbench
