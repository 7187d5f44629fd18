// Which GPU each rank trains on, and the two checks on it that must pass on
// every rank alike before anything is allocated: every rank trains on the
// same engine, and no two ranks on one GPU.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/device_info.h"  // GpuInventory

namespace trainbench {

// The GPU of the rank with `local_rank` on its host: one process per GPU,
// the rank's place on its host picks it (the index among the GPUs this
// process sees; with CUDA_VISIBLE_DEVICES set per rank, its only one).
int gpu_for_local_rank(int local_rank, const GpuInventory& gpus);

// What says that the ranks resolved train.device to different engines
// ("" when alike): the words of the first rank that took the cpu engine
// where others took cuda, on every rank (a collective). `device` is this
// rank's resolved engine, `why_cpu` why it has no GPU. Under
// train.device auto a rank whose GPUs are hidden (CUDA_VISIBLE_DEVICES,
// a node without its driver) trained on its CPU beside the others, and
// the two kinds of rank met in different collectives.
std::string engines_differ_over_ranks(Communicator& comm, const std::string& device, const std::string& why_cpu);

// The sentence for ranks `sharing` (this rank's among them, in rank order)
// all training on `gpu` of host `host`, where each rank sees
// `gpus_visible` GPU(s) and the host runs `host_ranks` ranks.
std::string gpu_sharing_reason(const std::vector<int>& sharing, const std::string& host, const GpuInfo& gpu,
                               int gpus_visible, int host_ranks);

// What says that two ranks train on one physical GPU ("" when none do), on
// every rank (a collective). `gpu` is this rank's, nullptr on the cpu
// engine. The GPU is known by its UUID, or its host and PCI bus where the
// UUID is unknown; a GPU known by neither is not compared. Two ranks on one
// GPU share its compute and memory, so every per-GPU figure is wrong, and
// NCCL refuses them in its init ("Duplicate GPU detected"), after the
// engine's memory is allocated.
std::string gpu_shared_over_ranks(Communicator& comm, const GpuInfo* gpu, int gpus_visible);

}  // namespace trainbench
