#include "dataloader/batch_source.h"

#include <cstdlib>  // std::aligned_alloc, std::free

namespace trainbench {

HostAllocator plain_host_allocator() {
  // 64-byte alignment: whole cache lines, and what vectorised copies like.
  return HostAllocator{
      [](size_t bytes) { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); },
      [](void* memory) { std::free(memory); }};
}

std::string odd_shards_text(int64_t cut_short, int64_t without_samples) {
  std::string text;
  if (cut_short > 0)
    text = std::to_string(cut_short) +
           " shard(s) end without the tar end-of-archive marker (cut short at a member boundary, as by an "
           "interrupted copy) or hold data after it (a zeroed block, archives joined: read up to the marker)";
  if (without_samples > 0)
    text += (text.empty() ? "" : " and ") + std::to_string(without_samples) + " shard(s) hold no sample with tokens";
  return text;
}

}  // namespace trainbench
