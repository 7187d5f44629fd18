// Validation (b) of issue 10: the scale projection against a rank count it
// could have predicted, on real MPI ranks of this host (CPU engine).
// 1 rank: the baseline tokens/s; 2 ranks: `trainbench project --fabric
// measured --nodes 1,2` measures the link between them (all-reduce over
// sizes) and the overlap, and projects "2 nodes" of 2 ranks = 4 ranks;
// 4 ranks: measured. Every error is printed (docs/perf.md keeps them).
//
// Not asserted against the measurement: 4 ranks on 2 cores share the cores,
// which slows compute (the cluster model keeps compute per rank fixed), and
// on this shared host the projected/measured comm ratio ranged 0.43-1.15
// over runs, so no bound would be both honest and stable. Asserted: the
// three runs succeed and the projection has its 4-rank row, with a comm
// time larger than the 2 ranks measured (the ring's volume 2(n-1)/n grows).
#include <gtest/gtest.h>

#include <algorithm>  // std::min
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

// cpu-small at one layer, micro-batch 1 × 64 tokens: 43 MiB of gradients in
// 3 buckets against ~0.8 s of compute, so the all-reduce is a visible share.
const std::string kShape =
    " cpu-small --steps 12 --set train.warmup_steps=2 --set model.n_layers=1 --set model.seq_len=64"
    " --set train.micro_batch=1 --set train.threads=1 --set data.readers=1 --set checkpoint.every_steps=0"
    " --set report.progress_every=0 --set report.gemm_ceiling_s=0.2";  // the ceiling is not what is checked

std::string mpirun(int ranks) {
  // Big buffers stay mapped (REFERENCE.md: re-faulting freed memory costs more than the all-reduce).
  return std::string("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
                     "MALLOC_MMAP_THRESHOLD_=1073741824 timeout 300 ") +
         TRAINBENCH_MPIEXEC + " --oversubscribe -x MALLOC_MMAP_THRESHOLD_ -np " + std::to_string(ranks) + " " +
         TRAINBENCH_BINARY;
}

nlohmann::json run_json(const std::string& command, const std::string& out) {
  const testing::CommandResult r = testing::run_command(command + " --out " + out);
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.out << r.err;
  return nlohmann::json::parse(testing::read_whole_file(out));
}

TEST(ScaleProjection, FourRanksFromOneAndTwo) {
  testing::TempDir dir("test_projection_mpi");
  const nlohmann::json one = run_json(mpirun(1) + " run" + kShape, dir.file("one.json"));
  const nlohmann::json projection =
      run_json(mpirun(2) + " project" + kShape + " --layers 1 --fabric measured --nodes 1,2", dir.file("two.json"));
  const nlohmann::json four = run_json(mpirun(4) + " run" + kShape, dir.file("four.json"));

  nlohmann::json projected;
  for (const nlohmann::json& row : projection.at("scale").at("table"))
    if (row.at("ranks") == 4) projected = row;
  ASSERT_FALSE(projected.is_null()) << projection.dump(1);
  const nlohmann::json& measured = four.at("summary");
  const double tokens_one = one.at("summary").at("tokens_per_s").get<double>();
  const double tokens_four = measured.at("tokens_per_s").get<double>();
  const double efficiency_projected = projected.at("tokens_per_s").get<double>() / (4 * tokens_one);
  const double efficiency_measured = tokens_four / (4 * tokens_one);
  const auto error = [](double p, double m) { return m != 0 ? (p - m) / m * 100 : 0.0; };
  const auto line = [&](const char* name, double p, double m) {
    std::printf("  %-22s projected %10.4f  measured %10.4f  error %+6.1f%%\n", name, p, m, error(p, m));
  };
  std::printf("scale projection, 4 ranks from 1 and 2 (link: busbw %.3f GB/s, hop %.1f us, training x%.2f):\n",
              projection.at("scale").at("link_here").at("busbw_gbs").get<double>(),
              projection.at("scale").at("link_here").at("hop_latency_s").get<double>() * 1e6,
              projection.at("scale").at("comm_slowdown").get<double>());
  line("tokens/s", projected.at("tokens_per_s").get<double>(), tokens_four);
  line("step_s", projected.at("step_s").get<double>(), measured.at("step_s").at("median").get<double>());
  line("comm_s", projected.at("comm_s").get<double>(), measured.at("comm_s").at("median").get<double>());
  line("comm_exposed_s", projected.at("comm_exposed_s").get<double>(),
       measured.at("comm_exposed_s").at("median").get<double>());
  line("efficiency vs 1 rank", efficiency_projected, efficiency_measured);
  std::printf("  compute_s: 2 ranks %.4f, 4 ranks %.4f (the cores shared: not in the model)\n",
              projection.at("measured").at(0).at("step").at("compute_s").get<double>(),
              measured.at("compute_s").at("median").get<double>());

  EXPECT_GT(projected.at("comm_s").get<double>(),
            projection.at("measured").at(0).at("step").at("comm_s").get<double>());
  EXPECT_GT(projected.at("tokens_per_s").get<double>(), 0.0);
  // The fabric's figures are the ones the table took, the ring here shared
  // by the node's 2 GPUs, not the placeholder 0s they were written as.
  const nlohmann::json& scale = projection.at("scale");
  EXPECT_DOUBLE_EQ(scale.at("fabric").at("gbs_per_gpu").get<double>(),
                   scale.at("link_here").at("busbw_gbs").get<double>() / 2);
  EXPECT_DOUBLE_EQ(scale.at("fabric").at("hop_latency_s").get<double>(),
                   scale.at("link_here").at("hop_latency_s").get<double>());
  EXPECT_GT(scale.at("fabric").at("gbs_per_gpu").get<double>(), 0.0);
}

// Two depths fitted to a third (each layer 43 MiB of gradients more: comm
// grows with depth above the noise): the table's 1-node row is that projection
// (docs/projection.md: "1 node reproduces the measured comm"), and no row's
// exposed comm exceeds its comm. The slowdown was calibrated at the deepest
// trained depth and applied to the full depth's buckets: the 1-node row read
// comm 0.99 ms, exposed 1.08 ms, against the depth fit's 1.08 ms.
TEST(ScaleProjection, TheOneNodeRowIsTheDepthProjection) {
  testing::TempDir dir("test_projection_mpi");
  const nlohmann::json projection = run_json(
      mpirun(2) + " project" + kShape + " --layers 1,2 --set model.n_layers_full=4 --nodes 1,2", dir.file("p.json"));
  const nlohmann::json& depth = projection.at("depth").at("step");
  ASSERT_GT(depth.at("comm_s").get<double>(), 0.0) << projection.dump(1);
  bool one_node = false;
  for (const nlohmann::json& row : projection.at("scale").at("table")) {
    EXPECT_LE(row.at("comm_exposed_s").get<double>(), row.at("comm_s").get<double>()) << row.dump();
    if (row.at("nodes") != 1) continue;
    one_node = true;
    EXPECT_NEAR(row.at("comm_s").get<double>(), depth.at("comm_s").get<double>(),
                1e-9 * depth.at("comm_s").get<double>())
        << row.dump() << " vs " << depth.dump();
    EXPECT_NEAR(row.at("comm_exposed_s").get<double>(),
                std::min(depth.at("comm_s").get<double>(), depth.at("comm_exposed_s").get<double>()), 1e-12)
        << row.dump() << " vs " << depth.dump();
  }
  EXPECT_TRUE(one_node) << projection.dump(1);
}

// ZeRO-1's step reduce-scatters the whole gradient buffer in one collective
// (comm.bucket_mb unused): the model takes one of those bytes, not DDP's
// buckets, each of which paid a ring's latency (at 64 nodes 47.8 % efficiency
// with comm.bucket_mb=0.25 against 75.8 % with 25, for one and the same step).
TEST(ScaleProjection, ZeroOneIsOneCollectiveOfTheWholeBuffer) {
  testing::TempDir dir("test_projection_mpi");
  const std::string shape = " tiny --layers 2 --steps 8 --set train.warmup_steps=2 --set train.threads=1"
                            " --set comm.bucket_mb=0.25 --set checkpoint.every_steps=0 --fabric 10,20 --nodes 1,64";
  const nlohmann::json ddp = run_json(mpirun(2) + " project" + shape, dir.file("ddp.json"));
  const nlohmann::json zero = run_json(mpirun(2) + " project" + shape + " --set comm.zero=1", dir.file("zero.json"));
  const nlohmann::json& buckets = ddp.at("scale").at("bucket_bytes");
  ASSERT_GT(buckets.size(), 1u) << "DDP's buckets at 0.25 MiB: " << buckets;
  double total = 0;
  for (const nlohmann::json& b : buckets) {
    EXPECT_TRUE(b.is_number_integer()) << "a byte count, whole: " << buckets;
    total += b.get<double>();
  }
  EXPECT_TRUE(ddp.at("depth").at("checkpoint_bytes").is_number_integer()) << ddp.at("depth");
  EXPECT_EQ(zero.at("scale").at("bucket_bytes"), nlohmann::json::array({total}));
}

}  // namespace
}  // namespace trainbench
