// `checkpoint_crash_child DIR STEP`: writes and commits rank 0 of a
// one-rank checkpoint of STEP in DIR (keep 2), passing every crash point a
// run passes (copy, write, before_rename, after_rename). Run with
// TRAINBENCH_TEST_CRASH_AT set, it dies by SIGKILL where asked, in its own
// fresh process, as a node failure would stop a run. Exit 0 when it got
// through, 1 with one line on an error.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "checkpoint/checkpoint_files.h"
#include "tests/checkpoint/checkpoint_test_state.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: checkpoint_crash_child DIR STEP\n");
    return 2;
  }
  try {
    const int64_t step = std::atoll(argv[2]);
    trainbench::crash_point("copy", step);  // where the trainer copies state into the images
    trainbench::WriteOptions options;
    options.block_bytes = 4096;  // many writes, so `write` fires with the file part-written
    trainbench::testing::write_and_commit(argv[1], step, 2, 2, 64, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_crash_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
