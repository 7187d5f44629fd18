// trainbench: end-to-end training throughput benchmark. All logic is in trainer/cli.cpp.
#include "trainer/cli.h"

int main(int argc, char** argv) { return trainbench::run_cli(argc, argv); }
