#include "trainer/gpu_placement.h"

#include <string>
#include <vector>

namespace trainbench {

int gpu_for_local_rank(int local_rank, const GpuInventory& gpus) {
  return local_rank % static_cast<int>(gpus.gpus.size());
}

std::string engines_differ_over_ranks(Communicator& comm, const std::string& device, const std::string& why_cpu) {
  if (comm.world_size() < 2) return "";
  const double on_cuda = sum_over_ranks(comm, device == "cuda" ? 1.0 : 0.0);
  std::string mine;
  if (device != "cuda" && on_cuda > 0)
    mine = "rank " + std::to_string(comm.rank()) + " on " + comm.host_name() + " resolved train.device to the " +
           device + " engine (" + why_cpu + ") where " + std::to_string(static_cast<int>(on_cuda)) +
           " rank(s) train on GPUs: every rank needs the same engine (make a GPU visible to every rank, or set "
           "train.device cpu)";
  return first_reason_over_ranks(comm, mine).reason;
}

std::string gpu_sharing_reason(const std::vector<int>& sharing, const std::string& host, const GpuInfo& gpu,
                               int gpus_visible, int host_ranks) {
  std::string ranks;
  for (size_t i = 0; i < sharing.size(); ++i)
    ranks += (i == 0 ? "" : i + 1 == sharing.size() ? " and " : ", ") + std::to_string(sharing[i]);
  const std::string known_as = !gpu.uuid.empty() ? gpu.uuid : "PCI " + gpu.pci_bus_id;
  const std::string visible = std::to_string(gpus_visible);
  // More ranks than GPUs: the local rank wrapped round. As many or fewer:
  // each rank was shown the same GPU (one CUDA_VISIBLE_DEVICES for all).
  const std::string what_to_do =
      host_ranks > gpus_visible
          ? "the host runs " + std::to_string(host_ranks) + " ranks and each sees " + visible +
                " GPU(s): run at most " + visible + " rank(s) per host (mpirun --npernode " + visible +
                ", srun --ntasks-per-node " + visible + "), or, where the host has more GPUs than a rank sees (one "
                "CUDA_VISIBLE_DEVICES exported to every rank), give each rank its own (srun --gpus-per-task 1, or "
                "CUDA_VISIBLE_DEVICES set from the local rank)"
          : "each of the host's " + std::to_string(host_ranks) + " ranks sees " + visible +
                " GPU(s), this one among them: give each rank its own (srun --gpus-per-task 1, or "
                "CUDA_VISIBLE_DEVICES set from the local rank)";
  return "ranks " + ranks + " on " + host + " would train on one GPU (GPU " + std::to_string(gpu.index) + ", " +
         gpu.name + ", " + known_as + "), sharing its compute and memory, which NCCL refuses: " + what_to_do;
}

std::string gpu_shared_over_ranks(Communicator& comm, const GpuInfo* gpu, int gpus_visible) {
  if (comm.world_size() < 2) return "";
  // The UUID names a GPU across hosts; the PCI bus only within its host.
  const std::string identity = gpu == nullptr           ? ""
                               : !gpu->uuid.empty()       ? gpu->uuid
                               : !gpu->pci_bus_id.empty() ? comm.host_name() + " " + gpu->pci_bus_id
                                                          : "";
  const std::vector<int> sharing = ranks_with_the_same_text(comm, identity);
  const int host_ranks = ranks_on_this_host(comm);
  const std::string mine = identity.empty() || sharing.size() < 2
                               ? ""
                               : gpu_sharing_reason(sharing, comm.host_name(), *gpu, gpus_visible, host_ranks);
  return first_reason_over_ranks(comm, mine).reason;
}

}  // namespace trainbench
