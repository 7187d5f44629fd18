// trainbench: end-to-end training throughput benchmark. All logic is in trainer/cli.cpp.
#include "dataloader/shard_writer.h"     // remove_partial_shards
#include "trainer/cli.h"
#include "trainer/interrupt_cleanup.h"  // temporary folders removed on SIGINT/SIGTERM

int main(int argc, char** argv) {
  trainbench::install_interrupt_cleanup();
  // A shard being written (shards synth|pack into a folder of the user's)
  // leaves no NAME.partial behind when interrupted.
  trainbench::run_on_interrupt(trainbench::remove_partial_shards);
  const int code = trainbench::run_cli(argc, argv);
  trainbench::wait_if_interrupted();
  return code;
}
