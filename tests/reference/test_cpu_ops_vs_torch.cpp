// Every op of kernels/cpu/cpu_ops.h against libtorch autograd on fresh random
// inputs, fp32, relative error <= 1e-4. Buffers an op overwrites start as NaN,
// so an element it never writes fails the comparison; buffers it accumulates
// into start from random values, so a `=` where `+=` is due fails too.
#include <cmath>    // std::sqrt
#include <cstdint>  // int64_t, int32_t
#include <limits>   // quiet NaN for poisoned buffers
#include <sstream>  // test names
#include <string>   // test names
#include <vector>   // scratch buffers

#include <gtest/gtest.h>   // TEST, EXPECT_*
#include <omp.h>           // omp_get_max_threads: attention scratch is per thread
#include <torch/torch.h>   // reference tensors and autograd

#include "kernels/cpu/cpu_ops.h"           // the ops under test
#include "tests/reference/relative_error.h"  // relative_error
#include "tests/reference/torch_llama.h"     // rms_norm, apply_rope, causal_attention, swiglu

namespace trainbench::cpu {
namespace {

namespace F = torch::nn::functional;
using reference::relative_error;

constexpr double kTolerance = 1e-4;

torch::Tensor random_normal(at::IntArrayRef shape, double stddev = 1.0) {
  return torch::randn(shape, torch::kFloat32) * stddev;
}
// Filled with NaN: an output element the op forgets to write stays NaN.
torch::Tensor poisoned(at::IntArrayRef shape) {
  return torch::full(shape, std::numeric_limits<float>::quiet_NaN(), torch::kFloat32);
}
torch::Tensor random_tokens(int64_t count, int64_t vocab) {
  return torch::randint(vocab, {count}, torch::kInt32);
}
float* ptr(torch::Tensor& t) { return t.data_ptr<float>(); }
const float* cptr(const torch::Tensor& t) { return t.data_ptr<float>(); }
const int32_t* token_ptr(const torch::Tensor& t) { return t.data_ptr<int32_t>(); }
// A leaf tensor autograd differentiates, holding a copy of `values`.
torch::Tensor leaf(const torch::Tensor& values) {
  return values.detach().clone().requires_grad_(true);
}

class CpuOpsVsTorch : public ::testing::Test {
 protected:
  // Each test draws its own inputs from a fixed seed: reproducible failures.
  void SetUp() override { torch::manual_seed(20240611); }
};

// --- matmul (PyTorch Linear without bias) -----------------------------------

constexpr int64_t kRows = 37, kInDim = 48, kOutDim = 29;  // none a power of two

TEST_F(CpuOpsVsTorch, MatmulForwardMatchesLinear) {
  const torch::Tensor in = random_normal({kRows, kInDim});
  const torch::Tensor weight = random_normal({kOutDim, kInDim}, 0.2);
  torch::Tensor out = poisoned({kRows, kOutDim});

  matmul_forward(ptr(out), cptr(in), cptr(weight), kRows, kInDim, kOutDim);

  EXPECT_LE(relative_error(out, F::linear(in, weight)), kTolerance);
}

void check_matmul_backward(bool accumulate_d_in) {
  const torch::Tensor in_values = random_normal({kRows, kInDim});
  const torch::Tensor weight_values = random_normal({kOutDim, kInDim}, 0.2);
  const torch::Tensor d_out = random_normal({kRows, kOutDim});
  torch::Tensor in = leaf(in_values), weight = leaf(weight_values);
  F::linear(in, weight).backward(d_out);

  const torch::Tensor d_in_before =
      accumulate_d_in ? random_normal({kRows, kInDim}) : poisoned({kRows, kInDim});
  const torch::Tensor d_weight_before = random_normal({kOutDim, kInDim});
  torch::Tensor d_in = d_in_before.clone(), d_weight = d_weight_before.clone();

  matmul_backward(ptr(d_in), ptr(d_weight), cptr(d_out), cptr(in_values), cptr(weight_values),
                  kRows, kInDim, kOutDim, accumulate_d_in);

  const torch::Tensor expected_d_in = accumulate_d_in ? d_in_before + in.grad() : in.grad();
  EXPECT_LE(relative_error(d_in, expected_d_in), kTolerance) << "d_in";
  EXPECT_LE(relative_error(d_weight, d_weight_before + weight.grad()), kTolerance)
      << "d_weight accumulates";
}

TEST_F(CpuOpsVsTorch, MatmulBackwardOverwritesInputGradient) { check_matmul_backward(false); }
TEST_F(CpuOpsVsTorch, MatmulBackwardAccumulatesInputGradient) { check_matmul_backward(true); }

TEST_F(CpuOpsVsTorch, MatmulBackwardSkipsNullGradients) {
  const torch::Tensor in_values = random_normal({kRows, kInDim});
  const torch::Tensor weight_values = random_normal({kOutDim, kInDim}, 0.2);
  const torch::Tensor d_out = random_normal({kRows, kOutDim});
  torch::Tensor in = leaf(in_values), weight = leaf(weight_values);
  F::linear(in, weight).backward(d_out);

  // Frozen weight: only the input gradient.
  torch::Tensor d_in = poisoned({kRows, kInDim});
  matmul_backward(ptr(d_in), nullptr, cptr(d_out), cptr(in_values), cptr(weight_values), kRows,
                  kInDim, kOutDim, /*accumulate_d_in=*/false);
  EXPECT_LE(relative_error(d_in, in.grad()), kTolerance) << "d_in with d_weight == nullptr";

  // First layer after the embedding input: only the weight gradient.
  const torch::Tensor d_weight_before = random_normal({kOutDim, kInDim});
  torch::Tensor d_weight = d_weight_before.clone();
  matmul_backward(nullptr, ptr(d_weight), cptr(d_out), cptr(in_values), cptr(weight_values),
                  kRows, kInDim, kOutDim, /*accumulate_d_in=*/false);
  EXPECT_LE(relative_error(d_weight, d_weight_before + weight.grad()), kTolerance)
      << "d_weight with d_in == nullptr";
}

// --- embedding ---------------------------------------------------------------

constexpr int64_t kVocab = 53, kEmbedDim = 24, kTokens = 41;  // more tokens than some rows: repeats

TEST_F(CpuOpsVsTorch, EmbeddingForwardGathersRows) {
  const torch::Tensor tokens = random_tokens(kTokens, kVocab);
  const torch::Tensor embedding = random_normal({kVocab, kEmbedDim});
  torch::Tensor out = poisoned({kTokens, kEmbedDim});

  embedding_forward(ptr(out), token_ptr(tokens), cptr(embedding), kTokens, kEmbedDim);

  EXPECT_LE(relative_error(out, F::embedding(tokens.to(torch::kInt64), embedding)), kTolerance);
}

TEST_F(CpuOpsVsTorch, EmbeddingBackwardAccumulatesRepeatedTokens) {
  // Few distinct ids so that most rows receive several contributions.
  const torch::Tensor tokens = random_tokens(kTokens, 7);
  torch::Tensor embedding = leaf(random_normal({kVocab, kEmbedDim}));
  const torch::Tensor d_out = random_normal({kTokens, kEmbedDim});
  F::embedding(tokens.to(torch::kInt64), embedding).backward(d_out);

  const torch::Tensor d_embedding_before = random_normal({kVocab, kEmbedDim});
  torch::Tensor d_embedding = d_embedding_before.clone();
  embedding_backward(ptr(d_embedding), cptr(d_out), token_ptr(tokens), kTokens, kEmbedDim);

  EXPECT_LE(relative_error(d_embedding, d_embedding_before + embedding.grad()), kTolerance);
}

// --- rmsnorm -----------------------------------------------------------------

constexpr int64_t kNormRows = 19, kNormDim = 40;
constexpr float kNormEps = 1e-5f;

TEST_F(CpuOpsVsTorch, RmsnormForwardMatchesReference) {
  const torch::Tensor in = random_normal({kNormRows, kNormDim}, 3.0);
  const torch::Tensor weight = 1.0 + random_normal({kNormDim}, 0.3);
  torch::Tensor out = poisoned({kNormRows, kNormDim});
  torch::Tensor rstd = poisoned({kNormRows});

  rmsnorm_forward(ptr(out), ptr(rstd), cptr(in), cptr(weight), kNormRows, kNormDim, kNormEps);

  EXPECT_LE(relative_error(out, reference::rms_norm(in, weight, kNormEps)), kTolerance) << "out";
  const torch::Tensor expected_rstd = torch::rsqrt(in.pow(2).mean(-1) + kNormEps);
  EXPECT_LE(relative_error(rstd, expected_rstd), kTolerance) << "rstd";
}

TEST_F(CpuOpsVsTorch, RmsnormBackwardAccumulatesBothGradients) {
  const torch::Tensor in_values = random_normal({kNormRows, kNormDim}, 3.0);
  const torch::Tensor weight_values = 1.0 + random_normal({kNormDim}, 0.3);
  const torch::Tensor d_out = random_normal({kNormRows, kNormDim});
  torch::Tensor in = leaf(in_values), weight = leaf(weight_values);
  reference::rms_norm(in, weight, kNormEps).backward(d_out);

  torch::Tensor out = poisoned({kNormRows, kNormDim});
  torch::Tensor rstd = poisoned({kNormRows});
  rmsnorm_forward(ptr(out), ptr(rstd), cptr(in_values), cptr(weight_values), kNormRows, kNormDim,
                  kNormEps);
  const torch::Tensor d_in_before = random_normal({kNormRows, kNormDim});
  const torch::Tensor d_weight_before = random_normal({kNormDim});
  torch::Tensor d_in = d_in_before.clone(), d_weight = d_weight_before.clone();

  rmsnorm_backward(ptr(d_in), ptr(d_weight), cptr(d_out), cptr(in_values), cptr(weight_values),
                   cptr(rstd), kNormRows, kNormDim);

  EXPECT_LE(relative_error(d_in, d_in_before + in.grad()), kTolerance) << "d_in accumulates";
  EXPECT_LE(relative_error(d_weight, d_weight_before + weight.grad()), kTolerance)
      << "d_weight accumulates";
}

// --- rotary position embedding ------------------------------------------------

struct RopeCase {
  int64_t batch, seq_len, n_heads, head_dim;
  double theta;
};
class RopeVsTorch : public CpuOpsVsTorch, public ::testing::WithParamInterface<RopeCase> {};

TEST_P(RopeVsTorch, ForwardRotatesHalfSplitPairs) {
  const RopeCase c = GetParam();
  const torch::Tensor x = random_normal({c.batch, c.seq_len, c.n_heads, c.head_dim});
  torch::Tensor rotated = x.clone();

  rope_forward(ptr(rotated), c.batch, c.seq_len, c.n_heads, c.head_dim, c.theta);

  const auto tables = reference::make_rope_tables(c.seq_len, c.head_dim, c.theta);
  EXPECT_LE(relative_error(rotated, reference::apply_rope(x, tables)), kTolerance);
}

TEST_P(RopeVsTorch, BackwardIsTheAutogradGradient) {
  const RopeCase c = GetParam();
  torch::Tensor x = leaf(random_normal({c.batch, c.seq_len, c.n_heads, c.head_dim}));
  const torch::Tensor d_out = random_normal({c.batch, c.seq_len, c.n_heads, c.head_dim});
  const auto tables = reference::make_rope_tables(c.seq_len, c.head_dim, c.theta);
  reference::apply_rope(x, tables).backward(d_out);
  torch::Tensor d_x = d_out.clone();

  rope_backward(ptr(d_x), c.batch, c.seq_len, c.n_heads, c.head_dim, c.theta);

  EXPECT_LE(relative_error(d_x, x.grad()), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RopeVsTorch,
    ::testing::Values(RopeCase{2, 37, 3, 16, 10000.0},   // T not a power of two
                      RopeCase{1, 64, 2, 8, 500000.0},   // Llama-3 theta
                      RopeCase{3, 5, 4, 2, 10000.0}),    // one pair per head
    [](const auto& info) { return "case" + std::to_string(info.index); });

// --- attention -----------------------------------------------------------------

class AttentionVsTorch : public CpuOpsVsTorch,
                         public ::testing::WithParamInterface<AttentionShape> {
 protected:
  struct Inputs {
    torch::Tensor q, k, v;
  };
  Inputs random_inputs() const {
    const AttentionShape s = GetParam();
    // Unit-variance q and k give scores of order 1: peaked, non-uniform softmax.
    return {random_normal({s.batch, s.seq_len, s.n_heads, s.head_dim}),
            random_normal({s.batch, s.seq_len, s.n_kv_heads, s.head_dim}),
            random_normal({s.batch, s.seq_len, s.n_kv_heads, s.head_dim})};
  }
};

TEST_P(AttentionVsTorch, ForwardMatchesCausalSoftmaxAttention) {
  const AttentionShape s = GetParam();
  const Inputs in = random_inputs();
  torch::Tensor out = poisoned({s.batch, s.seq_len, s.n_heads, s.head_dim});
  torch::Tensor probs = poisoned({s.batch, s.n_heads, s.seq_len, s.seq_len});

  attention_forward(ptr(out), ptr(probs), cptr(in.q), cptr(in.k), cptr(in.v), s);

  const reference::AttentionResult expected = reference::causal_attention(in.q, in.k, in.v);
  EXPECT_LE(relative_error(out, expected.out), kTolerance) << "out";
  EXPECT_LE(relative_error(probs, expected.probs), kTolerance)
      << "probs (masked entries must be 0)";
}

TEST_P(AttentionVsTorch, BackwardMatchesAutograd) {
  const AttentionShape s = GetParam();
  const Inputs in = random_inputs();
  torch::Tensor q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  const torch::Tensor d_out = random_normal({s.batch, s.seq_len, s.n_heads, s.head_dim});
  reference::causal_attention(q, k, v).out.backward(d_out);

  torch::Tensor out = poisoned({s.batch, s.seq_len, s.n_heads, s.head_dim});
  torch::Tensor probs = poisoned({s.batch, s.n_heads, s.seq_len, s.seq_len});
  attention_forward(ptr(out), ptr(probs), cptr(in.q), cptr(in.k), cptr(in.v), s);
  torch::Tensor d_q = poisoned({s.batch, s.seq_len, s.n_heads, s.head_dim});
  torch::Tensor d_k = poisoned({s.batch, s.seq_len, s.n_kv_heads, s.head_dim});
  torch::Tensor d_v = poisoned({s.batch, s.seq_len, s.n_kv_heads, s.head_dim});
  std::vector<float> scratch(attention_scratch_floats(s, omp_get_max_threads()));

  attention_backward(ptr(d_q), ptr(d_k), ptr(d_v), cptr(d_out), cptr(probs), cptr(in.q),
                     cptr(in.k), cptr(in.v), scratch.data(), s);

  EXPECT_LE(relative_error(d_q, q.grad()), kTolerance) << "d_q";
  EXPECT_LE(relative_error(d_k, k.grad()), kTolerance) << "d_k (summed over the query group)";
  EXPECT_LE(relative_error(d_v, v.grad()), kTolerance) << "d_v (summed over the query group)";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionVsTorch,
    ::testing::Values(AttentionShape{2, 16, 4, 4, 8},    // multi-head
                      AttentionShape{2, 37, 6, 2, 8},    // grouped-query, odd T
                      AttentionShape{3, 29, 4, 1, 16},   // multi-query, odd T
                      AttentionShape{1, 1, 2, 2, 4}),    // one token: softmax of one score
    [](const auto& info) {
      const AttentionShape& s = info.param;
      std::ostringstream name;
      name << "b" << s.batch << "_t" << s.seq_len << "_h" << s.n_heads << "_kv" << s.n_kv_heads
           << "_d" << s.head_dim;
      return name.str();
    });

// --- SwiGLU and the residual add ------------------------------------------------

constexpr int64_t kElements = 1031;  // not a multiple of any vector width

TEST_F(CpuOpsVsTorch, SwigluForwardMatchesSiluTimesUp) {
  const torch::Tensor gate = random_normal({kElements}, 3.0);
  const torch::Tensor up = random_normal({kElements});
  torch::Tensor out = poisoned({kElements});

  swiglu_forward(ptr(out), cptr(gate), cptr(up), kElements);

  EXPECT_LE(relative_error(out, reference::swiglu(gate, up)), kTolerance);
}

TEST_F(CpuOpsVsTorch, SwigluBackwardMatchesAutograd) {
  const torch::Tensor gate_values = random_normal({kElements}, 3.0);
  const torch::Tensor up_values = random_normal({kElements});
  const torch::Tensor d_out = random_normal({kElements});
  torch::Tensor gate = leaf(gate_values), up = leaf(up_values);
  reference::swiglu(gate, up).backward(d_out);
  // Not documented as accumulating: both gradients are overwritten.
  torch::Tensor d_gate = poisoned({kElements}), d_up = poisoned({kElements});

  swiglu_backward(ptr(d_gate), ptr(d_up), cptr(d_out), cptr(gate_values), cptr(up_values),
                  kElements);

  EXPECT_LE(relative_error(d_gate, gate.grad()), kTolerance) << "d_gate";
  EXPECT_LE(relative_error(d_up, up.grad()), kTolerance) << "d_up";
}

TEST_F(CpuOpsVsTorch, AddInplaceAccumulates) {
  const torch::Tensor before = random_normal({kElements});
  const torch::Tensor addend = random_normal({kElements});
  torch::Tensor out = before.clone();

  add_inplace(ptr(out), cptr(addend), kElements);

  EXPECT_LE(relative_error(out, before + addend), kTolerance);
}

// --- cross-entropy -----------------------------------------------------------------

constexpr int64_t kLossRows = 23, kLossVocab = 57;

TEST_F(CpuOpsVsTorch, CrossEntropyForwardMatchesTorch) {
  const torch::Tensor logits = random_normal({kLossRows, kLossVocab}, 3.0);
  const torch::Tensor targets = random_tokens(kLossRows, kLossVocab);
  torch::Tensor losses = poisoned({kLossRows}), logsumexp = poisoned({kLossRows});

  cross_entropy_forward(ptr(losses), ptr(logsumexp), cptr(logits), token_ptr(targets), kLossRows,
                        kLossVocab);

  const torch::Tensor expected_losses = F::cross_entropy(
      logits, targets.to(torch::kInt64), F::CrossEntropyFuncOptions().reduction(torch::kNone));
  EXPECT_LE(relative_error(losses, expected_losses), kTolerance) << "losses";
  EXPECT_LE(relative_error(logsumexp, torch::logsumexp(logits, -1)), kTolerance) << "logsumexp";
}

TEST_F(CpuOpsVsTorch, CrossEntropyBackwardTurnsLogitsIntoTheirGradient) {
  const torch::Tensor logit_values = random_normal({kLossRows, kLossVocab}, 3.0);
  const torch::Tensor targets = random_tokens(kLossRows, kLossVocab);
  // The engine passes loss_scale / tokens: the gradient of a scaled mean.
  const float d_loss = 0.7f / static_cast<float>(kLossRows);
  torch::Tensor logits = leaf(logit_values);
  (F::cross_entropy(logits, targets.to(torch::kInt64),
                    F::CrossEntropyFuncOptions().reduction(torch::kSum)) *
   d_loss)
      .backward();

  torch::Tensor losses = poisoned({kLossRows}), logsumexp = poisoned({kLossRows});
  cross_entropy_forward(ptr(losses), ptr(logsumexp), cptr(logit_values), token_ptr(targets),
                        kLossRows, kLossVocab);
  torch::Tensor dlogits = logit_values.clone();
  cross_entropy_backward(ptr(dlogits), cptr(logsumexp), token_ptr(targets), kLossRows,
                         kLossVocab, d_loss);

  EXPECT_LE(relative_error(dlogits, logits.grad()), kTolerance);
}

// --- optimizer pieces ----------------------------------------------------------------

TEST_F(CpuOpsVsTorch, SumOfSquaresMatchesDoubleReduction) {
  constexpr int64_t kCount = 100003;  // odd tail after any blocking
  const torch::Tensor x = random_normal({kCount}, 0.01);

  const double ours = sum_of_squares(cptr(x), kCount);

  const double expected = x.to(torch::kFloat64).pow(2).sum().item<double>();
  ASSERT_GT(expected, 0.0);
  EXPECT_LE(std::abs(ours - expected) / expected, kTolerance)
      << "ours " << ours << ", torch " << expected;
}

TEST_F(CpuOpsVsTorch, AdamwUpdateMatchesTorchAdamW) {
  constexpr int64_t kCount = 1001;
  constexpr float kLr = 1e-2f, kBeta1 = 0.9f, kBeta2 = 0.95f, kEps = 1e-8f, kDecay = 0.1f;
  // A different clipping factor each step: the scale must reach m and v.
  const float grad_scales[] = {1.0f, 0.5f, 0.25f};

  torch::Tensor torch_param = leaf(random_normal({kCount}, 0.05));
  torch::optim::AdamW optimizer(
      {torch_param}, torch::optim::AdamWOptions(kLr)
                         .betas(std::make_tuple(kBeta1, kBeta2))
                         .eps(kEps)
                         .weight_decay(kDecay));
  torch::Tensor params = torch_param.detach().clone();
  torch::Tensor m = torch::zeros({kCount}), v = torch::zeros({kCount});

  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const float grad_scale = grad_scales[step - 1];
    const torch::Tensor grads = random_normal({kCount}, 0.01);
    const torch::Tensor params_before = params.clone();
    const torch::Tensor torch_before = torch_param.detach().clone();
    torch_param.mutable_grad() = grads * grad_scale;
    optimizer.step();

    adamw_update(ptr(params), cptr(grads), ptr(m), ptr(v), kCount,
                 AdamWStep{kLr, kBeta1, kBeta2, kEps, kDecay, grad_scale, step});

    const auto& state = static_cast<const torch::optim::AdamWParamState&>(
        *optimizer.state().at(c10::guts::to_string(torch_param.unsafeGetTensorImpl())));
    EXPECT_LE(relative_error(params, torch_param), kTolerance) << "parameters";
    EXPECT_LE(relative_error(m, state.exp_avg()), kTolerance) << "first moment";
    EXPECT_LE(relative_error(v, state.exp_avg_sq()), kTolerance) << "second moment";
    // The step itself, not only the parameters it moved by a fraction.
    EXPECT_LE(relative_error(params - params_before, torch_param.detach() - torch_before),
              kTolerance)
        << "update";
  }
}

}  // namespace
}  // namespace trainbench::cpu
