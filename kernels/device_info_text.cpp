// The names a GPU is found by in a rack: host code, in every build
// (trainbench_kernels_host), the CUDA runtime fills the bytes.
#include <cstdio>  // std::snprintf

#include "kernels/device_info.h"

namespace trainbench {

std::string gpu_uuid_text(const unsigned char (&bytes)[16]) {
  // All zeros is no UUID (a driver or virtual GPU that reports none): ""
  // as unknown, or every such GPU would read as one (the ranks' GPU-sharing
  // check would refuse a job of one GPU per rank).
  bool any = false;
  for (const unsigned char b : bytes) any = any || b != 0;
  if (!any) return "";
  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, the bytes in order.
  std::string text = "GPU-";
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += kHex[bytes[i] >> 4];
    text += kHex[bytes[i] & 0xf];
  }
  return text;
}

std::string pci_bus_id_text(int domain, int bus, int device) {
  char text[32];
  std::snprintf(text, sizeof(text), "%08X:%02X:%02X.0", static_cast<unsigned>(domain), static_cast<unsigned>(bus),
                static_cast<unsigned>(device));
  return text;
}

}  // namespace trainbench
