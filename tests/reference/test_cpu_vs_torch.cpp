// The whole CPU engine against the libtorch reference model: logits, loss and
// every parameter's gradient after one forward + backward, three AdamW steps
// against torch::optim::AdamW (with and without clipping), gradient
// accumulation over micro-batches, and the gradients-ready contract of
// backward; the same with LoRA adapters (PEFT's formulation in libtorch),
// whose frozen base must come out of training bit-identical. fp32 on both
// sides, relative error <= 1e-4 per tensor.
#include <algorithm>  // std::equal, std::all_of
#include <cmath>      // std::abs
#include <cstdint>    // int64_t, int32_t
#include <memory>     // std::unique_ptr
#include <ostream>    // PrintTo
#include <random>     // seeded tokens and weight spreading
#include <string>     // case names
#include <vector>     // host buffers

#include <gtest/gtest.h>  // TEST_P, EXPECT_*
#include <torch/torch.h>  // the reference model's tensors

#include "kernels/cpu/cpu_engine.h"          // CpuEngine, the engine under test
#include "kernels/engine.h"                  // TokenBatch, AdamWSettings, GradientsReadyFn
#include "tests/reference/relative_error.h"  // relative_error
#include "tests/reference/torch_llama.h"     // TorchLlama

namespace trainbench {
namespace {

using reference::relative_error;
using reference::TorchLlama;

constexpr double kTolerance = 1e-4;
constexpr uint64_t kParameterSeed = 1234;

struct ModelCase {
  std::string name;
  ModelShape shape;
  int64_t micro_batch;
  AdamWSettings adamw;
  bool clipping_expected;  // grad_clip is below the gradient norm on every step
  LoraSpec lora = {};      // rank > 0: LoRA adapters trained, the base frozen
};

// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

ModelShape make_shape(int64_t vocab, int64_t d_model, int64_t n_layers, int64_t n_heads,
                      int64_t n_kv_heads, int64_t ffn_hidden, int64_t seq_len, double rope_theta,
                      double norm_eps) {
  ModelShape s;
  s.vocab = vocab;
  s.d_model = d_model;
  s.n_layers = n_layers;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.ffn_hidden = ffn_hidden;
  s.seq_len = seq_len;
  s.rope_theta = rope_theta;
  s.norm_eps = norm_eps;
  return s;
}

AdamWSettings make_adamw(double lr, double eps, double weight_decay, double grad_clip) {
  AdamWSettings a;
  a.lr = lr;  // large enough that three steps move parameters well past the tolerance
  a.beta1 = 0.9;
  a.beta2 = 0.95;
  a.eps = eps;
  a.weight_decay = weight_decay;
  a.grad_clip = grad_clip;
  return a;
}

std::vector<ModelCase> model_cases() {
  return {
      // Multi-head attention; clipping disabled (the norm must still be reported).
      {"multi_head", make_shape(97, 32, 2, 4, 4, 80, 16, 10000.0, 1e-5), 2,
       make_adamw(1e-2, 1e-8, 0.1, 0.0), false},
      // Grouped-query attention, three kv groups of two; clipping on but not reached.
      {"grouped_query", make_shape(64, 48, 1, 6, 2, 96, 24, 10000.0, 1e-6), 3,
       make_adamw(1e-2, 1e-8, 0.1, 1e3), false},
      // Grouped-query, T = 37, two layers, Llama-3 theta; clipping active on every
      // step. Adam divides out a constant gradient scale, so eps is set near the
      // clipped per-element gradient size: a missing or wrong clip factor then
      // changes the update well past the tolerance.
      {"grouped_query_seq37", make_shape(128, 64, 2, 4, 2, 160, 37, 500000.0, 1e-5), 2,
       make_adamw(1e-2, 1e-5, 0.1, 0.05), true},
      // LoRA on q, k, v, o (MLPerf's Llama-2-70B default), grouped-query:
      // gradients for the adapters only, input gradients through the frozen base.
      {"lora_qkvo", make_shape(97, 48, 2, 6, 2, 96, 16, 10000.0, 1e-5), 2,
       make_adamw(1e-2, 1e-8, 0.1, 0.0), false,
       LoraSpec{4, 8.0, {ParamKind::kWq, ParamKind::kWk, ParamKind::kWv, ParamKind::kWo}}},
      // LoRA on every projection, rank 3, alpha/rank not a power of two.
      {"lora_all_targets", make_shape(64, 32, 2, 4, 4, 80, 12, 10000.0, 1e-5), 2,
       make_adamw(1e-2, 1e-8, 0.1, 1e3), false,
       LoraSpec{3, 5.0, {std::begin(kLoraTargetKinds), std::end(kLoraTargetKinds)}}},
  };
}

// Token ids for one micro-batch, with the TokenBatch view the engine takes.
struct SampledBatch {
  std::vector<int32_t> inputs, targets;
  int64_t batch = 0, seq_len = 0;
  TokenBatch view() const { return {inputs.data(), targets.data(), batch, seq_len}; }
  torch::Tensor input_tensor() const {
    return reference::token_tensor(inputs.data(), batch, seq_len);
  }
  torch::Tensor target_tensor() const {
    return reference::token_tensor(targets.data(), batch, seq_len);
  }
};

SampledBatch random_batch(std::mt19937_64& rng, int64_t batch, int64_t seq_len, int64_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  SampledBatch b;
  b.batch = batch;
  b.seq_len = seq_len;
  // A stream of seq_len + 1 tokens per row: each target is the next input.
  for (int64_t row = 0; row < batch; ++row) {
    std::vector<int32_t> stream(seq_len + 1);
    for (int32_t& t : stream) t = token(rng);
    b.inputs.insert(b.inputs.end(), stream.begin(), stream.end() - 1);
    b.targets.insert(b.targets.end(), stream.begin() + 1, stream.end());
  }
  return b;
}

SampledBatch concatenate(const SampledBatch& a, const SampledBatch& b) {
  SampledBatch both = a;
  both.batch += b.batch;
  both.inputs.insert(both.inputs.end(), b.inputs.begin(), b.inputs.end());
  both.targets.insert(both.targets.end(), b.targets.begin(), b.targets.end());
  return both;
}

std::vector<float> to_vector(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// One relative error per layout tensor, named, so a failure says which weight.
// `gradients` selects the trainable subset at grad_offset instead of offset.
void expect_every_tensor_close(const ParameterLayout& layout, const std::vector<float>& ours,
                               const std::vector<float>& torch_values, bool gradients,
                               const std::string& what) {
  ASSERT_EQ(ours.size(), torch_values.size()) << what;
  for (const ParamTensor& t : layout.tensors()) {
    if (gradients && !t.trainable) continue;
    const int64_t offset = gradients ? t.grad_offset : t.offset;
    const double error =
        relative_error(ours.data() + offset, torch_values.data() + offset, t.numel);
    EXPECT_LE(error, kTolerance) << what << " of " << t.name << ": relative error " << error;
  }
}

void expect_loss_close(float ours, double torch_loss, const std::string& what) {
  EXPECT_LE(std::abs(ours - torch_loss) / std::abs(torch_loss), kTolerance)
      << what << ": ours " << ours << ", torch " << torch_loss;
}

// Records every GradientsReadyFn call of one backward, with a copy of the
// suffix it declares final, to check against the gradients backward leaves.
class ReadinessRecorder {
 public:
  explicit ReadinessRecorder(const TrainingEngine& engine) : engine_(engine) {}

  GradientsReadyFn callback() {
    return [this](int64_t ready_from) {
      ready_from_.push_back(ready_from);
      std::vector<float> all(engine_.layout().trainable_params());
      engine_.get_gradients(all.data());
      if (ready_from >= 0 && ready_from <= static_cast<int64_t>(all.size()))
        suffixes_.emplace_back(all.begin() + ready_from, all.end());
    };
  }

  // The contract of GradientsReadyFn: suffixes that only grow, down to the
  // whole buffer, and never written again once reported.
  void expect_contract_held(const std::vector<float>& final_gradients) const {
    const int64_t trainable = static_cast<int64_t>(final_gradients.size());
    ASSERT_FALSE(ready_from_.empty()) << "backward never reported gradients ready";
    for (size_t i = 0; i < ready_from_.size(); ++i) {
      EXPECT_GE(ready_from_[i], 0) << "call " << i;
      EXPECT_LE(ready_from_[i], trainable) << "call " << i;
      if (i > 0) {
        EXPECT_LE(ready_from_[i], ready_from_[i - 1])
            << "ready_from grew back at call " << i << ": the ready suffix must only grow";
      }
    }
    EXPECT_EQ(ready_from_.back(), 0) << "the last call must declare the whole buffer ready";
    ASSERT_EQ(suffixes_.size(), ready_from_.size());
    for (size_t i = 0; i < ready_from_.size(); ++i)
      EXPECT_TRUE(std::equal(suffixes_[i].begin(), suffixes_[i].end(),
                             final_gradients.begin() + ready_from_[i]))
          << "gradients from " << ready_from_[i] << " were written after call " << i
          << " declared them final";
  }

 private:
  const TrainingEngine& engine_;
  std::vector<int64_t> ready_from_;
  std::vector<std::vector<float>> suffixes_;
};

class CpuEngineVsTorch : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    const ModelCase& c = GetParam();
    EngineOptions options;
    options.shape = c.shape;
    options.micro_batch = c.micro_batch;
    options.device = "cpu";
    options.lora = c.lora;
    engine_ = std::make_unique<cpu::CpuEngine>(options);

    engine_->init_parameters(kParameterSeed);
    std::vector<float> parameters(engine_->layout().total_params());
    engine_->get_parameters(parameters.data());
    // Every comparison below is only meaningful for a model with real weights.
    for (const ParamTensor& t : engine_->layout().tensors()) {
      if (!t.is_matrix()) continue;
      const bool all_zero = std::all_of(parameters.begin() + t.offset,
                                        parameters.begin() + t.offset + t.numel,
                                        [](float x) { return x == 0.0f; });
      // LoRA's B starts at zero (the adapted model starts as the base model).
      if (t.kind == ParamKind::kLoraB)
        ASSERT_TRUE(all_zero) << "init_parameters must leave " << t.name << " zero";
      else
        ASSERT_FALSE(all_zero) << "init_parameters left " << t.name << " all zero";
    }
    spread_parameters(parameters);
    engine_->set_parameters(parameters.data());

    std::vector<float> round_trip(parameters.size());
    engine_->get_parameters(round_trip.data());
    ASSERT_TRUE(round_trip == parameters) << "set_parameters / get_parameters must round-trip";

    model_ = std::make_unique<TorchLlama>(c.shape, engine_->layout(), parameters);
  }

  // The documented init (std 0.02, norm weights 1) leaves attention nearly
  // uniform and every norm weight at 1, which would hide a wrong score scale,
  // rotation or mask, or a norm weight applied nowhere. Widen the matrices and
  // give the norm weights a spread, deterministically.
  // LoRA's B, zero at init, gets values too: with B = 0 the gradient of A is
  // zero and the adapters' forward contributes nothing to check.
  void spread_parameters(std::vector<float>& parameters) const {
    std::mt19937_64 rng(kParameterSeed);
    std::normal_distribution<float> norm_weight(1.0f, 0.2f);
    std::normal_distribution<float> lora_b(0.0f, 0.1f);
    for (const ParamTensor& t : engine_->layout().tensors())
      for (int64_t i = t.offset; i < t.offset + t.numel; ++i)
        parameters[i] = t.kind == ParamKind::kLoraB ? lora_b(rng)
                        : t.is_matrix()             ? parameters[i] * 5.0f
                                                    : norm_weight(rng);
  }

  SampledBatch next_batch() {
    const ModelCase& c = GetParam();
    return random_batch(token_rng_, c.micro_batch, c.shape.seq_len, c.shape.vocab);
  }

  std::vector<float> engine_gradients() const {
    std::vector<float> grads(engine_->layout().trainable_params());
    engine_->get_gradients(grads.data());
    return grads;
  }
  std::vector<float> engine_parameters() const {
    std::vector<float> params(engine_->layout().total_params());
    engine_->get_parameters(params.data());
    return params;
  }

  std::unique_ptr<cpu::CpuEngine> engine_;
  std::unique_ptr<TorchLlama> model_;
  std::mt19937_64 token_rng_{42};
};

TEST_P(CpuEngineVsTorch, ForwardAndBackwardMatchTorch) {
  const ModelShape& shape = GetParam().shape;
  const SampledBatch batch = next_batch();

  engine_->zero_gradients();
  engine_->forward(batch.view());
  const float loss = engine_->last_loss();
  std::vector<float> logits(batch.batch * batch.seq_len * shape.vocab);
  engine_->get_logits(logits.data());
  ReadinessRecorder readiness(*engine_);
  engine_->backward(batch.view(), 1.0f, readiness.callback());
  const std::vector<float> gradients = engine_gradients();

  const TorchLlama::ForwardResult expected =
      model_->forward(batch.input_tensor(), batch.target_tensor());
  expected.loss.backward();

  const std::vector<float> expected_logits = to_vector(expected.logits);
  ASSERT_EQ(logits.size(), expected_logits.size());
  const double logits_error =
      relative_error(logits.data(), expected_logits.data(), static_cast<int64_t>(logits.size()));
  EXPECT_LE(logits_error, kTolerance) << "logits: relative error " << logits_error;
  expect_loss_close(loss, expected.loss.item<double>(), "loss");
  expect_every_tensor_close(engine_->layout(), gradients, model_->flat_gradients(),
                            /*gradients=*/true, "gradient");
  readiness.expect_contract_held(gradients);
}

TEST_P(CpuEngineVsTorch, ThreeAdamWStepsMatchTorchAdamW) {
  const AdamWSettings& settings = GetParam().adamw;
  const std::unique_ptr<torch::optim::AdamW> optimizer = model_->make_optimizer(settings);
  const std::vector<float> initial = engine_parameters();

  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const SampledBatch batch = next_batch();

    engine_->zero_gradients();
    engine_->forward(batch.view());
    const float loss = engine_->last_loss();
    engine_->backward(batch.view(), 1.0f, [](int64_t) {});
    const float norm = engine_->optimizer_step(settings, step);

    optimizer->zero_grad();
    const TorchLlama::ForwardResult expected =
        model_->forward(batch.input_tensor(), batch.target_tensor());
    expected.loss.backward();
    const double torch_norm = model_->clip_gradients(settings.grad_clip);
    optimizer->step();

    expect_loss_close(loss, expected.loss.item<double>(), "loss");
    EXPECT_LE(std::abs(norm - torch_norm) / torch_norm, kTolerance)
        << "gradient norm before clipping: ours " << norm << ", torch " << torch_norm;
    if (GetParam().clipping_expected) {
      ASSERT_GT(torch_norm, settings.grad_clip)
          << "this case must exercise clipping: lower its grad_clip";
    }
    expect_every_tensor_close(engine_->layout(), engine_parameters(), model_->flat_parameters(),
                              /*gradients=*/false, "parameter after AdamW");
  }
  // Frozen tensors (the whole base model under LoRA) are bit-identical after
  // training; every trainable one moved.
  const std::vector<float> trained = engine_parameters();
  for (const ParamTensor& t : engine_->layout().tensors()) {
    const bool same = std::equal(trained.begin() + t.offset, trained.begin() + t.offset + t.numel,
                                 initial.begin() + t.offset);
    if (t.trainable)
      EXPECT_FALSE(same) << t.name << " is trainable but did not change";
    else
      EXPECT_TRUE(same) << t.name << " is frozen but changed";
  }
}

TEST_P(CpuEngineVsTorch, TwoHalfScaledMicroBatchesEqualTheMeanOverBoth) {
  const SampledBatch first = next_batch();
  const SampledBatch second = next_batch();

  engine_->zero_gradients();
  float micro_batch_losses = 0.0f;
  for (const SampledBatch* micro : {&first, &second}) {
    engine_->forward(micro->view());
    micro_batch_losses += 0.5f * engine_->last_loss();
    ReadinessRecorder readiness(*engine_);
    engine_->backward(micro->view(), 0.5f, readiness.callback());
    readiness.expect_contract_held(engine_gradients());
  }
  const std::vector<float> accumulated = engine_gradients();

  // One batch holding both micro-batches: its mean loss is the mean over both.
  const SampledBatch both = concatenate(first, second);
  const TorchLlama::ForwardResult expected =
      model_->forward(both.input_tensor(), both.target_tensor());
  expected.loss.backward();

  expect_loss_close(micro_batch_losses, expected.loss.item<double>(), "mean loss over both");
  expect_every_tensor_close(engine_->layout(), accumulated, model_->flat_gradients(),
                            /*gradients=*/true, "accumulated gradient");
}

INSTANTIATE_TEST_SUITE_P(Models, CpuEngineVsTorch, ::testing::ValuesIn(model_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace trainbench
