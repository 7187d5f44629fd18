// GPU health for burn-in (trainbench burnin): one GPU's temperature, power,
// SM clock, clock-event (throttle) reasons, ECC error counters and PCIe
// replay counter, read through NVML. NVML comes with the driver, not the
// toolkit: it is loaded at run time (dlopen of libnvidia-ml.so.1), so a
// binary built with CUDA still starts, and says why there are no samples,
// on a machine without a driver. Builds without CUDA get a stub
// (gpu_health_none.cpp) that always says so.
#pragma once

#include <cstdint>  // uint64_t
#include <memory>   // std::unique_ptr
#include <string>

namespace trainbench {

// Clock-event reasons (NVML's nvmlClocksEventReason* bits) that mean the
// hardware itself slowed the GPU down: a burn-in fails the GPU for them.
inline constexpr uint64_t kClockEventHwSlowdown = 0x8;
inline constexpr uint64_t kClockEventHwThermalSlowdown = 0x40;
inline constexpr uint64_t kClockEventHwPowerBrake = 0x80;
inline constexpr uint64_t kClockEventsHardware =
    kClockEventHwSlowdown | kClockEventHwThermalSlowdown | kClockEventHwPowerBrake;
// Reported, not failed: the driver holding clocks under a power or thermal cap.
inline constexpr uint64_t kClockEventSwPowerCap = 0x4;
inline constexpr uint64_t kClockEventSwThermalSlowdown = 0x20;

// One reading. A value the GPU does not report stays negative (-1); the
// counters are cumulative since the driver loaded (ECC: volatile counters).
struct GpuHealthSample {
  double temperature_c = -1;
  double power_w = -1;
  double sm_clock_mhz = -1;
  int64_t clock_event_reasons = -1;  // bit mask of the constants above
  int64_t ecc_corrected = -1, ecc_uncorrected = -1;
  int64_t pcie_replays = -1;
};

class GpuHealthProbe {
 public:
  virtual ~GpuHealthProbe() = default;
  // One reading now; thread-safe against nothing else (one sampler thread).
  virtual GpuHealthSample sample() = 0;
  virtual std::string gpu_name() const = 0;
};

// The probe for CUDA device `cuda_device` (matched to NVML by PCI bus id, so
// CUDA_VISIBLE_DEVICES and NVML's own order cannot mismatch them), or
// nullptr with the reason in *why_not (no CUDA build, no driver/NVML, no
// such GPU). Never throws.
std::unique_ptr<GpuHealthProbe> open_gpu_health(int cuda_device, std::string* why_not);

}  // namespace trainbench
