// NETWORK. What in the environment keeps NCCL from running as trainbench
// drives it. Built with or without the NCCL backend: `comm.backend=nccl` is
// checked before the build is asked whether it has one.
#include <cstdlib>  // std::getenv
#include <string>

#include "comm/communicator.h"

namespace trainbench {

std::string nccl_environment_problem() {
  // ncclCommInitRankConfig takes NCCL_COMM_BLOCKING=1 over the config's
  // blocking = 0: every NCCL call then waits inside NCCL, where no deadline
  // of ours reaches it, and a dead peer hangs the job.
  const char* blocking = std::getenv("NCCL_COMM_BLOCKING");
  if (blocking != nullptr && std::string(blocking) == "1")
    return "NCCL_COMM_BLOCKING=1 makes every NCCL call block inside NCCL, where comm.timeout_s cannot end a "
           "collective a dead or stalled rank never finishes: unset it (trainbench waits on NCCL's non-blocking "
           "calls itself, each within comm.timeout_s)";
  return "";
}

}  // namespace trainbench
