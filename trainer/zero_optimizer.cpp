#include "trainer/zero_optimizer.h"

#include <algorithm>  // std::min
#include <chrono>
#include <cmath>      // std::sqrt
#include <cstring>    // std::memmove
#include <limits>     // MPI's int counts
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/report.h"  // human_count

namespace trainbench {

int64_t zero_padded_elements(int64_t elements, int world) {
  return padded_count(elements, zero_padding_multiple(world));
}

std::string zero_block_past_mpi_count(int64_t elements, int world) {
  constexpr int64_t kMaxMpiCount = std::numeric_limits<int>::max();
  const int64_t block = zero_padded_elements(elements, world) / world;
  if (block <= kMaxMpiCount) return "";
  int enough = world + 1;
  while (zero_padded_elements(elements, enough) / enough > kMaxMpiCount) ++enough;
  return "comm.zero=1 on the MPI backend: each rank's block of the " + human_count(static_cast<double>(elements)) +
         " gradients is " + std::to_string(block) + " elements, past MPI's int count (" +
         std::to_string(kMaxMpiCount) + "): run at least " + std::to_string(enough) +
         " ranks, comm.zero=0 or the NCCL backend";
}

EngineOptions::OptimizerShard zero_shard(int64_t elements, int rank, int world) {
  const int64_t block = zero_padded_elements(elements, world) / world;
  const int64_t begin = std::min<int64_t>(rank * block, elements);
  return {begin, std::min<int64_t>(begin + block, elements)};
}

ZeroOneOptimizer::ZeroOneOptimizer(Communicator& comm, TrainingEngine& engine,
                                   int64_t padded_elements)
    : comm_(comm),
      engine_(engine),
      on_device_(comm.device_buffers()),
      gradients_(on_device_ ? engine.device_gradient_buffer() : engine.host_gradient_buffer()),
      parameters_(on_device_ ? engine.device_parameter_buffer() : engine.host_parameter_buffer()),
      block_(padded_elements / comm.world_size()),
      shard_(zero_shard(engine.layout().trainable_params(), comm.rank(), comm.world_size())) {
  if (gradients_ == nullptr || parameters_ == nullptr)
    throw std::runtime_error(std::string("comm.zero=1: comm.backend ") + comm.backend_name() + " works on " +
                             (on_device_ ? "device" : "host") + " buffers, and the " + engine.backend_name() +
                             " engine does not keep its parameters and gradients there");
  if (engine.layout().trainable_params() != engine.layout().total_params())
    throw std::runtime_error("comm.zero=1 shards every parameter: it does not combine with frozen ones");
  if (padded_elements != zero_padded_elements(engine.layout().trainable_params(), comm.world_size()))
    throw std::logic_error("ZeRO-1: the buffers are not padded to whole blocks (zero_padded_elements)");
  // An engine built without ZeRO-1's options (its buffers not padded, its
  // AdamW over every parameter): the all-gather would write past its buffer
  // and AdamW would update from gradients only this rank's block of was
  // reduced. The caller's padded_elements alone cannot tell.
  const auto held = engine.optimizer_shard();
  if (held.begin != shard_.begin || held.end != shard_.end)
    throw std::logic_error("ZeRO-1: the engine was not built for rank " + std::to_string(comm.rank()) +
                           "'s shard (EngineOptions::optimizer_shard, pad_buffers_to)");
}

float zero_shard_step_alone(TrainingEngine& engine, const AdamWSettings& settings, int64_t step) {
  const OptimizerShard shard = engine.optimizer_shard();
  const double norm = shard.end > shard.begin ? std::sqrt(engine.gradient_sum_of_squares(shard.begin, shard.end)) : 0.0;
  engine.optimizer_step_shard(settings, step, norm);
  engine.refresh_working_parameters();
  return static_cast<float>(norm);
}

float ZeroOneOptimizer::step(const AdamWSettings& settings, int64_t step, double* comm_seconds) {
  using Clock = std::chrono::steady_clock;
  const int rank = comm_.rank();
  float* own_block = gradients_ + rank * block_;

  // The sum of this rank's block must end where the block lives (the rest of
  // the buffer is not read again). A device communicator (NCCL) takes NCCL's
  // in-place form, the result in this rank's block; on the device, backward's
  // kernels finish first, so the time below is the collective's. MPI's
  // in-place form puts it in the first block, moved afterwards.
  if (on_device_) engine_.synchronize();
  const Clock::time_point scatter_begin = Clock::now();
  comm_.reduce_scatter_sum(gradients_, on_device_ ? own_block : gradients_, block_);
  const Clock::time_point scatter_end = Clock::now();
  if (!on_device_ && rank > 0) std::memmove(own_block, gradients_, sizeof(float) * static_cast<size_t>(block_));

  // The global norm from every shard's sum of squares (an empty shard adds 0).
  const double mine = shard_.end > shard_.begin
                          ? engine_.gradient_sum_of_squares(shard_.begin, shard_.end)
                          : 0.0;
  std::vector<double> sums(static_cast<size_t>(comm_.world_size()));
  const Clock::time_point norm_begin = Clock::now();
  comm_.all_gather(mine, sums.data());
  const Clock::time_point norm_end = Clock::now();
  double total = 0;
  for (double s : sums) total += s;  // rank order: the same sum on every rank
  const double norm = std::sqrt(total);

  engine_.optimizer_step_shard(settings, step, norm);

  const Clock::time_point gather_begin = Clock::now();
  comm_.all_gather_floats(parameters_ + rank * block_, parameters_, block_);
  const Clock::time_point gather_end = Clock::now();
  engine_.refresh_working_parameters();  // the bf16 copy of a mixed-precision engine
  // All three collectives: the norm's all-gather of one double each is
  // small, but a rank's wait there for a peer is network time (it read as
  // other_s).
  *comm_seconds = std::chrono::duration<double>((scatter_end - scatter_begin) + (norm_end - norm_begin) +
                                                (gather_end - gather_begin))
                      .count();
  return static_cast<float>(norm);
}

}  // namespace trainbench
