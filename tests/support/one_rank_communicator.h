// A communicator of one rank that moves nothing: the base of the tests' fakes,
// which override only the calls they record.
#pragma once

#include <cstdint>
#include <stdexcept>  // the device stand-in's abort
#include <string>

#include "comm/communicator.h"

namespace trainbench::testing {

class OneRankCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string host_name() const override { return "test"; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(double value, double* out) override { out[0] = value; }
  void barrier() override {}
  void broadcast(void*, int64_t, int) override {}
  void reduce_scatter_sum(const float*, float*, int64_t) override {}
  void all_gather_floats(const float*, float*, int64_t) override {}
  double take_comm_seconds() override { return 0.0; }
  double last_completion_time() const override { return 0.0; }
  void set_timeout(double) override {}
  void set_context(const std::string&) override {}
};

// One that takes device buffers, as NCCL's does, and moves nothing: where
// the room for the bench's buffers is asked (comm/bench_buffer.h).
class DeviceBufferStandIn final : public OneRankCommunicator {
 public:
  const char* backend_name() const override { return "device stand-in"; }
  bool device_buffers() const override { return true; }
  Ticket start_all_reduce_sum(float*, int64_t) override { return 0; }
  double wait(Ticket) override { return 0.0; }
  [[noreturn]] void abort(int, const std::string& message) override { throw std::runtime_error(message); }
};

}  // namespace trainbench::testing
