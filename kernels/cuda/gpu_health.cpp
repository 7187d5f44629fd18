// open_gpu_health through NVML, loaded with dlopen at run time: the toolkit
// ships no libnvidia-ml on every machine that builds (this CI has neither
// nvml.h nor the stub library), and a binary linked against it would not
// start where the driver is missing. The handful of NVML calls used are
// declared here with their C ABI (nvml.h, stable since NVML 5); with nvml.h
// present its handle type is used and the enum values are checked against it.
#include <cuda_runtime.h>  // cudaDeviceGetPCIBusId
#include <dlfcn.h>         // dlopen, dlsym

#include <mutex>  // NVML initialised once per process

#include "kernels/gpu_health.h"

#if __has_include(<nvml.h>)
#include <nvml.h>
#define TRAINBENCH_HAVE_NVML_H 1
#endif

namespace trainbench {
namespace {

#ifdef TRAINBENCH_HAVE_NVML_H
using NvmlReturn = nvmlReturn_t;
using NvmlDevice = nvmlDevice_t;
static_assert(NVML_TEMPERATURE_GPU == 0 && NVML_CLOCK_SM == 1 && NVML_MEMORY_ERROR_TYPE_CORRECTED == 0 &&
              NVML_MEMORY_ERROR_TYPE_UNCORRECTED == 1 && NVML_VOLATILE_ECC == 0);
#else
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
#endif
constexpr int kNvmlSuccess = 0;
constexpr int kTemperatureGpu = 0;       // NVML_TEMPERATURE_GPU
constexpr int kClockSm = 1;              // NVML_CLOCK_SM
constexpr int kEccCorrected = 0;         // NVML_MEMORY_ERROR_TYPE_CORRECTED
constexpr int kEccUncorrected = 1;       // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0;          // NVML_VOLATILE_ECC: since the driver loaded

// The NVML entry points used, resolved once.
struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*power_usage)(NvmlDevice, unsigned*) = nullptr;  // milliwatts
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;  // MHz
  NvmlReturn (*clock_event_reasons)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*total_ecc_errors)(NvmlDevice, int, int, unsigned long long*) = nullptr;
  NvmlReturn (*pcie_replay_counter)(NvmlDevice, unsigned*) = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  std::string why_not;  // empty once loaded and initialised
};

template <typename Fn>
void resolve(void* library, const char* symbol, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, symbol));
}

const Nvml& nvml() {
  static Nvml loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      loaded.why_not = std::string("NVML not found (libnvidia-ml.so.1, part of the NVIDIA driver): ") + dlerror();
      return;
    }
    resolve(library, "nvmlInit_v2", &loaded.init);
    resolve(library, "nvmlDeviceGetHandleByPciBusId_v2", &loaded.handle_by_pci_bus_id);
    resolve(library, "nvmlDeviceGetName", &loaded.name);
    resolve(library, "nvmlDeviceGetTemperature", &loaded.temperature);
    resolve(library, "nvmlDeviceGetPowerUsage", &loaded.power_usage);
    resolve(library, "nvmlDeviceGetClockInfo", &loaded.clock_info);
    // Renamed in CUDA 12.2's NVML; older drivers have only the old name.
    resolve(library, "nvmlDeviceGetCurrentClocksEventReasons", &loaded.clock_event_reasons);
    if (loaded.clock_event_reasons == nullptr)
      resolve(library, "nvmlDeviceGetCurrentClocksThrottleReasons", &loaded.clock_event_reasons);
    resolve(library, "nvmlDeviceGetTotalEccErrors", &loaded.total_ecc_errors);
    resolve(library, "nvmlDeviceGetPcieReplayCounter", &loaded.pcie_replay_counter);
    resolve(library, "nvmlErrorString", &loaded.error_string);
    if (loaded.init == nullptr || loaded.handle_by_pci_bus_id == nullptr) {
      loaded.why_not = "NVML library lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2 (driver too old)";
      return;
    }
    const NvmlReturn status = loaded.init();
    if (status != kNvmlSuccess)
      loaded.why_not = std::string("nvmlInit failed: ") +
                       (loaded.error_string ? loaded.error_string(status) : std::to_string(static_cast<int>(status)));
    // Never shut down: samplers may run until the process exits.
  });
  return loaded;
}

class NvmlProbe final : public GpuHealthProbe {
 public:
  NvmlProbe(const Nvml& api, NvmlDevice device, std::string name) : api_(api), device_(device), name_(std::move(name)) {}

  GpuHealthSample sample() override {
    GpuHealthSample s;
    unsigned value = 0;
    unsigned long long counter = 0;
    if (api_.temperature && api_.temperature(device_, kTemperatureGpu, &value) == kNvmlSuccess) s.temperature_c = value;
    if (api_.power_usage && api_.power_usage(device_, &value) == kNvmlSuccess) s.power_w = value * 1e-3;
    if (api_.clock_info && api_.clock_info(device_, kClockSm, &value) == kNvmlSuccess) s.sm_clock_mhz = value;
    if (api_.clock_event_reasons && api_.clock_event_reasons(device_, &counter) == kNvmlSuccess)
      s.clock_event_reasons = static_cast<int64_t>(counter);
    // ECC counters fail with NOT_SUPPORTED where ECC is off or absent: left -1.
    if (api_.total_ecc_errors && api_.total_ecc_errors(device_, kEccCorrected, kVolatileEcc, &counter) == kNvmlSuccess)
      s.ecc_corrected = static_cast<int64_t>(counter);
    if (api_.total_ecc_errors && api_.total_ecc_errors(device_, kEccUncorrected, kVolatileEcc, &counter) == kNvmlSuccess)
      s.ecc_uncorrected = static_cast<int64_t>(counter);
    if (api_.pcie_replay_counter && api_.pcie_replay_counter(device_, &value) == kNvmlSuccess) s.pcie_replays = value;
    return s;
  }
  std::string gpu_name() const override { return name_; }

 private:
  const Nvml& api_;
  NvmlDevice device_;
  std::string name_;
};

}  // namespace

std::unique_ptr<GpuHealthProbe> open_gpu_health(int cuda_device, std::string* why_not) {
  std::string ignored;
  std::string& why = why_not ? *why_not : ignored;
  char bus_id[64] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for the engine
    why = "no CUDA device " + std::to_string(cuda_device) + " to sample";
    return nullptr;
  }
  const Nvml& api = nvml();
  if (!api.why_not.empty()) {
    why = api.why_not;
    return nullptr;
  }
  NvmlDevice device{};
  const NvmlReturn status = api.handle_by_pci_bus_id(bus_id, &device);
  if (status != kNvmlSuccess) {
    why = std::string("NVML has no GPU at PCI ") + bus_id + ": " +
          (api.error_string ? api.error_string(status) : std::to_string(static_cast<int>(status)));
    return nullptr;
  }
  char name[96] = {};
  if (api.name == nullptr || api.name(device, name, sizeof(name)) != kNvmlSuccess) name[0] = '\0';
  return std::make_unique<NvmlProbe>(api, device, name);
}

}  // namespace trainbench
