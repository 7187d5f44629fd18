// A job with a stalled rank, for test_mpi_timeout. Under mpirun, the last
// rank stops taking part and rank 0 must end the whole job once the 2 s comm
// timeout has passed. argv[1] names what rank 0 is doing meanwhile:
//   barrier | all_reduce | background   (the last rank sleeps: it stalled)
//   died                                (the last rank is killed: it died)
//   never_joined                        (the last rank never reaches MPI_Init)
#include <signal.h>  // raise(SIGKILL)

#include <chrono>
#include <memory>
#include <string>
#include <thread>  // the stalled rank's sleep
#include <vector>

#include "comm/communicator.h"
#include "comm/launch_detect.h"  // the rank before MPI is up

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "never_joined") {
    if (trainbench::launcher_rank() == trainbench::launcher_task_count() - 1) {
      // As a rank stuck before main on storage that stopped responding.
      std::this_thread::sleep_for(std::chrono::seconds(600));  // ended by the launcher
      return 0;
    }
    // The start-up bounded by the 2 s.
    const std::unique_ptr<trainbench::Communicator> comm = trainbench::make_mpi_communicator(2);
    return 4;  // not reached: MPI_Init cannot complete without the last rank
  }
  // The start-up with the default bound: on a busy machine it may take a
  // while, and these modes are about the collectives' 2 s.
  std::unique_ptr<trainbench::Communicator> comm = trainbench::make_mpi_communicator();
  comm->set_timeout(2);
  comm->set_context("stall test");
  if (comm->rank() == comm->world_size() - 1) {
    if (mode == "died") raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(600));  // ended by rank 0's abort
    return 0;
  }
  std::vector<float> data(1024, 1.0f);
  if (mode == "barrier") {
    comm->barrier();
  } else if (mode == "all_reduce" || mode == "died") {
    comm->all_reduce_sum(data.data(), static_cast<int64_t>(data.size()));
  } else if (mode == "background") {
    comm->wait(comm->start_all_reduce_sum(data.data(), static_cast<int64_t>(data.size())));
  } else {
    return 2;
  }
  return 0;  // not reached: the collective cannot complete
}
