// Chooses the backend named by EngineOptions::device.
#include <stdexcept>  // std::runtime_error when a backend is absent

#include "kernels/cpu/cpu_engine.h"  // CpuEngine, plan_cpu_memory
#include "kernels/engine.h"

namespace trainbench {

std::string built_backends() { return "cpu"; }

ParameterLayout make_layout(const EngineOptions& options) {
  ParameterLayout layout(options.shape);
  for (ParamKind kind : options.frozen) layout.set_trainable(kind, false);
  return layout;
}

MemoryPlan plan_engine_memory(const EngineOptions& options) {
  if (options.device == "cpu") return cpu::plan_cpu_memory(options);
  throw std::runtime_error("no '" + options.device + "' engine in this build (backends: " +
                           built_backends() + ")");
}

std::unique_ptr<TrainingEngine> make_engine(const EngineOptions& options) {
  if (options.device == "cpu") return std::make_unique<cpu::CpuEngine>(options);
  throw std::runtime_error("no '" + options.device + "' engine in this build (backends: " +
                           built_backends() + ")");
}

}  // namespace trainbench
