// cuDNN's SDPA graphs as kernels/cuda/cudnn_attention.cpp builds them, checked
// by the cuDNN frontend's own rules for Hopper (sm 90) and Ampere (sm 80)
// without a GPU: so CI catches a wrong dimension, stride, data type or
// attribute before a GPU session does. Whether cuDNN's engines run them is
// tested on the GPU (test_cuda_ops, test_cuda_engine).
#include <gtest/gtest.h>

#include <cmath>  // std::sqrt
#include <string>

#include "kernels/cuda/cudnn_attention.h"
#include "kernels/device_info.h"  // cudnn_attention_build_info

namespace trainbench::cuda {
namespace {

float scale_of(int64_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

class CudnnAttentionGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cudnn_attention_build_info().empty())
      GTEST_SKIP() << "this build has no cuDNN attention (cuDNN or the frontend headers were not found)";
  }
};

TEST_F(CudnnAttentionGraphs, ThePresetsAndTheTestShapesPassTheFrontendsChecks) {
  struct Case {
    const char* name;
    AttentionShape shape;
  };
  const Case cases[] = {
      {"h200-llama8b-4l", {4, 32, 8, 4096, 128}},    // GQA 4:1, head_dim 128
      {"h200-gpt2-124m", {32, 12, 12, 1024, 64}},    // multi-head
      {"tests' Llama-like", {2, 4, 2, 96, 64}},      // a length that is not a multiple of 64
      {"tests' op shape", {1, 2, 2, 300, 128}},
      {"tests' multi-head", {3, 4, 4, 37, 16}},      // test_cuda_engine's shapes: head_dim 16, T 37
      {"tests' grouped-query", {2, 6, 2, 37, 16}},
  };
  for (const Case& c : cases) {
    for (const int sm : {90, 80}) {
      for (const bool deterministic : {true, false}) {
        EXPECT_EQ(validate_cudnn_attention(c.shape, scale_of(c.shape.head_dim), deterministic, sm), "")
            << c.name << " on sm " << sm << (deterministic ? ", deterministic" : ", fastest") << " backward";
      }
    }
  }
}

// The checks have teeth: head dims cuDNN's SDPA does not take (not a
// multiple of 8; above 256) are refused with the frontend's message, which
// is what train.attention auto reports when it falls back to GEMMs.
TEST_F(CudnnAttentionGraphs, AnUnsupportedHeadDimIsRefusedWithAMessage) {
  const std::string odd = validate_cudnn_attention(AttentionShape{1, 2, 2, 64, 12}, scale_of(12), true, 90);
  EXPECT_NE(odd.find("multiple of 8"), std::string::npos) << odd;
  const std::string wide = validate_cudnn_attention(AttentionShape{1, 2, 2, 64, 264}, scale_of(264), true, 90);
  EXPECT_NE(wide.find("256"), std::string::npos) << wide;
}

}  // namespace
}  // namespace trainbench::cuda
