// A single rank: collectives are identities, so the trainer needs no special
// case for world size 1.
#include <unistd.h>  // gethostname

#include <cstdio>   // std::fprintf
#include <cstdlib>  // std::_Exit
#include <cstring>  // std::memcpy

#include "comm/communicator.h"

namespace trainbench {

namespace {
class LocalCommunicator final : public Communicator {
 public:
  const char* backend_name() const override { return "local"; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string host_name() const override {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
    return name;
  }
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(double value, double* out) override { out[0] = value; }
  void barrier() override {}
  void broadcast(void*, int64_t, int) override {}
  void reduce_scatter_sum(const float* send, float* recv, int64_t count) override {
    if (send != recv) std::memcpy(recv, send, sizeof(float) * static_cast<size_t>(count));
  }
  void all_gather_floats(const float* send, float* recv, int64_t count) override {
    if (send != recv) std::memcpy(recv, send, sizeof(float) * static_cast<size_t>(count));
  }
  Ticket start_all_reduce_sum(float*, int64_t) override { return next_ticket_++; }
  // One rank: a sum or an average of any element type is the data itself.
  void all_reduce(void*, int64_t, DataType, ReduceOp) override {}
  Ticket start_all_reduce(void*, int64_t, DataType, ReduceOp) override { return next_ticket_++; }
  double wait(Ticket) override { return 0.0; }
  double take_comm_seconds() override { return 0.0; }
  double last_completion_time() const override { return 0.0; }
  void set_timeout(double) override {}
  void set_context(const std::string&) override {}
  // Ends the process without unwinding, as the MPI and NCCL aborts do: the
  // caller is often a watchdog thread while the main thread is stuck (in a
  // device synchronize on a wedged GPU), and std::exit's static destructors
  // (the CUDA runtime's teardown among them) could block on that or run under
  // threads still live.
  [[noreturn]] void abort(int exit_code, const std::string& message) override {
    std::fflush(stdout);  // what the run printed so far comes before the message
    std::fprintf(stderr, "trainbench: %s\n", message.c_str());
    std::fflush(stderr);
    run_before_abort(exit_code, message);
    std::_Exit(exit_code);
  }

 private:
  Ticket next_ticket_ = 0;
};
}  // namespace

std::unique_ptr<Communicator> make_local_communicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace trainbench
