// Deterministic parameter initialisation shared by every backend, so that the
// same seed gives bit-identical starting weights on CPU and GPU and on any
// number of threads.
#pragma once

#include <cstdint>  // uint64_t

#include "kernels/model_shape.h"  // ParameterLayout

namespace trainbench {

// Fills `params` (layout.total_params() floats): matrices ~ normal(0, 0.02),
// with the residual output projections (wo, w_down) scaled by 1/sqrt(2·n_layers)
// as GPT-2 does; norm weights = 1; LoRA A ~ U(−1/√in, 1/√in), LoRA B = 0.
// Element i's value depends only on (seed, i), so a LoRA layout's base
// tensors get exactly the weights the full model gets from the same seed.
void init_parameters_host(const ParameterLayout& layout, int64_t n_layers, uint64_t seed,
                          float* params);

// A standard normal deviate that depends only on (seed, index): counter-based,
// so the fill can be split across threads without changing the result.
float counter_normal(uint64_t seed, uint64_t index);
// A uniform deviate in [0, 1) that depends only on (seed, index).
double counter_uniform(uint64_t seed, uint64_t index);

}  // namespace trainbench
