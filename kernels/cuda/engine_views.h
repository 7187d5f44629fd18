// The CUDA engine's views (engine_view_carving.h) on bf16.
#pragma once

#include "kernels/cuda/cuda_ops.h"             // bf16
#include "kernels/cuda/engine_view_carving.h"  // the carving, generic in the element type

namespace trainbench::cuda {

static_assert(sizeof(bf16) == 2, "the memory plan carves with a 2-byte stand-in for bf16");

using LayerActivations = LayerActivationsOf<bf16>;
using FinalActivations = FinalActivationsOf<bf16>;
using Scratch = ScratchOf<bf16>;
using EngineViewBases = EngineViewBasesOf<bf16>;
using EngineViews = EngineViewsOf<bf16>;

inline EngineViews carve_engine_views(const ModelShape& shape, const ParameterLayout& layout, int64_t batch,
                                      bool fused_attention, const EngineViewBases& bases) {
  return carve_engine_views_of<bf16>(shape, layout, batch, fused_attention, bases);
}

}  // namespace trainbench::cuda
