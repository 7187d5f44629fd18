// MemAvailable from /proc/meminfo, in KiB (0 when absent): tests that size
// a request against the machine's free memory, so that it fits one rank and
// not two, or no rank at all.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace trainbench::testing {

inline int64_t mem_available_kib() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    if (key == "MemAvailable:") {
      int64_t kib = 0;
      meminfo >> kib;
      return kib;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  return 0;
}

}  // namespace trainbench::testing
