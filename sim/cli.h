// The dgpu-sim command line: parses options, loads the trace and cluster, runs the replay and
// prints the report. Kept in the library so that tests drive exactly what the binary runs.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace dgpu::sim {

// `args` excludes the program name. Writes the report to `out` and errors (one line each) to
// `err`. Returns the exit status: 0 on success, 1 when the input is bad (trace, cluster file,
// option values), 2 on a command-line usage error.
int RunSimCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace dgpu::sim
