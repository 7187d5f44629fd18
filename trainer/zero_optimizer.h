// ZeRO stage 1 (comm.zero: 1): each rank keeps the AdamW state of one
// world-size-th of the parameters. After backward the gradients are
// reduce-scattered (each rank gets the global sum of its shard), the global
// gradient norm is assembled from every shard's sum of squares, each rank
// updates its shard, and the parameters are all-gathered back in place.
// The buffers are padded to whole blocks by the engine
// (EngineOptions::pad_buffers_to = zero_padding_multiple), so any model size
// works. With a host
// communicator (mpi) the engine's host buffers take part (the CPU engine);
// with a device one (nccl) its device buffers: the CUDA engine's fp32
// gradients and fp32 master weights, whose bf16 copy it then refreshes.
#pragma once

#include <cstdint>  // int64_t

#include "comm/communicator.h"
#include "kernels/engine.h"

namespace trainbench {

// Every block is a whole number of kZeroBlockAlignment elements (256 bytes
// of fp32), so every rank's shard starts on 256 bytes of the buffers: with
// blocks of plain ceil(elements / world), a model whose size is not a
// multiple of 4·world left the shards of ranks > 0 unaligned, and their AdamW
// and gradient-norm kernels off the 16-byte packs: h200-llama8b-4l over 24
// GPUs (3 nodes of 8) had blocks of 80,130,219 elements.
inline constexpr int64_t kZeroBlockAlignment = 64;

// What the buffers are padded to (EngineOptions::pad_buffers_to) so that they
// hold `world` whole blocks.
inline int64_t zero_padding_multiple(int world) { return kZeroBlockAlignment * world; }

// The padded length of `elements` gradient elements: world · block.
int64_t zero_padded_elements(int64_t elements, int world);

// Why MPI cannot carry ZeRO-1's step of `elements` gradient elements over
// `world` ranks ("" when it can): its reduce-scatter and all-gather move a
// block per rank in one call, and MPI's counts are int (NCCL's are
// size_t). The smallest rank count whose block fits is named.
std::string zero_block_past_mpi_count(int64_t elements, int world);

// Rank `rank`'s shard of `elements` gradient elements: blocks of
// ceil(elements / world) rounded up to kZeroBlockAlignment, the last ones
// shorter (or empty).
EngineOptions::OptimizerShard zero_shard(int64_t elements, int rank, int world);

// The compute of a ZeRO-1 step without its collectives: this engine's shard
// updated, clipped by the norm of that shard's gradients alone. For a
// measurement of the step with nothing to wait for (the compute ceiling, on
// a local communicator), whose state is put back after it; not training:
// the other shards' parameters are left as they were. Returns that norm.
float zero_shard_step_alone(TrainingEngine& engine, const AdamWSettings& settings, int64_t step);

class ZeroOneOptimizer {
 public:
  // Throws std::runtime_error when the engine cannot take part (its buffers
  // are not where the communicator works, frozen parameters) and
  // std::logic_error when they are not padded to whole blocks.
  ZeroOneOptimizer(Communicator& comm, TrainingEngine& engine, int64_t padded_elements);

  // One optimizer step; returns the global gradient norm before clipping.
  // *comm_seconds receives the time spent in the two collectives.
  float step(const AdamWSettings& settings, int64_t step, double* comm_seconds);

 private:
  Communicator& comm_;
  TrainingEngine& engine_;
  bool on_device_;      // the communicator takes device pointers (nccl)
  float* gradients_;    // the engine's flat gradients, where the communicator works
  float* parameters_;   // its fp32 (master) parameters, likewise
  int64_t block_;  // padded elements / world: every rank's block
  EngineOptions::OptimizerShard shard_;
};

}  // namespace trainbench
