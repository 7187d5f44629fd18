// A build without an MPI library (TRAINBENCH_MPI=OFF, or AUTO with none found):
// the trainer then runs single-rank and says why when launched by mpirun.
#include "comm/communicator.h"

namespace trainbench {

std::unique_ptr<Communicator> make_mpi_communicator(double) { return nullptr; }

std::string mpi_library_version() { return ""; }

}  // namespace trainbench
