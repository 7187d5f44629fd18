// trainbench: end-to-end training throughput benchmark. All logic is in trainer/cli.cpp.
#include "trainer/cli.h"
#include "trainer/interrupt_cleanup.h"  // temporary folders removed on SIGINT/SIGTERM

int main(int argc, char** argv) {
  trainbench::install_interrupt_cleanup();
  const int code = trainbench::run_cli(argc, argv);
  trainbench::wait_if_interrupted();
  return code;
}
