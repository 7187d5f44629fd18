// NETWORK. The communicator every data-parallel step talks through. One
// implementation per backend, one file each: local (a single rank, here), mpi
// (host buffers) and nccl (device buffers) come with the data-parallel issue.
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
  virtual int local_rank() const = 0;  // picks the GPU on a multi-GPU node
  virtual std::string host_name() const = 0;
  // In-place sum of `count` floats across all ranks.
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  // Gathers one double per rank into `out` (world_size() elements) on every rank.
  virtual void all_gather(double value, double* out) = 0;
  virtual void barrier() = 0;
};

// The one-rank communicator: every collective is the identity.
std::unique_ptr<Communicator> make_local_communicator();

}  // namespace trainbench
