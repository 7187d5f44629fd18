// Every op of kernels/cuda/cuda_ops.h against its fp32 CPU twin in
// kernels/cpu/cpu_ops.h, on fresh random inputs rounded to bf16 first (so both
// sides see the same numbers), with outputs poisoned (NaN where overwritten,
// random where accumulated into), odd sizes (not multiples of the block or of
// 8), seq_len 37, GQA head counts and a GPT-2 vocabulary. Plus: the
// deterministic ops repeat bit for bit. Without a GPU every test skips with
// the reason.
//
// Tolerances, as ‖gpu − cpu‖ / ‖cpu‖ in double:
//   kBf16Output     8e-3   a bf16 output carries one rounding (≤ 2^-8 relative: 8 significant bits) per element
//                          on top of fp32 arithmetic that only differs in order.
//   kFp32FromBf16   1e-5   fp32 outputs of the same bf16 inputs: only summation order and
//                          expf/std::exp last bits differ.
//   kAdamW          1e-6   the same fp32 formula element by element, each rounding spelled out on
//                          the GPU: only the host compiler's FMA contraction could differ.
//   kSumOfSquares   1e-12  squares of floats are exact in double; only the order of the sum differs.
//   exact (0)              embedding forward (a copy), embedding backward (the same fp32 adds in
//                          the same row order), copy_fp32_to_bf16 (round to nearest even).
//   rope, per element: |gpu − cpu| ≤ 2^-8·|cpu| + 1e-5  (one bf16 rounding; fast sine
//                          intrinsics at positions in the thousands would miss it).
//   kFusedAttention 2e-2   cuDNN's SDPA forward, and 4e-2 its dQ, dK, dV: the
//                          probabilities (forward) and dS (backward) are rounded
//                          to bf16 inside the kernel before their GEMMs, on top of
//                          the bf16 output; the GQA group's dK, dV sum two heads.
#include <gtest/gtest.h>

#include <cuda_bf16.h>     // __nv_bfloat16 and its host conversions
#include <cuda_runtime.h>  // cudaMemcpy, cudaDeviceSynchronize

#include <omp.h>  // omp_get_max_threads: the CPU attention's scratch

#include <algorithm>  // std::max
#include <cmath>    // std::sqrt, std::exp, std::fabs, std::ldexp, NAN
#include <cstdint>  // int32_t, int64_t
#include <cstring>  // std::memcmp
#include <random>   // std::mt19937 and distributions
#include <memory>   // the fused attention
#include <stdexcept>  // std::invalid_argument
#include <string>
#include <type_traits>  // std::decay_t
#include <utility>  // std::pair
#include <vector>

#include "kernels/cpu/cpu_ops.h"          // the fp32 reference ops
#include "kernels/cuda/cuda_check.h"      // TRAINBENCH_CUDA_CHECK
#include "kernels/cuda/cuda_ops.h"        // the ops under test
#include "kernels/cuda/cudnn_attention.h" // cuDNN's fused attention, under test too
#include "kernels/cuda/device_buffer.h"   // DeviceBuffer
#include "kernels/device_info.h"          // query_gpus: skip without a GPU
#include "kernels/engine.h"               // kCudaMaxHeadDim
#include "kernels/token_groups.h"         // group_rows_by_token: embedding_backward's input
#include "tests/support/relative_error.h"  // relative_error

namespace trainbench::cuda {
namespace {

using trainbench::testing::relative_error;

constexpr double kBf16Output = 8e-3;
constexpr double kFp32FromBf16 = 1e-5;
constexpr double kAdamW = 1e-6;
constexpr double kSumOfSquares = 1e-12;
constexpr double kFusedAttention = 2e-2;
constexpr double kFusedAttentionBackward = 4e-2;

// ---- host helpers ----

// Normal values rounded to bf16, so the GPU's bf16 input and the CPU's fp32
// input are the same numbers.
std::vector<float> random_bf16_values(size_t count, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> values(count);
  for (float& v : values) v = __bfloat162float(__float2bfloat16(normal(rng)));
  return values;
}

std::vector<float> random_fp32_values(size_t count, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

std::vector<int32_t> random_tokens(size_t count, int32_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> uniform(0, vocab - 1);
  std::vector<int32_t> tokens(count);
  for (int32_t& t : tokens) t = uniform(rng);
  return tokens;
}

std::vector<bf16> to_bf16(const std::vector<float>& values) {
  std::vector<bf16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __float2bfloat16(values[i]);
  return out;
}

std::vector<float> to_float(const std::vector<bf16>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __bfloat162float(values[i]);
  return out;
}

std::vector<bf16> nan_bf16(size_t count) { return std::vector<bf16>(count, __float2bfloat16(NAN)); }
std::vector<float> nan_fp32(size_t count) { return std::vector<float>(count, NAN); }

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  DeviceBuffer<T> device(host.size());
  if (!host.empty())
    TRAINBENCH_CUDA_CHECK(cudaMemcpy(device.get(), host.data(), device.bytes(), cudaMemcpyHostToDevice));
  return device;
}

// Synchronises first, so an error of an earlier kernel surfaces here.
template <typename T>
std::vector<T> download(const DeviceBuffer<T>& device) {
  TRAINBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> host(device.count());
  if (!host.empty())
    TRAINBENCH_CUDA_CHECK(cudaMemcpy(host.data(), device.get(), device.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

std::vector<float> download_as_float(const DeviceBuffer<bf16>& device) {
  return to_float(download(device));
}

// The rows of `tokens` grouped by token on the host, as the engine stages
// them, and uploaded for embedding_backward.
struct DeviceTokenGroups {
  DeviceBuffer<int32_t> rows, offsets, tokens;
  int64_t count = 0;
  TokenGroups view() const { return TokenGroups{rows.get(), offsets.get(), tokens.get(), count}; }
};
DeviceTokenGroups group_on_device(const std::vector<int32_t>& tokens, int64_t vocab) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<int32_t> rows(n), offsets(n + 1), group_tokens(n), scratch;
  const int64_t count =
      group_rows_by_token(tokens.data(), n, vocab, rows.data(), offsets.data(), group_tokens.data(), scratch);
  offsets.resize(count + 1);
  group_tokens.resize(count);
  return DeviceTokenGroups{upload(rows), upload(offsets), upload(group_tokens), count};
}


class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    const GpuInventory inventory = query_gpus();
    if (inventory.gpus.empty()) GTEST_SKIP() << "no GPU: " << inventory.why_none;
  }
};

// ---- embedding ----

TEST_F(CudaOps, EmbeddingForwardCopiesTheRows) {
  std::mt19937 rng(1);
  // d 77: element by element; d 768: 16-byte packs, 6000 rows so that the
  // grid-stride loop goes round more than once.
  const int64_t vocab = 300, n = 6000;
  for (const int64_t d : {77, 768}) {
    const std::vector<float> table = random_bf16_values(vocab * d, rng);
    const std::vector<int32_t> tokens = random_tokens(n, vocab, rng);
    std::vector<float> expected(n * d);
    cpu::embedding_forward(expected.data(), tokens.data(), table.data(), n, d);

    DeviceBuffer<bf16> table_dev = upload(to_bf16(table)), out_dev = upload(nan_bf16(n * d));
    DeviceBuffer<int32_t> tokens_dev = upload(tokens);
    embedding_forward(out_dev.get(), tokens_dev.get(), table_dev.get(), n, d, nullptr);
    EXPECT_EQ(relative_error(download_as_float(out_dev), expected), 0.0) << "d " << d;
  }
}

TEST_F(CudaOps, EmbeddingBackwardAddsRepeatedTokensInRowOrder) {
  std::mt19937 rng(2);
  // vocab 50: 1000 rows over 50 tokens, many repeats, every token present.
  // vocab 5000: most tokens absent, and their rows of the table must keep
  // their values exactly (no group writes them).
  const int64_t n = 1000, d = 333;
  for (const int64_t vocab : {50, 5000}) {
    const std::vector<float> d_out = random_bf16_values(n * d, rng);
    const std::vector<int32_t> tokens = random_tokens(n, static_cast<int32_t>(vocab), rng);
    const std::vector<float> d_table_initial = random_fp32_values(vocab * d, rng);
    std::vector<float> expected = d_table_initial;
    cpu::embedding_backward(expected.data(), d_out.data(), tokens.data(), n, d);

    DeviceBuffer<bf16> d_out_dev = upload(to_bf16(d_out));
    const DeviceTokenGroups groups = group_on_device(tokens, vocab);
    if (vocab == 50) {
      ASSERT_EQ(groups.count, vocab);  // every token appears
    } else {
      ASSERT_LT(groups.count, n);  // some tokens repeat, and most are absent
    }
    DeviceBuffer<float> d_table_dev = upload(d_table_initial);
    embedding_backward(d_table_dev.get(), d_out_dev.get(), groups.view(), d, nullptr);
    // Bit for bit: each element gets the CPU's fp32 adds in the CPU's row order.
    EXPECT_EQ(relative_error(download(d_table_dev), expected), 0.0) << "vocab " << vocab;
  }
}

// ---- rmsnorm ----

// One warp per row: a ragged width (element by element) and GPT-2's 768
// (16-byte packs), with a row count that leaves the last block's warps idle.
TEST_F(CudaOps, RmsnormForward) {
  std::mt19937 rng(3);
  // 96: 12 packs, fewer than the warp's 32 lanes (20 lanes idle in the sum).
  for (const int64_t d : {333, 768, 96}) {
    const int64_t n = 301;
    const float eps = 1e-5f;
    const std::vector<float> in = random_bf16_values(n * d, rng, 2.0f);
    const std::vector<float> weight = random_bf16_values(d, rng);
    std::vector<float> expected_out(n * d), expected_rstd(n);
    cpu::rmsnorm_forward(expected_out.data(), expected_rstd.data(), in.data(), weight.data(), n, d, eps);

    DeviceBuffer<bf16> in_dev = upload(to_bf16(in)), weight_dev = upload(to_bf16(weight));
    DeviceBuffer<bf16> out_dev = upload(nan_bf16(n * d));
    DeviceBuffer<float> rstd_dev = upload(nan_fp32(n));
    rmsnorm_forward(out_dev.get(), rstd_dev.get(), in_dev.get(), weight_dev.get(), n, d, eps, nullptr);
    EXPECT_LT(relative_error(download_as_float(out_dev), expected_out), kBf16Output) << "d " << d;
    EXPECT_LT(relative_error(download(rstd_dev), expected_rstd), kFp32FromBf16) << "d " << d;
  }
}

// Rows that start one element past 16 bytes go element by element, at a
// width (768) that would otherwise take packs; the element before the rows is
// poisoned and must stay so.
TEST_F(CudaOps, RmsnormForwardOnUnalignedRows) {
  std::mt19937 rng(6);
  const int64_t n = 45, d = 768;
  const float eps = 1e-5f;
  const std::vector<float> in = random_bf16_values(n * d, rng, 2.0f);
  const std::vector<float> weight = random_bf16_values(d, rng);
  std::vector<float> expected_out(n * d), expected_rstd(n);
  cpu::rmsnorm_forward(expected_out.data(), expected_rstd.data(), in.data(), weight.data(), n, d, eps);

  std::vector<bf16> shifted_in = to_bf16(in);
  shifted_in.insert(shifted_in.begin(), __float2bfloat16(0.0f));
  DeviceBuffer<bf16> in_dev = upload(shifted_in), weight_dev = upload(to_bf16(weight));
  DeviceBuffer<bf16> out_dev = upload(nan_bf16(n * d + 1));
  DeviceBuffer<float> rstd_dev = upload(nan_fp32(n));
  rmsnorm_forward(out_dev.get() + 1, rstd_dev.get(), in_dev.get() + 1, weight_dev.get(), n, d, eps, nullptr);
  std::vector<float> got = download_as_float(out_dev);
  EXPECT_TRUE(std::isnan(got[0])) << "the element before the rows was written";
  got.erase(got.begin());
  EXPECT_LT(relative_error(got, expected_out), kBf16Output);
  EXPECT_LT(relative_error(download(rstd_dev), expected_rstd), kFp32FromBf16);
}

// The fused op against the CPU's add then norm, and bit for bit against the
// two CUDA ops it replaces (the engine's bf16 results must not move with it).
TEST_F(CudaOps, ResidualAddRmsnormIsTheAddThenTheNorm) {
  std::mt19937 rng(5);
  for (const int64_t d : {333, 4096}) {  // a ragged row, and Llama's (16 columns a thread)
    const int64_t n = 67;
    const float eps = 1e-5f;
    const std::vector<float> residual = random_bf16_values(n * d, rng, 2.0f);
    const std::vector<float> addend = random_bf16_values(n * d, rng);
    const std::vector<float> weight = random_bf16_values(d, rng);
    std::vector<float> expected_sum = residual, expected_out(n * d), expected_rstd(n);
    cpu::add_inplace(expected_sum.data(), addend.data(), n * d);
    // The op's residual stream is bf16: it normalises the rounded sum, so the
    // reference does too (the unrounded one moves rstd by ~1e-4 at d 333).
    expected_sum = to_float(to_bf16(expected_sum));
    cpu::rmsnorm_forward(expected_out.data(), expected_rstd.data(), expected_sum.data(), weight.data(), n, d,
                         eps);

    DeviceBuffer<bf16> addend_dev = upload(to_bf16(addend)), weight_dev = upload(to_bf16(weight));
    DeviceBuffer<bf16> fused_sum = upload(to_bf16(residual)), fused_out = upload(nan_bf16(n * d));
    DeviceBuffer<float> fused_rstd = upload(nan_fp32(n));
    residual_add_rmsnorm_forward(fused_sum.get(), addend_dev.get(), fused_out.get(), fused_rstd.get(),
                                 weight_dev.get(), n, d, eps, nullptr);
    EXPECT_LT(relative_error(download_as_float(fused_sum), expected_sum), kBf16Output) << "d " << d;
    EXPECT_LT(relative_error(download_as_float(fused_out), expected_out), kBf16Output) << "d " << d;
    EXPECT_LT(relative_error(download(fused_rstd), expected_rstd), kFp32FromBf16) << "d " << d;

    DeviceBuffer<bf16> pair_sum = upload(to_bf16(residual)), pair_out = upload(nan_bf16(n * d));
    DeviceBuffer<float> pair_rstd = upload(nan_fp32(n));
    add_inplace(pair_sum.get(), addend_dev.get(), n * d, nullptr);
    rmsnorm_forward(pair_out.get(), pair_rstd.get(), pair_sum.get(), weight_dev.get(), n, d, eps, nullptr);
    const std::vector<bf16> sums[] = {download(fused_sum), download(pair_sum)};
    const std::vector<bf16> outs[] = {download(fused_out), download(pair_out)};
    EXPECT_EQ(std::memcmp(sums[0].data(), sums[1].data(), sums[0].size() * sizeof(bf16)), 0) << "d " << d;
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(bf16)), 0) << "d " << d;
    EXPECT_EQ(download(fused_rstd), download(pair_rstd)) << "d " << d;
  }
}

TEST_F(CudaOps, RmsnormBackwardAccumulatesIntoBothGradients) {
  std::mt19937 rng(4);
  // More rows than rmsnorm_backward's 512 blocks, so blocks take several rows:
  // fewer than the 4 it takes at once (1100), and a group of 4 then a short
  // one (3000 rows of GPT-2's 768). Fewer rows than blocks at Llama's 4096
  // (301): one row a block, three of its four row slots empty.
  const std::pair<int64_t, int64_t> shapes[] = {{1100, 333}, {3000, 768}, {301, 4096}};
  for (const auto& [n, d] : shapes) {
    const std::vector<float> in = random_bf16_values(n * d, rng, 2.0f);
    const std::vector<float> weight = random_bf16_values(d, rng);
    const std::vector<float> d_out = random_bf16_values(n * d, rng);
    const std::vector<float> d_in_initial = random_bf16_values(n * d, rng);
    const std::vector<float> d_weight_initial = random_fp32_values(d, rng);
    std::vector<float> unused_out(n * d), rstd(n);
    cpu::rmsnorm_forward(unused_out.data(), rstd.data(), in.data(), weight.data(), n, d, 1e-5f);
    std::vector<float> expected_d_in = d_in_initial, expected_d_weight = d_weight_initial;
    cpu::rmsnorm_backward(expected_d_in.data(), expected_d_weight.data(), d_out.data(), in.data(),
                          weight.data(), rstd.data(), n, d);

    DeviceBuffer<bf16> in_dev = upload(to_bf16(in)), weight_dev = upload(to_bf16(weight));
    DeviceBuffer<bf16> d_out_dev = upload(to_bf16(d_out)), d_in_dev = upload(to_bf16(d_in_initial));
    DeviceBuffer<float> rstd_dev = upload(rstd), d_weight_dev = upload(d_weight_initial);
    DeviceBuffer<float> scratch(rmsnorm_backward_scratch_floats(n, d));
    rmsnorm_backward(d_in_dev.get(), d_weight_dev.get(), d_out_dev.get(), in_dev.get(),
                     weight_dev.get(), rstd_dev.get(), n, d, scratch.get(), nullptr);
    EXPECT_LT(relative_error(download_as_float(d_in_dev), expected_d_in), kBf16Output) << "n " << n;
    EXPECT_LT(relative_error(download(d_weight_dev), expected_d_weight), kFp32FromBf16) << "n " << n;

    // Without a weight gradient (frozen gain) only d_in moves, and no scratch is needed.
    DeviceBuffer<bf16> d_in_again = upload(to_bf16(d_in_initial));
    rmsnorm_backward(d_in_again.get(), nullptr, d_out_dev.get(), in_dev.get(), weight_dev.get(),
                     rstd_dev.get(), n, d, nullptr, nullptr);
    EXPECT_LT(relative_error(download_as_float(d_in_again), expected_d_in), kBf16Output) << "n " << n;
  }
}

// ---- rope ----

struct RopeShape {
  int64_t batch, seq_len, n_heads, head_dim;
};

void expect_rope_matches_cpu(const RopeShape& s, bool forward, uint32_t seed) {
  std::mt19937 rng(seed);
  const double theta = 500000.0;
  const int64_t count = s.batch * s.seq_len * s.n_heads * s.head_dim;
  const std::vector<float> x = random_bf16_values(count, rng);
  std::vector<float> expected = x;
  if (forward)
    cpu::rope_forward(expected.data(), s.batch, s.seq_len, s.n_heads, s.head_dim, theta);
  else
    cpu::rope_backward(expected.data(), s.batch, s.seq_len, s.n_heads, s.head_dim, theta);

  DeviceBuffer<bf16> x_dev = upload(to_bf16(x));
  if (forward)
    rope_forward(x_dev.get(), s.batch, s.seq_len, s.n_heads, s.head_dim, theta, nullptr);
  else
    rope_backward(x_dev.get(), s.batch, s.seq_len, s.n_heads, s.head_dim, theta, nullptr);
  const std::vector<float> got = download_as_float(x_dev);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < count; ++i)
    if (!(std::fabs(got[i] - expected[i]) <= std::ldexp(std::fabs(expected[i]), -8) + 1e-5))
      ++mismatches;
  EXPECT_EQ(mismatches, 0) << "of " << count << " elements, seq_len " << s.seq_len;
  EXPECT_LT(relative_error(got, expected), kBf16Output);
}

TEST_F(CudaOps, RopeForwardQueryAndKeyHeads) {
  // GQA: 8 query heads, 2 key heads; seq_len 37.
  expect_rope_matches_cpu({2, 37, 8, 64}, true, 5);
  expect_rope_matches_cpu({2, 37, 2, 64}, true, 6);
  // GPT-2's 12 heads of 64: a row's 384 pairs are more than a block's threads.
  expect_rope_matches_cpu({2, 37, 12, 64}, true, 10);
}

TEST_F(CudaOps, RopeBackwardRotatesBack) {
  expect_rope_matches_cpu({2, 37, 8, 64}, false, 7);
  expect_rope_matches_cpu({2, 37, 2, 128}, false, 8);
}

// The widest head the CUDA engine takes (kCudaMaxHeadDim): its 256 sines and
// cosines fill the kernel's shared tables exactly. One pair wider is refused
// before launch rather than writing past them.
TEST_F(CudaOps, RopeAtTheWidestHead) {
  expect_rope_matches_cpu({1, 19, 2, kCudaMaxHeadDim}, true, 11);
  expect_rope_matches_cpu({1, 19, 2, kCudaMaxHeadDim}, false, 12);
  EXPECT_THROW(rope_forward(nullptr, 1, 1, 1, kCudaMaxHeadDim + 2, 10000.0, nullptr), std::invalid_argument);
  EXPECT_THROW(rope_forward(nullptr, 1, 1, 1, 63, 10000.0, nullptr), std::invalid_argument);
}

TEST_F(CudaOps, RopeAtLongPositions) {
  // Positions up to 8191: angles of thousands of radians need sinf's full
  // argument reduction.
  expect_rope_matches_cpu({1, 8192, 1, 128}, true, 9);
}

// ---- causal softmax ----

// The CPU reference, as cpu::attention_forward's softmax: scale, then a
// softmax over j ≤ i, 0 above the diagonal.
std::vector<float> causal_softmax_reference(const std::vector<float>& scores, int64_t rows_of_heads,
                                            int64_t seq_len, float scale) {
  std::vector<float> probs(scores.size(), 0.0f);
  for (int64_t r = 0; r < rows_of_heads * seq_len; ++r) {
    const int64_t i = r % seq_len;
    const float* x = scores.data() + r * seq_len;
    float* p = probs.data() + r * seq_len;
    float max_score = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) max_score = std::max(max_score, x[j] * scale);
    float sum = 0.0f;
    for (int64_t j = 0; j <= i; ++j) sum += std::exp(x[j] * scale - max_score);
    for (int64_t j = 0; j <= i; ++j) p[j] = std::exp(x[j] * scale - max_score) / sum;
  }
  return probs;
}

int64_t nonzero_above_diagonal(const std::vector<float>& matrices, int64_t seq_len) {
  int64_t count = 0;
  for (size_t r = 0; r < matrices.size() / seq_len; ++r)
    for (int64_t j = static_cast<int64_t>(r % seq_len) + 1; j < seq_len; ++j)
      if (matrices[r * seq_len + j] != 0.0f) ++count;
  return count;
}

TEST_F(CudaOps, CausalSoftmaxForward) {
  // seq_len 37 (one block per row, most threads idle) and 300 (rows longer than the block).
  for (const int64_t seq_len : {int64_t{37}, int64_t{300}}) {
    std::mt19937 rng(10 + seq_len);
    const int64_t heads_times_batch = 2 * 3;
    const float scale = 0.125f;
    const std::vector<float> scores =
        random_bf16_values(heads_times_batch * seq_len * seq_len, rng, 8.0f);
    const std::vector<float> expected =
        causal_softmax_reference(scores, heads_times_batch, seq_len, scale);

    DeviceBuffer<bf16> scores_dev = upload(to_bf16(scores));
    causal_softmax_forward(scores_dev.get(), heads_times_batch, seq_len, scale, nullptr);
    const std::vector<float> got = download_as_float(scores_dev);
    EXPECT_LT(relative_error(got, expected), kBf16Output) << "seq_len " << seq_len;
    EXPECT_EQ(nonzero_above_diagonal(got, seq_len), 0) << "seq_len " << seq_len;
  }
}

TEST_F(CudaOps, CausalSoftmaxBackward) {
  for (const int64_t seq_len : {int64_t{37}, int64_t{300}}) {
    std::mt19937 rng(20 + seq_len);
    const int64_t heads_times_batch = 2 * 3;
    const float scale = 0.125f;
    const std::vector<float> probs = to_float(to_bf16(causal_softmax_reference(
        random_bf16_values(heads_times_batch * seq_len * seq_len, rng, 8.0f), heads_times_batch,
        seq_len, scale)));
    // Random everywhere, above the diagonal too: the op must zero it.
    const std::vector<float> d_probs = random_bf16_values(probs.size(), rng);
    std::vector<float> expected(probs.size(), 0.0f);
    for (int64_t r = 0; r < heads_times_batch * seq_len; ++r) {
      const int64_t i = r % seq_len;
      const float* p = probs.data() + r * seq_len;
      const float* dp = d_probs.data() + r * seq_len;
      float weighted = 0.0f;
      for (int64_t j = 0; j <= i; ++j) weighted += p[j] * dp[j];
      for (int64_t j = 0; j <= i; ++j) expected[r * seq_len + j] = p[j] * (dp[j] - weighted) * scale;
    }

    DeviceBuffer<bf16> probs_dev = upload(to_bf16(probs)), d_dev = upload(to_bf16(d_probs));
    causal_softmax_backward(d_dev.get(), probs_dev.get(), heads_times_batch, seq_len, scale, nullptr);
    const std::vector<float> got = download_as_float(d_dev);
    EXPECT_LT(relative_error(got, expected), kBf16Output) << "seq_len " << seq_len;
    EXPECT_EQ(nonzero_above_diagonal(got, seq_len), 0) << "seq_len " << seq_len;
  }
}

// ---- cuDNN's fused attention ----

// Forward and backward against the CPU's causal GQA attention, in the
// engine's row layouts, outputs poisoned: Llama-like heads at a length that
// is not a multiple of 64, and head_dim 128 at a longer one.
TEST_F(CudaOps, CudnnAttentionForwardAndBackwardMatchTheCpu) {
  if (cudnn_attention_build_info().empty())
    GTEST_SKIP() << "this build has no cuDNN attention (cuDNN or the frontend headers were not found)";
  struct Case {
    int64_t batch, heads, kv_heads, seq_len, head_dim;
  };
  for (const Case c : {Case{2, 4, 2, 80, 64}, Case{1, 2, 2, 300, 128}}) {
    SCOPED_TRACE("seq_len " + std::to_string(c.seq_len) + ", head_dim " + std::to_string(c.head_dim));
    std::mt19937 rng(40 + c.seq_len);
    const int64_t n = c.batch * c.seq_len, q_count = n * c.heads * c.head_dim, kv_count = n * c.kv_heads * c.head_dim;
    const std::vector<float> q = random_bf16_values(q_count, rng), k = random_bf16_values(kv_count, rng),
                             v = random_bf16_values(kv_count, rng), d_out = random_bf16_values(q_count, rng);
    const cpu::AttentionShape cpu_shape{c.batch, c.seq_len, c.heads, c.kv_heads, c.head_dim};
    std::vector<float> out(q_count), probs(c.batch * c.heads * c.seq_len * c.seq_len);
    cpu::attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), cpu_shape);
    std::vector<float> d_q(q_count), d_k(kv_count), d_v(kv_count);
    std::vector<float> scratch(cpu::attention_scratch_floats(cpu_shape, omp_get_max_threads()));
    cpu::attention_backward(d_q.data(), d_k.data(), d_v.data(), d_out.data(), probs.data(), q.data(), k.data(),
                            v.data(), scratch.data(), cpu_shape);

    // Both backwards: the deterministic one (train.deterministic, default)
    // and cuDNN's fastest, which sums dQ with atomics.
    for (const bool deterministic : {true, false}) {
      SCOPED_TRACE(deterministic ? "deterministic backward" : "fastest backward");
      std::string why_not;
      std::unique_ptr<CudnnAttention> attention = make_cudnn_attention(
          AttentionShape{c.batch, c.heads, c.kv_heads, c.seq_len, c.head_dim},
          1.0f / std::sqrt(static_cast<float>(c.head_dim)), deterministic, nullptr, &why_not);
      ASSERT_NE(attention, nullptr) << why_not;
      DeviceBuffer<bf16> q_dev = upload(to_bf16(q)), k_dev = upload(to_bf16(k)), v_dev = upload(to_bf16(v));
      DeviceBuffer<bf16> d_out_dev = upload(to_bf16(d_out));
      DeviceBuffer<bf16> out_dev = upload(nan_bf16(q_count));
      DeviceBuffer<float> stats_dev = upload(nan_fp32(c.batch * c.heads * c.seq_len));
      DeviceBuffer<bf16> d_q_dev = upload(nan_bf16(q_count)), d_k_dev = upload(nan_bf16(kv_count)),
                         d_v_dev = upload(nan_bf16(kv_count));
      DeviceBuffer<unsigned char> workspace(std::max<int64_t>(attention->workspace_bytes(), 1));
      attention->forward(q_dev.get(), k_dev.get(), v_dev.get(), out_dev.get(), stats_dev.get(), workspace.get());
      EXPECT_LT(relative_error(download_as_float(out_dev), out), kFusedAttention) << "output";
      // Backward from the GPU's own forward, as the engine runs it.
      attention->backward(q_dev.get(), k_dev.get(), v_dev.get(), out_dev.get(), d_out_dev.get(), stats_dev.get(),
                          d_q_dev.get(), d_k_dev.get(), d_v_dev.get(), workspace.get());
      EXPECT_LT(relative_error(download_as_float(d_q_dev), d_q), kFusedAttentionBackward) << "d_q";
      EXPECT_LT(relative_error(download_as_float(d_k_dev), d_k), kFusedAttentionBackward) << "d_k";
      EXPECT_LT(relative_error(download_as_float(d_v_dev), d_v), kFusedAttentionBackward) << "d_v";
    }
  }
}

// ---- elementwise ----

// Aligned buffers (16-byte packs and a 3-element tail), buffers one element
// past 16 bytes (element by element), and 5 elements (a tail and no pack).
struct SwigluCase {
  int64_t count, offset;
};

class CudaSwiglu : public CudaOps, public ::testing::WithParamInterface<SwigluCase> {};

TEST_P(CudaSwiglu, ForwardAndBackwardMatchTheCpu) {
  const auto [count, offset] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(30 + count + offset));
  const std::vector<float> gate = random_bf16_values(count, rng, 2.0f);
  const std::vector<float> up = random_bf16_values(count, rng);
  const std::vector<float> d_out = random_bf16_values(count, rng);
  std::vector<float> expected_out(count), expected_d_gate(count), expected_d_up(count);
  cpu::swiglu_forward(expected_out.data(), gate.data(), up.data(), count);
  cpu::swiglu_backward(expected_d_gate.data(), expected_d_up.data(), d_out.data(), gate.data(),
                       up.data(), count);

  // Each buffer `offset` elements into its allocation; what lies before is
  // poisoned and must stay so.
  const auto shifted = [offset](const std::vector<bf16>& values) {
    std::vector<bf16> padded = nan_bf16(static_cast<size_t>(offset));
    padded.insert(padded.end(), values.begin(), values.end());
    return upload(padded);
  };
  const auto unshifted = [offset](const DeviceBuffer<bf16>& device) {
    std::vector<float> values = download_as_float(device);
    for (int64_t i = 0; i < offset; ++i) EXPECT_TRUE(std::isnan(values[i])) << "element " << i << " written";
    values.erase(values.begin(), values.begin() + offset);
    return values;
  };
  DeviceBuffer<bf16> gate_dev = shifted(to_bf16(gate)), up_dev = shifted(to_bf16(up));
  DeviceBuffer<bf16> d_out_dev = shifted(to_bf16(d_out));
  DeviceBuffer<bf16> out_dev = shifted(nan_bf16(count));
  DeviceBuffer<bf16> d_gate_dev = shifted(nan_bf16(count)), d_up_dev = shifted(nan_bf16(count));
  swiglu_forward(out_dev.get() + offset, gate_dev.get() + offset, up_dev.get() + offset, count, nullptr);
  swiglu_backward(d_gate_dev.get() + offset, d_up_dev.get() + offset, d_out_dev.get() + offset,
                  gate_dev.get() + offset, up_dev.get() + offset, count, nullptr);
  EXPECT_LT(relative_error(unshifted(out_dev), expected_out), kBf16Output);
  EXPECT_LT(relative_error(unshifted(d_gate_dev), expected_d_gate), kBf16Output);
  EXPECT_LT(relative_error(unshifted(d_up_dev), expected_d_up), kBf16Output);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaSwiglu,
                         ::testing::Values(SwigluCase{100003, 0}, SwigluCase{100003, 1}, SwigluCase{5, 0}),
                         [](const ::testing::TestParamInfo<SwigluCase>& info) {
                           return "Count" + std::to_string(info.param.count) + "Offset" +
                                  std::to_string(info.param.offset);
                         });

TEST_F(CudaOps, AddInplace) {
  std::mt19937 rng(31);
  const int64_t count = 100003;
  const std::vector<float> out_initial = random_bf16_values(count, rng);
  const std::vector<float> in = random_bf16_values(count, rng);
  std::vector<float> expected = out_initial;
  cpu::add_inplace(expected.data(), in.data(), count);

  // Aligned buffers take 16-byte packs (and a 3-element tail); starting one
  // element in, the same op goes element by element.
  DeviceBuffer<bf16> out_dev = upload(to_bf16(out_initial)), in_dev = upload(to_bf16(in));
  add_inplace(out_dev.get(), in_dev.get(), count, nullptr);
  EXPECT_LT(relative_error(download_as_float(out_dev), expected), kBf16Output);

  DeviceBuffer<bf16> unaligned_out = upload(to_bf16(out_initial));
  add_inplace(unaligned_out.get() + 1, in_dev.get() + 1, count - 1, nullptr);
  std::vector<float> got = download_as_float(unaligned_out);
  EXPECT_EQ(got[0], out_initial[0]) << "element 0 lies before the range and stays";
  got[0] = expected[0];
  EXPECT_LT(relative_error(got, expected), kBf16Output);
}

TEST_F(CudaOps, CopyFp32ToBf16RoundsToNearest) {
  std::mt19937 rng(32);
  const int64_t count = 100003;
  const std::vector<float> src = random_fp32_values(count, rng);
  const std::vector<float> expected = to_float(to_bf16(src));

  DeviceBuffer<float> src_dev = upload(src);
  DeviceBuffer<bf16> dst_dev = upload(nan_bf16(count));
  copy_fp32_to_bf16(dst_dev.get(), src_dev.get(), count, nullptr);
  EXPECT_EQ(relative_error(download_as_float(dst_dev), expected), 0.0);
}

// ---- cross-entropy ----

TEST_F(CudaOps, CrossEntropyForwardAndBackward) {
  // GPT-2's vocabulary (odd: packs and a scalar tail), Llama-2's (a multiple
  // of 8: packs only) and one narrower than the block (idle threads join the
  // reduction); each with rows vocab long and with rows padded to 64 as the
  // engine stores its logits, the padding poisoned and required untouched.
  for (const int64_t vocab : {int64_t{50257}, int64_t{32000}, int64_t{100}}) {
    for (const int64_t stride : {vocab, (vocab + 63) / 64 * 64}) {
      std::mt19937 rng(static_cast<uint32_t>(40 + vocab + stride));
      const int64_t n = 7;
      const std::vector<float> logits = random_bf16_values(n * vocab, rng, 3.0f);
      const std::vector<int32_t> targets = random_tokens(n, static_cast<int32_t>(vocab), rng);
      std::vector<float> expected_losses(n), expected_lse(n);
      cpu::cross_entropy_forward(expected_losses.data(), expected_lse.data(), logits.data(),
                                 targets.data(), n, vocab);
      const float d_loss = 1.0f / static_cast<float>(n);
      std::vector<float> expected_dlogits = logits;
      cpu::cross_entropy_backward(expected_dlogits.data(), expected_lse.data(), targets.data(), n,
                                  vocab, d_loss);

      // Rows `stride` apart; the padding holds NaN, which would poison any
      // reduction that read it.
      std::vector<bf16> strided = nan_bf16(n * stride);
      const std::vector<bf16> dense = to_bf16(logits);
      for (int64_t row = 0; row < n; ++row)
        std::copy_n(dense.begin() + row * vocab, vocab, strided.begin() + row * stride);
      DeviceBuffer<bf16> logits_dev = upload(strided);
      DeviceBuffer<int32_t> targets_dev = upload(targets);
      DeviceBuffer<float> losses_dev = upload(nan_fp32(n)), lse_dev = upload(nan_fp32(n));
      cross_entropy_forward(losses_dev.get(), lse_dev.get(), logits_dev.get(), targets_dev.get(),
                            n, vocab, stride, nullptr);
      EXPECT_LT(relative_error(download(losses_dev), expected_losses), kFp32FromBf16)
          << vocab << " stride " << stride;
      EXPECT_LT(relative_error(download(lse_dev), expected_lse), kFp32FromBf16)
          << vocab << " stride " << stride;

      // Backward from the CPU's logsumexp, so it is tested on its own.
      DeviceBuffer<float> cpu_lse_dev = upload(expected_lse);
      cross_entropy_backward(logits_dev.get(), cpu_lse_dev.get(), targets_dev.get(), n, vocab,
                             stride, d_loss, nullptr);
      const std::vector<float> got = download_as_float(logits_dev);
      std::vector<float> got_dense;
      for (int64_t row = 0; row < n; ++row) {
        got_dense.insert(got_dense.end(), got.begin() + row * stride,
                         got.begin() + row * stride + vocab);
        for (int64_t col = vocab; col < stride; ++col)
          ASSERT_TRUE(std::isnan(got[row * stride + col])) << "padding written at row " << row;
      }
      EXPECT_LT(relative_error(got_dense, expected_dlogits), kBf16Output)
          << vocab << " stride " << stride;
    }
  }
  EXPECT_THROW(cross_entropy_forward(nullptr, nullptr, nullptr, nullptr, 1, 100, 99, nullptr),
               std::invalid_argument);
}

TEST_F(CudaOps, FillUniformIsInRangeSpreadAndRepeatable) {
  const int64_t count = 1 << 20;
  DeviceBuffer<bf16> first = upload(nan_bf16(count)), second = upload(nan_bf16(count));
  fill_uniform_bf16(first.get(), count, 2.0f, 11u, nullptr);
  fill_uniform_bf16(second.get(), count, 2.0f, 11u, nullptr);
  const std::vector<float> a = download_as_float(first), b = download_as_float(second);
  double sum = 0.0, sum_sq = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_TRUE(a[i] >= -2.0f && a[i] <= 2.0f) << "element " << i << " = " << a[i];
    ASSERT_EQ(a[i], b[i]) << "element " << i << " differs between two fills with one seed";
    sum += a[i];
    sum_sq += static_cast<double>(a[i]) * a[i];
  }
  // Uniform on [-2, 2): mean 0, variance 4/3.
  EXPECT_NEAR(sum / count, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / count, 4.0 / 3.0, 0.01);
  fill_uniform_bf16(second.get(), count, 2.0f, 12u, nullptr);
  const std::vector<float> c = download_as_float(second);
  int64_t same = 0;
  for (int64_t i = 0; i < count; ++i) same += a[i] == c[i];
  EXPECT_LT(same, count / 50) << "another seed gives other values";
}

// ---- gradient norm and optimizer ----

TEST_F(CudaOps, SumOfSquares) {
  std::mt19937 rng(50);
  // More packs of 8 than the first pass's 1024 × 256 threads: each goes
  // round the grid-stride loop twice, and a tail of 3 follows.
  const int64_t count = 3000019;
  const std::vector<float> x = random_fp32_values(count, rng);
  const double expected = cpu::sum_of_squares(x.data(), count);

  DeviceBuffer<float> x_dev = upload(x);
  DeviceBuffer<double> scratch = upload(std::vector<double>(sum_of_squares_scratch_doubles(count), NAN));
  DeviceBuffer<double> result = upload(std::vector<double>{NAN});
  sum_of_squares(result.get(), x_dev.get(), count, scratch.get(), nullptr);
  const double got = download(result)[0];
  EXPECT_LT(std::fabs(got - expected) / expected, kSumOfSquares) << got << " vs " << expected;

  // From the second element on: not 16-byte aligned, so element by element.
  const double expected_rest = cpu::sum_of_squares(x.data() + 1, count - 1);
  sum_of_squares(result.get(), x_dev.get() + 1, count - 1, scratch.get(), nullptr);
  const double got_rest = download(result)[0];
  EXPECT_LT(std::fabs(got_rest - expected_rest) / expected_rest, kSumOfSquares)
      << got_rest << " vs " << expected_rest;

  // An empty buffer still writes its sum, 0.
  sum_of_squares(result.get(), x_dev.get(), 0, nullptr, nullptr);
  EXPECT_EQ(download(result)[0], 0.0);
}

TEST_F(CudaOps, ClipScaleAsTorchClipGradNorm) {
  struct Case {
    double sum_sq, max_norm;
    float expected_scale;
  };
  // norm 4: clipped to 1 → 1/(4 + 1e-6); under 10 → 1; max_norm 0 disables.
  // The CPU engine's very bits (its formula, in double): at 0.1 a float
  // max_norm gave a scale one bit off.
  const Case cases[] = {{16.0, 1.0, static_cast<float>(1.0 / (4.0 + 1e-6))},
                        {16.0, 0.1, static_cast<float>(0.1 / (4.0 + 1e-6))},
                        {16.0, 10.0, 1.0f},
                        {16.0, 0.0, 1.0f}};
  for (const Case& c : cases) {
    DeviceBuffer<double> sum_sq = upload(std::vector<double>{c.sum_sq});
    DeviceBuffer<float> scale = upload(nan_fp32(1)), norm = upload(nan_fp32(1));
    clip_scale_from_sum_of_squares(scale.get(), norm.get(), sum_sq.get(), c.max_norm, nullptr);
    EXPECT_EQ(download(scale)[0], c.expected_scale) << "max_norm " << c.max_norm;
    EXPECT_FLOAT_EQ(download(norm)[0], 4.0f);
  }
}

TEST_F(CudaOps, AdamWUpdateMatchesCpuAndWritesTheBf16Copy) {
  std::mt19937 rng(60);
  // Packs of 8 and a tail of 3; more packs than the largest grid's 2048 × 256
  // threads, so the grid-stride loop goes round more than once.
  const int64_t count = 4500003;
  const float grad_scale = 0.5f;
  const AdamWStep step{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7};
  const std::vector<float> master_initial = random_fp32_values(count, rng);
  const std::vector<float> grads = random_fp32_values(count, rng);
  const std::vector<float> m_initial = random_fp32_values(count, rng, 0.1f);
  std::vector<float> v_initial = random_fp32_values(count, rng, 0.1f);
  for (float& v : v_initial) v = v * v;  // second moments are non-negative

  std::vector<float> expected_master = master_initial, expected_m = m_initial, expected_v = v_initial;
  cpu::adamw_update(expected_master.data(), grads.data(), expected_m.data(), expected_v.data(), count,
                    cpu::AdamWStep{step.lr, step.beta1, step.beta2, step.eps, step.weight_decay, grad_scale,
                                   step.step});

  // What each offset wrote: master, m, v and the bf16 copy.
  struct Written {
    std::vector<float> master, m, v;
    std::vector<bf16> params;
  };
  std::vector<Written> written;
  // offset 0: 16-byte packs; offset 1: no buffer 16-byte aligned; offset 4:
  // the fp32 buffers are, the bf16 copy (8 bytes in) is not. Element by
  // element in both (a ZeRO-1 shard or a tensor can start anywhere). The
  // same inputs at every offset.
  for (const int64_t offset : {0, 1, 4}) {
    // The same values `offset` elements into each buffer; NaN before them.
    auto shifted = [offset](const std::vector<float>& values) {
      std::vector<float> out(offset, NAN);
      out.insert(out.end(), values.begin(), values.end());
      return out;
    };
    auto unshifted = [offset](const auto& values) {
      return std::vector<typename std::decay_t<decltype(values)>::value_type>(values.begin() + offset,
                                                                              values.end());
    };
    DeviceBuffer<float> master_dev = upload(shifted(master_initial)), grads_dev = upload(shifted(grads));
    DeviceBuffer<float> m_dev = upload(shifted(m_initial)), v_dev = upload(shifted(v_initial));
    DeviceBuffer<float> grad_scale_dev = upload(std::vector<float>{grad_scale});
    DeviceBuffer<bf16> params_dev = upload(nan_bf16(count + offset));
    adamw_update(master_dev.get() + offset, params_dev.get() + offset, grads_dev.get() + offset,
                 m_dev.get() + offset, v_dev.get() + offset, count, step, grad_scale_dev.get(), nullptr);
    Written w{unshifted(download(master_dev)), unshifted(download(m_dev)), unshifted(download(v_dev)),
              unshifted(download(params_dev))};
    EXPECT_LT(relative_error(w.master, expected_master), kAdamW) << "offset " << offset;
    EXPECT_LT(relative_error(w.m, expected_m), kAdamW) << "offset " << offset;
    EXPECT_LT(relative_error(w.v, expected_v), kAdamW) << "offset " << offset;
    // The bf16 copy is exactly the new master rounded to nearest.
    EXPECT_EQ(relative_error(to_float(w.params), to_float(to_bf16(w.master))), 0.0) << "offset " << offset;
    written.push_back(std::move(w));
  }
  // The packed path (offset 0) and the element-by-element one give the same
  // bits: a ZeRO-1 shard that starts unaligned must update its parameters
  // exactly as one rank holding the whole tensor does.
  auto same_bits = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  for (size_t i = 1; i < written.size(); ++i) {
    EXPECT_TRUE(same_bits(written[0].master, written[i].master)) << "master, offset case " << i;
    EXPECT_TRUE(same_bits(written[0].m, written[i].m)) << "m, offset case " << i;
    EXPECT_TRUE(same_bits(written[0].v, written[i].v)) << "v, offset case " << i;
    EXPECT_TRUE(same_bits(written[0].params, written[i].params)) << "bf16 copy, offset case " << i;
  }
}

// ---- determinism ----

TEST_F(CudaOps, ReductionsRepeatBitForBit) {
  std::mt19937 rng(70);
  const int64_t n = 1100, d = 333, vocab = 50;
  const std::vector<bf16> in = to_bf16(random_bf16_values(n * d, rng));
  const std::vector<bf16> weight = to_bf16(random_bf16_values(d, rng));
  const std::vector<bf16> d_out = to_bf16(random_bf16_values(n * d, rng));
  const std::vector<float> rstd = random_fp32_values(n, rng);
  const std::vector<int32_t> tokens = random_tokens(n, vocab, rng);
  const std::vector<float> grads = random_fp32_values(1000003, rng);
  DeviceBuffer<bf16> in_dev = upload(in), weight_dev = upload(weight), d_out_dev = upload(d_out);
  DeviceBuffer<float> rstd_dev = upload(rstd), grads_dev = upload(grads);
  const DeviceTokenGroups groups = group_on_device(tokens, vocab);
  DeviceBuffer<float> rms_scratch(rmsnorm_backward_scratch_floats(n, d));
  DeviceBuffer<double> sum_scratch(sum_of_squares_scratch_doubles(grads.size()));

  struct Results {
    std::vector<bf16> d_in;
    std::vector<float> d_weight, d_table;
    double sum_sq;
  };
  auto run_once = [&] {
    DeviceBuffer<bf16> d_in = upload(std::vector<bf16>(n * d, __float2bfloat16(0.0f)));
    DeviceBuffer<float> d_weight = upload(std::vector<float>(d, 0.0f));
    DeviceBuffer<float> d_table = upload(std::vector<float>(vocab * d, 0.0f));
    DeviceBuffer<double> sum_sq(1);
    rmsnorm_backward(d_in.get(), d_weight.get(), d_out_dev.get(), in_dev.get(), weight_dev.get(),
                     rstd_dev.get(), n, d, rms_scratch.get(), nullptr);
    embedding_backward(d_table.get(), d_out_dev.get(), groups.view(), d, nullptr);
    sum_of_squares(sum_sq.get(), grads_dev.get(), static_cast<int64_t>(grads.size()),
                   sum_scratch.get(), nullptr);
    return Results{download(d_in), download(d_weight), download(d_table), download(sum_sq)[0]};
  };
  const Results first = run_once(), second = run_once();
  EXPECT_EQ(std::memcmp(first.d_in.data(), second.d_in.data(), first.d_in.size() * sizeof(bf16)), 0);
  EXPECT_EQ(std::memcmp(first.d_weight.data(), second.d_weight.data(),
                        first.d_weight.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(first.d_table.data(), second.d_table.data(),
                        first.d_table.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(&first.sum_sq, &second.sum_sq, sizeof(double)), 0);
}

}  // namespace
}  // namespace trainbench::cuda
