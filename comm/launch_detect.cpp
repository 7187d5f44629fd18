// launched_by_mpi() from the launchers' environment variables, so a plain
// `trainbench run` stays a one-rank job that never initialises MPI.
#include "comm/launch_detect.h"

#include <cstdlib>  // std::getenv, std::strtol

#include "comm/communicator.h"

namespace trainbench {

namespace {

// A positive integer from the environment, or 0.
int positive_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return *end == '\0' && parsed > 0 && parsed < (1L << 30) ? static_cast<int>(parsed) : 0;
}

// A non-negative integer from the environment, or -1.
int index_env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return *end == '\0' && parsed >= 0 && parsed < (1L << 30) ? static_cast<int>(parsed) : -1;
}

}  // namespace

int launcher_rank() {
  // The same launchers, in the same order, as launcher_task_count.
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    if (const int rank = index_env(name); rank >= 0) return rank;
  }
  return -1;
}

int launcher_task_count() {
  // OpenMPI's mpirun/prterun; MPICH and Intel MPI (Hydra, PMI-1/2, and srun
  // --mpi=pmi2); MVAPICH; then a Slurm step without an MPI plugin.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE",
                           "SLURM_STEP_NUM_TASKS"}) {
    if (const int tasks = positive_env(name)) return tasks;
  }
  return 0;
}

int torchrun_world_size() {
  if (std::getenv("RANK") == nullptr) return 0;
  const int world = positive_env("WORLD_SIZE");
  // torchrun's own children (it sets GROUP_RANK and LOCAL_WORLD_SIZE beside
  // LOCAL_RANK, as Lightning tells them) inherit the variables of the MPI
  // task that started torchrun: under `srun --mpi=pmix -n1 torchrun` every
  // child has PMIX_RANK=0, one MPI process started N times.
  if (std::getenv("GROUP_RANK") != nullptr && std::getenv("LOCAL_WORLD_SIZE") != nullptr &&
      std::getenv("LOCAL_RANK") != nullptr)
    return world;
  if (launched_by_mpi()) return 0;
  // A launcher's tasks that are these processes are numbered by it. Not a
  // Slurm step of one task that started torchrun (`srun -n1 torchrun
  // --nproc-per-node=2 ...`: SLURM_STEP_NUM_TASKS=1), whose children each
  // trained alone, all writing one --out.
  return world == launcher_task_count() ? 0 : world;
}

bool launched_by_mpi() {
  // PMIx launchers (srun --mpi=pmix, prterun) set PMIX_RANK but not always a
  // size; Hydra sets MPI_LOCALNRANKS. Any of these means a launcher that MPI
  // can talk to started us, even as a single rank.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                           "MV2_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  // A Slurm step of several tasks: each task is one rank of one job. Running
  // them as independent one-rank jobs would measure the wrong thing in
  // silence, so they go through MPI, which either wires them up (an MPI built
  // with Slurm's PMI) or fails with the launcher/world mismatch message.
  // SLURM_STEP_NUM_TASKS is only set inside `srun`, not in the batch script.
  return std::getenv("SLURM_PROCID") != nullptr && positive_env("SLURM_STEP_NUM_TASKS") > 1;
}

}  // namespace trainbench
