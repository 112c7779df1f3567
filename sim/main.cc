// dgpu-sim: replays a GPU-cluster trace through the real scheduling core in virtual time.
// See docs/sim.md.
#include <iostream>
#include <string>
#include <vector>

#include "sim/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return dgpu::sim::RunSimCommand(args, std::cout, std::cerr);
}
