#include "dataloader/batch_source.h"

#include <cstdlib>  // std::aligned_alloc, std::free

namespace trainbench {

HostAllocator plain_host_allocator() {
  // 64-byte alignment: whole cache lines, and what vectorised copies like.
  return HostAllocator{
      [](size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); },
      [](void* memory) { std::free(memory); }};
}

}  // namespace trainbench
