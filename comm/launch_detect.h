// What the launcher told this process through its environment, read before
// (and without) MPI: whether it is one rank of a parallel job, and of how many.
#pragma once

namespace trainbench {

// The number of tasks the launcher started (mpirun -np N, srun -n N), or 0
// when no launcher variable says. The MPI backend compares it with the world
// MPI reports: a mismatch means MPI could not reach the launcher.
int launcher_task_count();

// This process's rank as the launcher numbered it, or -1 when no launcher
// variable says: what a process can tell of its rank before MPI is up (or
// when it never comes up, as after a config error).
int launcher_rank();

// WORLD_SIZE where a torchrun-style launcher (torchrun, torch.distributed's
// launch, accelerate, deepspeed) started this process (RANK and WORLD_SIZE
// set) and no MPI launcher did, or torchrun itself did (GROUP_RANK,
// LOCAL_WORLD_SIZE and LOCAL_RANK too) whatever launcher started it, else
// 0. trainbench's ranks are MPI processes: under such a launcher each
// process trained as a one-rank job of its own, every one writing the same
// result.
int torchrun_world_size();

}  // namespace trainbench
