// LtGemm (bf16 in, fp32 compute, bf16 or fp32 out) against the CPU engine's
// sgemm on the same bf16-rounded inputs, for every transpose combination,
// odd sizes, strided leading dimensions and accumulation (beta = 1), with
// the heuristic's first algorithm and with the candidates timed first (whose
// timing runs must leave an accumulated output as one call leaves it).
// Without a GPU every test skips with the reason.
#include <gtest/gtest.h>

#include <cuda_bf16.h>     // __nv_bfloat16 and its host conversions
#include <cuda_runtime.h>  // cudaMemcpy

#include <cmath>
#include <ostream>  // PrintTo
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"      // sgemm_parallel: the reference
#include "kernels/cuda/cuda_check.h"  // TRAINBENCH_CUDA_CHECK
#include "kernels/cuda/cuda_ops.h"    // fill_uniform_bf16
#include "kernels/cuda/lt_gemm.h"
#include "kernels/device_info.h"      // query_gpus: skip without a GPU
#include "tests/support/relative_error.h"

namespace trainbench::cuda {
namespace {

using trainbench::testing::relative_error;

struct GemmCase {
  std::string name;
  bool transpose_a, transpose_b;
  int64_t m, n, k;
  int64_t pad;  // extra columns in every leading dimension
  float beta;
  GemmOutput output;
};

// gtest prints the case by name instead of its bytes.
void PrintTo(const GemmCase& c, std::ostream* os) { *os << c.name; }

std::vector<float> random_bf16_values(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  // Rounded to bf16 so the GPU and the CPU multiply exactly the same numbers.
  for (float& v : values) v = __bfloat162float(__float2bfloat16(normal(rng)));
  return values;
}

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& values) {
  std::vector<__nv_bfloat16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __float2bfloat16(values[i]);
  return out;
}


class LtGemmVsCpu : public ::testing::TestWithParam<GemmCase> {
 protected:
  void SetUp() override {
    const GpuInventory inventory = query_gpus();
    if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  }
};

TEST_P(LtGemmVsCpu, MatchesSgemmOnTheSameInputs) {
  const GemmCase& c = GetParam();
  std::mt19937 rng(42);
  const int64_t a_rows = c.transpose_a ? c.k : c.m, a_cols = c.transpose_a ? c.m : c.k;
  const int64_t b_rows = c.transpose_b ? c.n : c.k, b_cols = c.transpose_b ? c.k : c.n;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
  const std::vector<float> a = random_bf16_values(a_rows * lda, rng);
  const std::vector<float> b = random_bf16_values(b_rows * ldb, rng);
  const std::vector<float> c_initial = random_bf16_values(c.m * ldc, rng);

  std::vector<float> expected = c_initial;
  cpu::sgemm_parallel(c.transpose_a, c.transpose_b, c.m, c.n, c.k, a.data(), lda, b.data(), ldb,
                      c.beta, expected.data(), ldc);

  const std::vector<__nv_bfloat16> a16 = to_bf16(a), b16 = to_bf16(b);
  DeviceBuffer<__nv_bfloat16> a_dev(a16.size()), b_dev(b16.size());
  TRAINBENCH_CUDA_CHECK(cudaMemcpy(a_dev.get(), a16.data(), a_dev.bytes(), cudaMemcpyHostToDevice));
  TRAINBENCH_CUDA_CHECK(cudaMemcpy(b_dev.get(), b16.data(), b_dev.bytes(), cudaMemcpyHostToDevice));
  for (const bool time_candidates : {false, true}) {
    SCOPED_TRACE(time_candidates ? "candidates timed" : "heuristic's first choice");
    std::vector<float> got(c_initial.size());
    LtGemm gemm(LtGemm::kDefaultWorkspaceBytes, time_candidates);
    if (c.output == GemmOutput::kFp32) {
      DeviceBuffer<float> c_dev(c_initial.size());
      TRAINBENCH_CUDA_CHECK(cudaMemcpy(c_dev.get(), c_initial.data(), c_dev.bytes(), cudaMemcpyHostToDevice));
      gemm.gemm(c.transpose_a, c.transpose_b, c.m, c.n, c.k, 1.0f, a_dev.get(), lda, b_dev.get(),
                ldb, c.beta, c_dev.get(), ldc, c.output, nullptr);
      TRAINBENCH_CUDA_CHECK(cudaMemcpy(got.data(), c_dev.get(), c_dev.bytes(), cudaMemcpyDeviceToHost));
    } else {
      const std::vector<__nv_bfloat16> c16 = to_bf16(c_initial);
      DeviceBuffer<__nv_bfloat16> c_dev(c16.size());
      TRAINBENCH_CUDA_CHECK(cudaMemcpy(c_dev.get(), c16.data(), c_dev.bytes(), cudaMemcpyHostToDevice));
      gemm.gemm(c.transpose_a, c.transpose_b, c.m, c.n, c.k, 1.0f, a_dev.get(), lda, b_dev.get(),
                ldb, c.beta, c_dev.get(), ldc, c.output, nullptr);
      std::vector<__nv_bfloat16> out16(c16.size());
      TRAINBENCH_CUDA_CHECK(cudaMemcpy(out16.data(), c_dev.get(), c_dev.bytes(), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < got.size(); ++i) got[i] = __bfloat162float(out16[i]);
    }
    if (time_candidates) {
      // The shape was timed (the beta ≠ 0 cases on a borrowed output), unless
      // cuBLASLt offered only one algorithm for it.
      const GemmTuning t = gemm.tuning();
      EXPECT_TRUE(t.untimed.empty()) << t.untimed;
      EXPECT_EQ(t.shapes + t.single_candidate, 1);
    }
    // Only the valid columns of each row: the padding is not part of C.
    std::vector<float> got_valid, expected_valid;
    for (int64_t row = 0; row < c.m; ++row)
      for (int64_t col = 0; col < c.n; ++col) {
        got_valid.push_back(got[row * ldc + col]);
        expected_valid.push_back(expected[row * ldc + col]);
      }
    // fp32 output differs only in summation order; bf16 output adds one
    // rounding of ≤ 2^-8 relative per element.
    const double tolerance = c.output == GemmOutput::kFp32 ? 1e-5 : 4e-3;
    EXPECT_LT(relative_error(got_valid, expected_valid), tolerance);
    // The padding columns are never written.
    for (int64_t row = 0; row < c.m; ++row)
      for (int64_t col = c.n; col < ldc; ++col)
        ASSERT_EQ(got[row * ldc + col], c.output == GemmOutput::kFp32
                                            ? c_initial[row * ldc + col]
                                            : __bfloat162float(__float2bfloat16(c_initial[row * ldc + col])));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LtGemmVsCpu,
    ::testing::Values(
        GemmCase{"forward_NT_bf16", false, true, 256, 512, 384, 0, 0.0f, GemmOutput::kBf16},
        GemmCase{"input_grad_NN_bf16", false, false, 256, 384, 512, 0, 0.0f, GemmOutput::kBf16},
        GemmCase{"weight_grad_TN_fp32_accumulate", true, false, 512, 384, 256, 0, 1.0f,
                 GemmOutput::kFp32},
        GemmCase{"TT_odd_sizes_strided", true, true, 40, 56, 72, 8, 0.0f, GemmOutput::kBf16},
        GemmCase{"NT_strided_fp32", false, true, 64, 128, 96, 8, 0.5f, GemmOutput::kFp32}),
    [](const ::testing::TestParamInfo<GemmCase>& info) { return info.param.name; });

// Attention's use: per head, one launch over the micro-batch, the operands of
// sequence b at b·stride, with leading dimensions wider than the GEMM (the
// head's columns inside q, k and v) and accumulation into C (beta = 1, as
// grouped-query heads accumulate dK and dV). Every batch entry against sgemm.
TEST(LtGemm, StridedBatchMatchesSgemmPerBatchEntry) {
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  std::mt19937 rng(7);
  // ldb covers B's rows either way: k columns when transposed ([n, k]), n when not ([k, n]).
  const int64_t batch = 5, m = 96, n = 64, k = 80, lda = 200, ldb = 88, ldc = 64;
  const int64_t stride_a = m * lda + 8, stride_c = m * ldc + 64;
  for (const bool transpose_b : {true, false}) {
    const int64_t b_stride = (transpose_b ? n : k) * ldb;
    const std::vector<float> a = random_bf16_values(batch * stride_a, rng);
    const std::vector<float> b = random_bf16_values(batch * b_stride, rng);
    const std::vector<float> c_initial = random_bf16_values(batch * stride_c, rng);
    std::vector<float> expected = c_initial;
    for (int64_t i = 0; i < batch; ++i)
      cpu::sgemm_parallel(false, transpose_b, m, n, k, a.data() + i * stride_a, lda,
                          b.data() + i * b_stride, ldb, 1.0f, expected.data() + i * stride_c, ldc);

    const std::vector<__nv_bfloat16> a16 = to_bf16(a), b16 = to_bf16(b), c16 = to_bf16(c_initial);
    DeviceBuffer<__nv_bfloat16> a_dev(a16.size()), b_dev(b16.size()), c_dev(c16.size());
    TRAINBENCH_CUDA_CHECK(cudaMemcpy(a_dev.get(), a16.data(), a_dev.bytes(), cudaMemcpyHostToDevice));
    TRAINBENCH_CUDA_CHECK(cudaMemcpy(b_dev.get(), b16.data(), b_dev.bytes(), cudaMemcpyHostToDevice));
    TRAINBENCH_CUDA_CHECK(cudaMemcpy(c_dev.get(), c16.data(), c_dev.bytes(), cudaMemcpyHostToDevice));
    // Every other round times the candidates (the beta = 1 output borrowed).
    LtGemm gemm(LtGemm::kDefaultWorkspaceBytes, /*time_candidates=*/!transpose_b);
    gemm.gemm_strided_batched(false, transpose_b, m, n, k, 1.0f, a_dev.get(), lda, stride_a,
                              b_dev.get(), ldb, b_stride, 1.0f, c_dev.get(), ldc, stride_c, batch,
                              GemmOutput::kBf16, nullptr);
    std::vector<__nv_bfloat16> out16(c16.size());
    TRAINBENCH_CUDA_CHECK(cudaMemcpy(out16.data(), c_dev.get(), c_dev.bytes(), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < batch; ++i) {
      std::vector<float> got_valid, expected_valid;
      for (int64_t row = 0; row < m; ++row)
        for (int64_t col = 0; col < n; ++col) {
          got_valid.push_back(__bfloat162float(out16[i * stride_c + row * ldc + col]));
          expected_valid.push_back(expected[i * stride_c + row * ldc + col]);
        }
      EXPECT_LT(relative_error(got_valid, expected_valid), 4e-3)
          << "batch entry " << i << (transpose_b ? " (NT)" : " (NN)");
    }
    // Between one entry's C and the next nothing is written.
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t gap = m * ldc; gap < stride_c; ++gap)
        ASSERT_EQ(__bfloat162float(out16[i * stride_c + gap]),
                  __bfloat162float(c16[i * stride_c + gap]));
  }
}

// Matrices past 2^31 elements, as the engine makes them at shapes a run
// allows: Llama-3-8B's LM head at micro-batch 5 × 4096 tokens is a
// [20480 × 128256] logits matrix (2.6 G elements; micro-batch 4 is 97.9 % of
// 2^31), written by the forward and read by both backward GEMMs. Every
// dimension and leading dimension is an int; only the element offsets pass
// 2^31, which a 32-bit offset anywhere would wrap. The rows or columns
// furthest in are checked against sgemm on the same bf16 values, copied
// back from the device. The inner dimension is small: the offsets are what
// is tested, not the arithmetic.
std::vector<float> device_bf16_values(const __nv_bfloat16* device, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<__nv_bfloat16> raw(static_cast<size_t>(rows * cols));
  TRAINBENCH_CUDA_CHECK(cudaMemcpy2D(raw.data(), cols * sizeof(__nv_bfloat16), device, ld * sizeof(__nv_bfloat16),
                                     cols * sizeof(__nv_bfloat16), rows, cudaMemcpyDeviceToHost));
  std::vector<float> values(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) values[i] = __bfloat162float(raw[i]);
  return values;
}

TEST(LtGemm, MatricesPastTwoToThe31ElementsAreAddressedToTheirLastRow) {
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  const int64_t rows = 5 * 4096, vocab = 128256, d = 64, tail = 8;
  ASSERT_GT(rows * vocab, int64_t{1} << 31);
  size_t free_bytes = 0, total_bytes = 0;
  TRAINBENCH_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < (size_t{6} << 30)) GTEST_SKIP() << "needs 6 GiB of free GPU memory, has " << (free_bytes >> 20) << " MiB";
  DeviceBuffer<__nv_bfloat16> x(static_cast<size_t>(rows * d)), w(static_cast<size_t>(vocab * d));
  DeviceBuffer<__nv_bfloat16> logits(static_cast<size_t>(rows * vocab));
  DeviceBuffer<__nv_bfloat16> d_x(static_cast<size_t>(rows * d)), d_w(static_cast<size_t>(vocab * d));
  fill_uniform_bf16(x.get(), rows * d, 1.0f, 1, nullptr);
  fill_uniform_bf16(w.get(), vocab * d, 1.0f, 2, nullptr);
  LtGemm gemm;
  // Forward: logits = x · wᵀ, the big matrix written.
  gemm.gemm(false, true, rows, vocab, d, 1.0f, x.get(), d, w.get(), d, 0.0f, logits.get(), vocab, GemmOutput::kBf16,
            nullptr);
  TRAINBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> w_host = device_bf16_values(w.get(), vocab, d, d);
  {
    const std::vector<float> x_tail = device_bf16_values(x.get() + (rows - tail) * d, tail, d, d);
    std::vector<float> expected(static_cast<size_t>(tail * vocab), 0.0f);
    cpu::sgemm_parallel(false, true, tail, vocab, d, x_tail.data(), d, w_host.data(), d, 0.0f, expected.data(), vocab);
    const std::vector<float> got = device_bf16_values(logits.get() + (rows - tail) * vocab, tail, vocab, vocab);
    EXPECT_LT(relative_error(got, expected), 4e-3) << "the forward's last rows";
  }
  // The input gradient d_x = logits · w: the big matrix read as A.
  gemm.gemm(false, false, rows, d, vocab, 1.0f, logits.get(), vocab, w.get(), d, 0.0f, d_x.get(), d,
            GemmOutput::kBf16, nullptr);
  // The weight gradient d_w = logitsᵀ · x: A transposed, its last columns
  // running through every row.
  gemm.gemm(true, false, vocab, d, rows, 1.0f, logits.get(), vocab, x.get(), d, 0.0f, d_w.get(), d,
            GemmOutput::kBf16, nullptr);
  TRAINBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  {
    const std::vector<float> logits_tail = device_bf16_values(logits.get() + (rows - tail) * vocab, tail, vocab, vocab);
    std::vector<float> expected(static_cast<size_t>(tail * d), 0.0f);
    cpu::sgemm_parallel(false, false, tail, d, vocab, logits_tail.data(), vocab, w_host.data(), d, 0.0f,
                        expected.data(), d);
    EXPECT_LT(relative_error(device_bf16_values(d_x.get() + (rows - tail) * d, tail, d, d), expected), 4e-3)
        << "the input gradient's last rows";
  }
  {
    // logits[:, vocab - tail:], every row, and all of x.
    const std::vector<float> columns = device_bf16_values(logits.get() + (vocab - tail), rows, tail, vocab);
    const std::vector<float> x_host = device_bf16_values(x.get(), rows, d, d);
    std::vector<float> expected(static_cast<size_t>(tail * d), 0.0f);
    cpu::sgemm_parallel(true, false, tail, d, rows, columns.data(), tail, x_host.data(), d, 0.0f, expected.data(), d);
    EXPECT_LT(relative_error(device_bf16_values(d_w.get() + (vocab - tail) * d, tail, d, d), expected), 4e-3)
        << "the weight gradient's last rows";
  }
}

// The GEMM attention's strided batch: sequence b's probabilities start
// b · heads · T² elements in, which passes 2^31 at Llama-8B's 32 heads,
// T 4096 and micro-batch 5 (stride 2^29, the fifth sequence at 2^31). Written
// (scores) and read (probabilities · V) at that stride; the last entry checked.
TEST(LtGemm, AStridedBatchPastTwoToThe31ElementsReachesItsLastEntry) {
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  const int64_t batch = 5, t = 64, hd = 64, stride = int64_t{1} << 29;
  size_t free_bytes = 0, total_bytes = 0;
  TRAINBENCH_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < (size_t{5} << 30)) GTEST_SKIP() << "needs 5 GiB of free GPU memory, has " << (free_bytes >> 20) << " MiB";
  const int64_t span = (batch - 1) * stride + t * t;
  ASSERT_GT(span, int64_t{1} << 31);
  DeviceBuffer<__nv_bfloat16> q(static_cast<size_t>(batch * t * hd)), k(static_cast<size_t>(batch * t * hd));
  DeviceBuffer<__nv_bfloat16> scores(static_cast<size_t>(span)), out(static_cast<size_t>(batch * t * hd));
  fill_uniform_bf16(q.get(), batch * t * hd, 1.0f, 3, nullptr);
  fill_uniform_bf16(k.get(), batch * t * hd, 1.0f, 4, nullptr);
  LtGemm gemm;
  gemm.gemm_strided_batched(false, true, t, t, hd, 1.0f, q.get(), hd, t * hd, k.get(), hd, t * hd, 0.0f,
                            scores.get(), t, stride, batch, GemmOutput::kBf16, nullptr);
  // Read back at the same stride, as probabilities · V (V = k here).
  gemm.gemm_strided_batched(false, false, t, hd, t, 1.0f, scores.get(), t, stride, k.get(), hd, t * hd, 0.0f,
                            out.get(), hd, t * hd, batch, GemmOutput::kBf16, nullptr);
  TRAINBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  const int64_t last = batch - 1;
  const std::vector<float> q_last = device_bf16_values(q.get() + last * t * hd, t, hd, hd);
  const std::vector<float> k_last = device_bf16_values(k.get() + last * t * hd, t, hd, hd);
  std::vector<float> expected_scores(static_cast<size_t>(t * t), 0.0f);
  cpu::sgemm_parallel(false, true, t, t, hd, q_last.data(), hd, k_last.data(), hd, 0.0f, expected_scores.data(), t);
  const std::vector<float> scores_last = device_bf16_values(scores.get() + last * stride, t, t, t);
  EXPECT_LT(relative_error(scores_last, expected_scores), 4e-3) << "the last entry's scores";
  std::vector<float> expected_out(static_cast<size_t>(t * hd), 0.0f);
  cpu::sgemm_parallel(false, false, t, hd, t, scores_last.data(), t, k_last.data(), hd, 0.0f, expected_out.data(), hd);
  EXPECT_LT(relative_error(device_bf16_values(out.get() + last * t * hd, t, hd, hd), expected_out), 4e-3)
      << "the last entry's product, read at the stride";
}

TEST(LtGemm, ReusesThePlanOfAShapeItHasSeen) {
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  DeviceBuffer<__nv_bfloat16> a(64 * 64), b(64 * 64), c(64 * 64);
  TRAINBENCH_CUDA_CHECK(cudaMemset(a.get(), 0, a.bytes()));
  TRAINBENCH_CUDA_CHECK(cudaMemset(b.get(), 0, b.bytes()));
  LtGemm gemm;
  for (int i = 0; i < 3; ++i)
    gemm.gemm(false, true, 64, 64, 64, 1.0f, a.get(), 64, b.get(), 64, 0.0f, c.get(), 64,
              GemmOutput::kBf16, nullptr);
  EXPECT_EQ(gemm.cached_shapes(), 1u);
  gemm.gemm(false, false, 64, 64, 64, 1.0f, a.get(), 64, b.get(), 64, 0.0f, c.get(), 64,
            GemmOutput::kBf16, nullptr);
  EXPECT_EQ(gemm.cached_shapes(), 2u);
  // A batch of one is the plain GEMM's plan, whatever strides it is given.
  gemm.gemm_strided_batched(false, false, 64, 64, 64, 1.0f, a.get(), 64, 4096, b.get(), 64, 4096,
                            0.0f, c.get(), 64, 4096, 1, GemmOutput::kBf16, nullptr);
  EXPECT_EQ(gemm.cached_shapes(), 2u);
  TRAINBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

// Timing happens once per shape, and what it reports adds up: the chosen
// algorithm is never slower than the first choice by the timing that chose
// it, and each call is counted at its shape's timed cost.
TEST(LtGemm, TimesEachShapeOnceAndCountsItsCalls) {
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  constexpr int64_t kSide = 1024;
  DeviceBuffer<__nv_bfloat16> a(kSide * kSide), b(kSide * kSide), c(kSide * kSide);
  fill_uniform_bf16(a.get(), kSide * kSide, 1.0f, 1u, nullptr);
  fill_uniform_bf16(b.get(), kSide * kSide, 1.0f, 2u, nullptr);
  auto call = [&](LtGemm& gemm) {
    gemm.gemm(false, true, kSide, kSide, kSide, 1.0f, a.get(), kSide, b.get(), kSide, 0.0f, c.get(),
              kSide, GemmOutput::kBf16, nullptr);
  };
  LtGemm heuristic;
  call(heuristic);
  EXPECT_FALSE(heuristic.times_candidates());
  EXPECT_EQ(heuristic.tuning().shapes, 0) << "the heuristic's choice is never timed";
  EXPECT_EQ(heuristic.tuning().single_candidate, 0) << "untimed, no shape is one offering a single algorithm";

  LtGemm timed(LtGemm::kDefaultWorkspaceBytes, true);
  call(timed);
  const GemmTuning once = timed.tuning();
  EXPECT_TRUE(once.untimed.empty()) << once.untimed;
  if (once.single_candidate == 1) GTEST_SKIP() << "cuBLASLt offered one algorithm for a 1024³ bf16 GEMM: nothing to time";
  EXPECT_EQ(once.shapes, 1);
  EXPECT_GT(once.first_choice_seconds, 0.0);
  EXPECT_LE(once.chosen_seconds, once.first_choice_seconds);
  EXPECT_EQ(once.changed, once.chosen_seconds < once.first_choice_seconds ? 1 : 0);
  call(timed);
  const GemmTuning twice = timed.tuning();
  EXPECT_EQ(twice.shapes, 1) << "a shape seen before is not timed again";
  EXPECT_EQ(timed.cached_shapes(), 1u);
  EXPECT_DOUBLE_EQ(twice.first_choice_seconds, 2 * once.first_choice_seconds);
  EXPECT_DOUBLE_EQ(twice.chosen_seconds, 2 * once.chosen_seconds);
  // A calibration's repeats are not counted as the run's calls.
  EXPECT_GT(measure_lt_gemm_flops(timed, kSide, kSide, kSide, 0.05, nullptr), 0.0);
  EXPECT_DOUBLE_EQ(timed.tuning().first_choice_seconds, twice.first_choice_seconds);
  // Nor is a shape met only in a calibration one of the run's, and counting
  // goes back to what it was.
  measure_lt_gemm_flops(timed, kSide / 2, kSide / 2, kSide / 2, 0.05, nullptr);
  EXPECT_EQ(timed.cached_shapes(), 2u);
  EXPECT_EQ(timed.tuning().shapes, 1);
  EXPECT_TRUE(timed.counting_calls());
  timed.count_calls(false);
  measure_lt_gemm_flops(timed, kSide, kSide, kSide, 0.05, nullptr);
  EXPECT_FALSE(timed.counting_calls());
  TRAINBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

// No GPU needed: the extent a timing run borrows for an accumulating output.
TEST(LtGemm, OutputSpanEndsAtTheLastElementOfTheLastBatchEntry) {
  // One [3 × 5] fp32 output in rows of 8: rows 0 and 1 whole, row 2's 5 elements.
  EXPECT_EQ(output_span_bytes(3, 5, 8, 1, 0, 4), size_t{(2 * 8 + 5) * 4});
  // Four of them 100 elements apart, bf16: the last one starts at 300.
  EXPECT_EQ(output_span_bytes(3, 5, 8, 4, 100, 2), size_t{(300 + 2 * 8 + 5) * 2});
  // Llama 3's LM-head weight gradient, fp32: vocab × d_model.
  EXPECT_EQ(output_span_bytes(128256, 4096, 4096, 1, 0, 4), size_t{128256} * 4096 * 4);
}

TEST(LtGemm, CeilingMeasurementIsPositive) {
  const GpuInventory inventory = query_gpus();
  if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  LtGemm gemm;
  EXPECT_GT(measure_lt_gemm_flops(gemm, 1024, 1024, 1024, 0.1, nullptr), 1e12)
      << "a data-centre GPU does a 1024³ bf16 GEMM faster than 1 TFLOP/s";
}

}  // namespace
}  // namespace trainbench::cuda
