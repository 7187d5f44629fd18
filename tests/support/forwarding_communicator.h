// A communicator that hands every call to another one (the MPI ranks' own):
// the base of the tests' stand-ins that change one or two calls of a real
// multi-rank communicator and keep its collectives.
#pragma once

#include <cstdint>
#include <cstdlib>  // std::exit
#include <string>

#include "comm/communicator.h"

namespace trainbench::testing {

class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(Communicator& inner) : inner_(inner) {}
  const char* backend_name() const override { return inner_.backend_name(); }
  bool device_buffers() const override { return inner_.device_buffers(); }
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  int local_rank() const override { return inner_.local_rank(); }
  std::string host_name() const override { return inner_.host_name(); }
  void all_reduce_sum(float* data, int64_t count) override { inner_.all_reduce_sum(data, count); }
  void all_gather(double value, double* out) override { inner_.all_gather(value, out); }
  void barrier() override { inner_.barrier(); }
  void broadcast(void* data, int64_t bytes, int root) override { inner_.broadcast(data, bytes, root); }
  void reduce_scatter_sum(const float* send, float* recv, int64_t count) override {
    inner_.reduce_scatter_sum(send, recv, count);
  }
  void all_gather_floats(const float* send, float* recv, int64_t count) override {
    inner_.all_gather_floats(send, recv, count);
  }
  Ticket start_all_reduce_sum(float* data, int64_t count) override { return inner_.start_all_reduce_sum(data, count); }
  double wait(Ticket ticket) override { return inner_.wait(ticket); }
  double take_comm_seconds() override { return inner_.take_comm_seconds(); }
  double last_completion_time() const override { return inner_.last_completion_time(); }
  void all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) override {
    inner_.all_reduce(data, count, dtype, op);
  }
  Ticket start_all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) override {
    return inner_.start_all_reduce(data, count, dtype, op);
  }
  void* device_stream() const override { return inner_.device_stream(); }
  void wait_for_device_event(void* cuda_event) override { inner_.wait_for_device_event(cuda_event); }
  void set_timeout(double seconds) override { inner_.set_timeout(seconds); }
  void set_injected_delay(double seconds_per_request) override { inner_.set_injected_delay(seconds_per_request); }
  void set_context(const std::string& context) override { inner_.set_context(context); }
  [[noreturn]] void abort(int exit_code, const std::string& message) override {
    inner_.abort(exit_code, message);
    std::exit(exit_code);  // not reached: GCC does not see [[noreturn]] through the virtual call
  }
  bool abandon_collectives() override { return inner_.abandon_collectives(); }
  double waiting_since() const override { return inner_.waiting_since(); }

 protected:
  Communicator& inner_;
};

}  // namespace trainbench::testing
