// The launcher line the multi-rank tests run: `ranks` processes on this
// machine, as root where CI runs as root, more ranks than cores, and shared
// memory only (no network interface is probed), under a hard time limit so a
// hung job fails the test instead of the CI run.
#pragma once

#include <string>

namespace trainbench::testing {

inline std::string mpirun(int ranks, const std::string& command, int time_limit_s = 120) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
         "OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader timeout " +
         std::to_string(time_limit_s) + " " MPIEXEC " -n " + std::to_string(ranks) + " " + command;
}

}  // namespace trainbench::testing
