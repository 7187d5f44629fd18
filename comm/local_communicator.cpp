// A single rank: collectives are identities, so the trainer needs no special
// case for world size 1.
#include <unistd.h>  // gethostname

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
};
}  // namespace

std::unique_ptr<Communicator> make_local_communicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace trainbench
