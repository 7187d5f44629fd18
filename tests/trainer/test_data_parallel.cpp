// Data parallelism on real MPI ranks (run under mpirun -np 2 and 4): every
// rank trains on its slice of a global batch; the all-reduced gradients, the
// loss and the parameters must match one rank training on the whole global
// batch, overlap on must match overlap off, and a rank whose parameters drift
// must be caught by the consistency check. Only the order of the floating-
// point sums differs between the sides, so gradients agree to 1e-5 relative
// (L2) and parameters after 8 AdamW steps to 1e-3 of the distance they moved.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>    // std::atoi: --ranks=N
#include <cstring>    // std::memcmp, std::memmove, std::strncmp
#include <memory>
#include <stdexcept>  // std::logic_error
#include <string>
#include <utility>    // std::exchange
#include <vector>

#include "comm/communicator.h"
#include "kernels/cpu/cpu_engine.h"  // CpuEngine, stood in for a device engine
#include "kernels/engine.h"
#include "tests/support/forwarding_communicator.h"
#include "tests/support/token_batches.h"
#include "trainer/config.h"
#include "trainer/gpu_placement.h"
#include "trainer/gradient_sync.h"
#include "trainer/train_loop.h"
#include "trainer/zero_optimizer.h"

namespace trainbench {
namespace {

Communicator* g_comm = nullptr;  // one MPI communicator for the whole binary

constexpr int64_t kRowsPerRank = 2;

Config tiny_config(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all = {"train.steps=8", "train.warmup_steps=0", "train.threads=1",
                                  "comm.check_every=1", "comm.bucket_mb=0.05"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return load_config("tiny", all);
}

std::unique_ptr<TrainingEngine> make_cpu_engine(const Config& config, int64_t micro_batch,
                                                Communicator* zero_over = nullptr) {
  EngineOptions options;
  options.shape = config.model;
  options.micro_batch = micro_batch;
  options.device = "cpu";
  options.threads = 1;
  options.lora = lora_spec(config);
  if (zero_over != nullptr) {  // as the CLI sets up comm.zero=1
    options.optimizer_shard = zero_shard(make_layout(options).trainable_params(), zero_over->rank(),
                                         zero_over->world_size());
    options.pad_buffers_to = zero_padding_multiple(zero_over->world_size());
  }
  auto engine = make_engine(options);
  engine->init_parameters(static_cast<uint64_t>(config.train.seed));
  return engine;
}

// Step s's global batch: world × kRowsPerRank rows, the same on every rank.
// A rank's source hands out its rows; the reference takes them all.
class GlobalBatchSource final : public BatchSource {
 public:
  GlobalBatchSource(const Config& config, int64_t first_row, int64_t rows, int64_t world)
      : config_(config), first_row_(first_row), rows_(rows), world_(world) {}
  const HostBatch& next(double* wait_seconds) override {
    if (wait_seconds != nullptr) *wait_seconds = 0;
    EngineOptions global;
    global.shape = config_.model;
    global.micro_batch = world_ * kRowsPerRank;
    const testing::Tokens all = testing::random_tokens(global, static_cast<uint32_t>(1000 + step_++));
    const int64_t T = config_.model.seq_len;
    tokens_.assign(all.inputs.begin() + first_row_ * T, all.inputs.begin() + (first_row_ + rows_) * T);
    tokens_.insert(tokens_.end(), all.targets.begin() + first_row_ * T,
                   all.targets.begin() + (first_row_ + rows_) * T);
    batch_ = HostBatch{tokens_.data(), tokens_.data() + rows_ * T, rows_, T};
    return batch_;
  }
  SourceStats stats() const override { return {}; }
  std::string save_position() const override { return std::to_string(step_); }

 private:
  const Config& config_;
  int64_t first_row_, rows_, world_;
  int64_t step_ = 0;
  std::vector<int32_t> tokens_;
  HostBatch batch_;
};

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    norm += want[i] * static_cast<double>(want[i]);
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

std::vector<float> parameters_of(TrainingEngine& engine) {
  std::vector<float> p(static_cast<size_t>(engine.layout().total_params()));
  engine.get_parameters(p.data());
  return p;
}

struct Trained {
  std::vector<float> parameters;
  std::vector<double> losses;  // the global batch's mean loss per step
  RunOutcome outcome;
};

Trained train_data_parallel(const Config& config) {
  Communicator& comm = *g_comm;
  auto engine = make_cpu_engine(config, kRowsPerRank, config.comm.zero == 1 ? &comm : nullptr);
  GlobalBatchSource source(config, comm.rank() * kRowsPerRank, kRowsPerRank, comm.world_size());
  Trained t;
  t.outcome = run_training(config, *engine, source, comm, nullptr);
  for (const StepRecord& s : t.outcome.steps) {
    std::vector<double> losses(static_cast<size_t>(comm.world_size()));
    comm.all_gather(s.loss, losses.data());
    double mean = 0;
    for (double l : losses) mean += l / static_cast<double>(losses.size());
    t.losses.push_back(mean);
  }
  t.parameters = parameters_of(*engine);
  return t;
}

Trained train_alone_on_global_batch(const Config& config) {
  const int64_t world = g_comm->world_size();
  auto engine = make_cpu_engine(config, world * kRowsPerRank);
  GlobalBatchSource source(config, 0, world * kRowsPerRank, world);
  auto local = make_local_communicator();
  Trained t;
  t.outcome = run_training(config, *engine, source, *local, nullptr);
  for (const StepRecord& s : t.outcome.steps) t.losses.push_back(s.loss);
  t.parameters = parameters_of(*engine);
  return t;
}

TEST(DataParallel, AllReducedGradientsAreTheGlobalBatchGradients) {
  Communicator& comm = *g_comm;
  const Config config = tiny_config();
  const int64_t world = comm.world_size();
  for (bool overlap : {true, false}) {
    auto engine = make_cpu_engine(config, kRowsPerRank);
    GlobalBatchSource mine(config, comm.rank() * kRowsPerRank, kRowsPerRank, world);
    const HostBatch& b = mine.next(nullptr);
    const TokenBatch batch{b.inputs, b.targets, b.batch, b.seq_len};
    GradientSync sync(comm, engine->host_gradient_buffer(), engine->layout().trainable_params(),
                      /*bucket_bytes=*/64 << 10, overlap);
    ASSERT_GT(sync.buckets().size(), overlap ? 2u : 0u) << "the test must cross several buckets";
    engine->zero_gradients();
    engine->forward(batch);
    engine->backward(batch, 1.0f / static_cast<float>(world),
                     [&](int64_t ready_from) { sync.on_gradients_ready(ready_from); });
    sync.finish();
    std::vector<float> reduced(static_cast<size_t>(engine->layout().trainable_params()));
    engine->get_gradients(reduced.data());

    auto alone = make_cpu_engine(config, world * kRowsPerRank);
    GlobalBatchSource everything(config, 0, world * kRowsPerRank, world);
    const HostBatch& g = everything.next(nullptr);
    const TokenBatch global{g.inputs, g.targets, g.batch, g.seq_len};
    alone->zero_gradients();
    alone->forward(global);
    alone->backward(global, 1.0f, nullptr);
    std::vector<float> want(reduced.size());
    alone->get_gradients(want.data());
    EXPECT_LT(relative_l2(reduced, want), 1e-5) << "overlap " << overlap;
  }
}

TEST(DataParallel, TrainingMatchesOneRankOnTheGlobalBatchWithAndWithoutOverlapAndWithZero1) {
  const Trained alone = train_alone_on_global_batch(tiny_config());
  const std::vector<float> initial = parameters_of(*make_cpu_engine(tiny_config(), kRowsPerRank));
  // How far training moved the parameters: the scale of the tolerance.
  double moved = 0;
  for (size_t i = 0; i < initial.size(); ++i)
    moved += (alone.parameters[i] - initial[i]) * static_cast<double>(alone.parameters[i] - initial[i]);
  const double distance = std::sqrt(moved);
  ASSERT_GT(distance, 0.0);

  for (const char* overlap : {"comm.overlap=true", "comm.overlap=false", "comm.zero=1"}) {
    const Trained dp = train_data_parallel(tiny_config({overlap}));
    ASSERT_TRUE(dp.outcome.all_checks_passed()) << overlap;
    ASSERT_EQ(dp.losses.size(), alone.losses.size());
    for (size_t s = 0; s < dp.losses.size(); ++s)
      EXPECT_NEAR(dp.losses[s], alone.losses[s], 1e-4 * std::fabs(alone.losses[s])) << overlap << " step " << s;
    double diff = 0;
    for (size_t i = 0; i < initial.size(); ++i)
      diff += (dp.parameters[i] - alone.parameters[i]) * static_cast<double>(dp.parameters[i] - alone.parameters[i]);
    EXPECT_LT(std::sqrt(diff), 1e-3 * distance) << overlap;
    if (std::string(overlap) == "comm.zero=1") {
      // Each rank holds its own shard's AdamW state; together, all of it.
      EXPECT_LT(dp.outcome.summary.optimizer_bytes_per_rank, dp.outcome.summary.optimizer_bytes_unsharded);
      std::vector<double> per_rank(static_cast<size_t>(g_comm->world_size()));
      g_comm->all_gather(static_cast<double>(dp.outcome.summary.optimizer_bytes_per_rank), per_rank.data());
      double together = 0;
      for (double bytes : per_rank) together += bytes;
      EXPECT_EQ(together, static_cast<double>(dp.outcome.summary.optimizer_bytes_unsharded));
    }
    // Communication was timed: every step all-reduced something.
    for (const StepRecord& s : dp.outcome.steps) {
      EXPECT_GT(s.comm_s, 0.0) << overlap;
      EXPECT_GE(s.comm_exposed_s, 0.0) << overlap;
    }
  }
}

// LoRA: only the adapters' gradients are all-reduced (the bucketed buffer is
// theirs alone); the result equals one rank on the global batch, and the
// frozen base leaves training bit-identical on every rank.
TEST(DataParallel, LoraTrainingMatchesOneRankOnTheGlobalBatchAndKeepsTheBase) {
  const std::vector<std::string> lora = {"train.mode=lora", "lora.rank=4", "lora.targets=q,v,o,down",
                                         "train.lr=1e-2"};
  const Trained alone = train_alone_on_global_batch(tiny_config(lora));
  const Config config = tiny_config(lora);
  auto fresh = make_cpu_engine(config, kRowsPerRank);
  const std::vector<float> initial = parameters_of(*fresh);
  const ParameterLayout& layout = fresh->layout();
  ASSERT_LT(layout.trainable_params(), layout.total_params() / 10) << "adapters are a small share";
  double moved = 0;
  for (size_t i = 0; i < initial.size(); ++i)
    moved += (alone.parameters[i] - initial[i]) * static_cast<double>(alone.parameters[i] - initial[i]);
  ASSERT_GT(moved, 0.0);

  const Trained dp = train_data_parallel(config);
  ASSERT_TRUE(dp.outcome.all_checks_passed());
  for (size_t s = 0; s < dp.losses.size(); ++s)
    EXPECT_NEAR(dp.losses[s], alone.losses[s], 1e-4 * std::fabs(alone.losses[s])) << "step " << s;
  double diff = 0;
  for (size_t i = 0; i < initial.size(); ++i)
    diff += (dp.parameters[i] - alone.parameters[i]) * static_cast<double>(dp.parameters[i] - alone.parameters[i]);
  EXPECT_LT(std::sqrt(diff), 1e-3 * std::sqrt(moved));
  for (int64_t i = 0; i < layout.base_params(); ++i)
    ASSERT_EQ(dp.parameters[i], initial[i]) << "base parameter " << i << " changed on rank " << g_comm->rank();
}

// ZeRO-1 pads the buffers to the world size: a model whose 130,218
// parameters leave a remainder of 2 on 4 ranks must still train exactly.
TEST(DataParallel, ZeroOneTrainsAModelWhoseSizeDoesNotDivideByTheRanks) {
  const std::vector<std::string> odd_shape = {"model.vocab=511", "model.d_model=66", "model.n_heads=3",
                                              "model.n_kv_heads=1", "model.ffn_hidden=99"};
  const Trained alone = train_alone_on_global_batch(tiny_config(odd_shape));
  std::vector<std::string> zero = odd_shape;
  zero.push_back("comm.zero=1");
  const Trained dp = train_data_parallel(tiny_config(zero));
  ASSERT_TRUE(dp.outcome.all_checks_passed());
  EXPECT_EQ(alone.parameters.size(), 130218u);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < alone.parameters.size(); ++i) {
    diff += (dp.parameters[i] - alone.parameters[i]) * static_cast<double>(dp.parameters[i] - alone.parameters[i]);
    norm += alone.parameters[i] * static_cast<double>(alone.parameters[i]);
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
  for (size_t s = 0; s < dp.losses.size(); ++s)
    EXPECT_NEAR(dp.losses[s], alone.losses[s], 1e-4 * std::fabs(alone.losses[s])) << "step " << s;
}

// ZeRO-1's device path (what comm.zero=1 does on the CUDA engine with NCCL)
// with the CPU engine's arithmetic and real MPI ranks standing in: the
// engine offers its buffers as device buffers only and counts the calls a
// mixed-precision engine needs, the communicator claims device buffers and
// takes NCCL's in-place reduce-scatter form only. The result must be the
// host path's, bit for bit (the same sums in the same order).
class DeviceStandInEngine final : public cpu::CpuEngine {
 public:
  using CpuEngine::CpuEngine;
  float* host_gradient_buffer() override { return nullptr; }
  float* host_parameter_buffer() override { return nullptr; }
  float* device_gradient_buffer() override { return CpuEngine::host_gradient_buffer(); }
  float* device_parameter_buffer() override { return CpuEngine::host_parameter_buffer(); }
  void refresh_working_parameters() override { ++refreshes; }
  void synchronize() override {
    ++synchronizes;
    CpuEngine::synchronize();
  }
  int refreshes = 0, synchronizes = 0;
};

class DeviceStandInCommunicator final : public testing::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  const char* backend_name() const override { return "device stand-in"; }
  bool device_buffers() const override { return true; }
  // NCCL's in-place form only: the sum lands in this rank's own block.
  void reduce_scatter_sum(const float* send, float* recv, int64_t count) override {
    if (recv != send + rank() * count)
      throw std::logic_error("reduce_scatter_sum: not NCCL's in-place form (recv == send + rank × count)");
    float* buffer = const_cast<float*>(send);
    inner_.reduce_scatter_sum(buffer, buffer, count);  // MPI's in-place form: the first block
    if (rank() > 0) std::memmove(recv, buffer, sizeof(float) * static_cast<size_t>(count));
    ++reduce_scatters;
  }
  int reduce_scatters = 0;
};

TEST(DataParallel, ZeroOneOnDeviceBuffersEqualsTheHostPath) {
  const Config config = tiny_config({"comm.zero=1"});
  const Trained host = train_data_parallel(config);
  ASSERT_TRUE(host.outcome.all_checks_passed());

  EngineOptions options;
  options.shape = config.model;
  options.micro_batch = kRowsPerRank;
  options.threads = 1;
  options.optimizer_shard =
      zero_shard(make_layout(options).trainable_params(), g_comm->rank(), g_comm->world_size());
  options.pad_buffers_to = zero_padding_multiple(g_comm->world_size());
  DeviceStandInEngine engine(options);
  engine.init_parameters(static_cast<uint64_t>(config.train.seed));
  DeviceStandInCommunicator comm(*g_comm);
  GlobalBatchSource source(config, comm.rank() * kRowsPerRank, kRowsPerRank, comm.world_size());
  const RunOutcome outcome = run_training(config, engine, source, comm, nullptr);
  ASSERT_TRUE(outcome.all_checks_passed());

  const int steps = static_cast<int>(config.train.steps);
  EXPECT_EQ(comm.reduce_scatters, steps);
  EXPECT_EQ(engine.refreshes, steps) << "the working copy rebuilt after every all-gather";
  EXPECT_GE(engine.synchronizes, steps) << "backward finished before each reduce-scatter";
  const std::vector<float> got = parameters_of(engine);
  ASSERT_EQ(got.size(), host.parameters.size());
  EXPECT_EQ(std::memcmp(got.data(), host.parameters.data(), sizeof(float) * got.size()), 0);
}

// Seconds the background collectives took before step 1 are not step 1's
// comm_s: the network ceiling (--ceilings) times 26 of the step's
// all-reduces on the run's own communicator, and step 1 read them all (tiny
// on 2 ranks: 7.1 ms against the 0.27 ms the ceiling timed per step). Here
// the communicator holds 1000 s of them, more than any step's own could take.
// (The CLI measures the ceilings, trainer/cli.cpp's measure_ceilings, before
// it calls run_training on the same communicator.)
class CommSecondsBeforeStepOne final : public testing::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  double take_comm_seconds() override { return inner_.take_comm_seconds() + std::exchange(before_step_one_, 0.0); }

 private:
  double before_step_one_ = 1000.0;
};

TEST(DataParallel, CollectivesMadeBeforeStepOneAreNotItsCommTime) {
  const Config config = tiny_config();
  auto engine = make_cpu_engine(config, kRowsPerRank);
  CommSecondsBeforeStepOne comm(*g_comm);
  GlobalBatchSource source(config, comm.rank() * kRowsPerRank, kRowsPerRank, comm.world_size());
  const RunOutcome outcome = run_training(config, *engine, source, comm, nullptr);
  ASSERT_TRUE(outcome.all_checks_passed());
  ASSERT_EQ(outcome.steps.size(), static_cast<size_t>(config.train.steps));
  for (const StepRecord& s : outcome.steps) {
    EXPECT_GT(s.comm_s, 0.0) << "step " << s.step << ": its gradients were all-reduced";
    EXPECT_LT(s.comm_s, 1000.0) << "step " << s.step;
  }
}

// An engine built without ZeRO-1's options is refused by its optimizer:
// the all-gather would write past its unpadded buffers.
TEST(DataParallel, ZeroOneRefusesAnEngineNotBuiltForItsShard) {
  const Config config = tiny_config({"comm.zero=1"});
  const auto plain = make_cpu_engine(config, kRowsPerRank);
  const int64_t padded = zero_padded_elements(plain->layout().trainable_params(), g_comm->world_size());
  EXPECT_THROW(ZeroOneOptimizer(*g_comm, *plain, padded), std::logic_error);
  const auto built = make_cpu_engine(config, kRowsPerRank, g_comm);
  EXPECT_NO_THROW(ZeroOneOptimizer(*g_comm, *built, padded));
}

TEST(DataParallel, ADivergedRankIsNamedByTheConsistencyCheck) {
  const Trained dp = train_data_parallel(tiny_config({"comm.inject_divergence_step=3"}));
  const int last = g_comm->world_size() - 1;
  bool found = false;
  for (const Check& c : dp.outcome.checks) {
    if (c.name != "ranks_consistent") continue;
    found = true;
    EXPECT_FALSE(c.passed);
    EXPECT_NE(c.detail.find("step 3"), std::string::npos) << c.detail;
    EXPECT_NE(c.detail.find("rank(s) " + std::to_string(last)), std::string::npos) << c.detail;
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(dp.outcome.steps.size(), 3u) << "training stops at the step that diverged";
}

// The passed check says when the ranks were compared: with
// comm.check_every 0 only at the end (it read "every 0 steps and at the end").
TEST(DataParallel, TheConsistencyCheckSaysWhenTheRanksWereCompared) {
  const std::string ranks = std::to_string(g_comm->world_size());
  for (const auto& [every, detail] :
       {std::pair<std::string, std::string>{"0", "parameter checksums equal on all " + ranks +
                                                      " ranks (at the end; last at step 8)"},
        {"3", "parameter checksums equal on all " + ranks + " ranks (every 3 steps and at the end; last at step 8)"}}) {
    const Trained dp = train_data_parallel(tiny_config({"comm.check_every=" + every}));
    bool found = false;
    for (const Check& c : dp.outcome.checks) {
      if (c.name != "ranks_consistent") continue;
      found = true;
      EXPECT_TRUE(c.passed);
      EXPECT_EQ(c.detail, detail) << "comm.check_every=" << every;
    }
    EXPECT_TRUE(found) << "comm.check_every=" << every;
  }
}

// Which GPU a rank trains on: every rank learns what one rank found, and
// each check names the ranks it is about. All ranks run on this host, which
// these tests show GPUs that are not there.
GpuInfo gpu_known_as(const std::string& uuid, const std::string& pci_bus_id = "00000000:19:00.0") {
  GpuInfo gpu;
  gpu.name = "NVIDIA H200";
  gpu.uuid = uuid;
  gpu.pci_bus_id = pci_bus_id;
  return gpu;
}

std::string ranks_named(int first, int count) {
  std::string names;
  for (int r = first; r < first + count; ++r)
    names += (r == first ? "" : r + 1 == first + count ? " and " : ", ") + std::to_string(r);
  return "ranks " + names + " on ";
}

TEST(GpuPlacement, RanksOnOneGpuAreRefusedOnEveryRankNamingThemAll) {
  const GpuInfo same = gpu_known_as("GPU-8f0e9c64-1c57-3f4b-a9d2-0c5b1e7a6f10");
  const std::string reason = gpu_shared_over_ranks(*g_comm, &same, 1);
  EXPECT_NE(reason.find(ranks_named(0, g_comm->world_size()) + g_comm->host_name()), std::string::npos) << reason;
  EXPECT_NE(reason.find("GPU-8f0e9c64-1c57-3f4b-a9d2-0c5b1e7a6f10"), std::string::npos) << reason;
  // One GPU seen by each of the host's ranks: the local rank wrapped round.
  EXPECT_NE(reason.find("run at most 1 rank(s) per host"), std::string::npos) << reason;
}

TEST(GpuPlacement, RanksOnTheirOwnGpusOrOnTheCpuPass) {
  const GpuInfo own = gpu_known_as("GPU-" + std::to_string(g_comm->rank()));
  EXPECT_EQ(gpu_shared_over_ranks(*g_comm, &own, g_comm->world_size()), "");
  EXPECT_EQ(gpu_shared_over_ranks(*g_comm, nullptr, 0), "");
  // Ranks that know neither their GPU's UUID nor its bus compare nothing.
  const GpuInfo unknown = gpu_known_as("", "");
  EXPECT_EQ(gpu_shared_over_ranks(*g_comm, &unknown, 1), "");
}

TEST(GpuPlacement, OnlyTheRanksThatShareAreNamed) {
  // Ranks 0 and 1 share a GPU, the others (on 4 ranks) have one each.
  const int rank = g_comm->rank();
  const GpuInfo gpu = gpu_known_as(rank < 2 ? "GPU-shared" : "GPU-" + std::to_string(rank));
  const std::string reason = gpu_shared_over_ranks(*g_comm, &gpu, g_comm->world_size());
  EXPECT_NE(reason.find(ranks_named(0, 2)), std::string::npos) << reason;
  EXPECT_EQ(reason.find("rank 2"), std::string::npos) << reason;
}

TEST(GpuPlacement, WithoutItsUuidAGpuIsKnownByItsBus) {
  const GpuInfo same_bus = gpu_known_as("", "00000000:3B:00.0");
  const std::string reason = gpu_shared_over_ranks(*g_comm, &same_bus, 1);
  EXPECT_NE(reason.find("PCI 00000000:3B:00.0"), std::string::npos) << reason;
  const GpuInfo own_bus = gpu_known_as("", "00000000:" + std::to_string(10 + g_comm->rank()) + ":00.0");
  EXPECT_EQ(gpu_shared_over_ranks(*g_comm, &own_bus, 1), "");
}

TEST(GpuPlacement, AsManyGpusAsRanksYetOneSharedSaysToGiveEachRankItsOwn) {
  // Every rank sees all the host's GPUs yet landed on one: one
  // CUDA_VISIBLE_DEVICES for all, not the local rank wrapping round.
  const std::string reason = gpu_sharing_reason({0, 1}, "node7", gpu_known_as("GPU-a"), 4, 4);
  EXPECT_EQ(reason.rfind("ranks 0 and 1 on node7 would train on one GPU (GPU 0, NVIDIA H200, GPU-a)", 0), 0u)
      << reason;
  EXPECT_NE(reason.find("give each rank its own"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("run at most"), std::string::npos) << reason;
}

TEST(GpuPlacement, ARankOnTheCpuEngineBesideGpuRanksIsNamedOnEveryRank) {
  const int last = g_comm->world_size() - 1;
  const bool cpu = g_comm->rank() == last;
  const std::string reason =
      engines_differ_over_ranks(*g_comm, cpu ? "cpu" : "cuda", cpu ? "no CUDA driver found" : "");
  EXPECT_EQ(reason.rfind("rank " + std::to_string(last) + " on " + g_comm->host_name() +
                             " resolved train.device to the cpu engine (no CUDA driver found) where " +
                             std::to_string(last) + " rank(s) train on GPUs",
                         0),
            0u)
      << reason;
  EXPECT_EQ(engines_differ_over_ranks(*g_comm, "cpu", "built without CUDA"), "");
  EXPECT_EQ(engines_differ_over_ranks(*g_comm, "cuda", ""), "");
}

}  // namespace
}  // namespace trainbench

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<trainbench::Communicator> comm = trainbench::make_mpi_communicator();
  if (comm == nullptr) {
    std::printf("MPI backend not built: data-parallel tests skipped\n");
    return 77;
  }
  trainbench::g_comm = comm.get();
  // --ranks=N (CTest's): the job must be N ranks. Singleton ranks, each a
  // world of its own, would pass the comparisons with themselves.
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--ranks=", 8) == 0 && std::atoi(argv[i] + 8) != comm->world_size()) {
      std::printf("expected %s but the job has %d rank(s)\n", argv[i], comm->world_size());
      return 1;
    }
  // Only rank 0 prints the test report; every rank runs every test.
  if (comm->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  // A rank that failed must fail the job even if rank 0 passed.
  std::vector<double> results(static_cast<size_t>(comm->world_size()));
  comm->all_gather(static_cast<double>(failed), results.data());
  for (double r : results)
    if (r != 0) return 1;
  return 0;
}
