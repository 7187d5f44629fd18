// tests/support/relative_error.h's measure, plus an overload for torch tensors.
#pragma once

#include <torch/torch.h>  // the tensor overload

#include "tests/support/relative_error.h"  // the float-buffer measure

namespace trainbench::reference {

using testing::relative_error;

inline double relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  const torch::Tensor a = actual.detach().to(torch::kFloat32).contiguous();
  const torch::Tensor e = expected.detach().to(torch::kFloat32).contiguous();
  TORCH_CHECK(a.numel() == e.numel(), "relative_error: ", a.numel(), " vs ", e.numel(),
              " elements");
  return relative_error(a.data_ptr<float>(), e.data_ptr<float>(), a.numel());
}

}  // namespace trainbench::reference
