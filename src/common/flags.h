// The command line shared by the daemons (dgpu-scheduler, dgpu-agent, dgpu-sim):
//
//   PROGRAM [--config FILE] [--version] [--help] [extra flags]
//
// Long flags take two dashes and also one (`-config FILE`, the spelling of older docs); a value
// is given as the next argument or after '=' (`--config=FILE`, `-config=FILE`). `-h` is --help.
// Positional arguments, unknown flags, a missing value or a repeated flag are usage errors.
// Arguments after a lone "--" are not rewritten (and, being positional, are rejected).
//
// Thread-safety: the functions are reentrant; ParseDaemonFlagsOrExit writes to stdout/stderr
// and may end the process, so call it first thing in main().
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dgpu::common {

// A daemon-specific flag beside the common ones.
struct ExtraFlagSpec {
  std::string name;         // long name without dashes, e.g. "data-dir"
  std::string help;         // one line for --help
  bool takes_value = true;  // false: a switch, reported as "true" when present
};

struct DaemonFlagsSpec {
  std::string program;      // e.g. "dgpu-scheduler"; used in --help, --version and errors
  std::string description;  // one line for --help
  std::vector<ExtraFlagSpec> extra_flags;
};

struct DaemonFlags {
  std::string config_path;  // --config; empty when not given (the daemon uses defaults)
  bool version_requested = false;
  bool help_requested = false;
  // Extra flags that were given: name -> value ("true" for a switch). Absent when not given.
  std::map<std::string, std::string> extra;
};

// Parses argv (argv[0] is the program path). Errors: kInvalidArgument with a one-line reason
// naming the first offending argument: `unknown flag "--bogus"`, `unexpected argument "foo"`,
// `--config: given more than once`, `--config: 1 required TEXT missing`.
StatusOr<DaemonFlags> ParseDaemonFlags(int argc, const char* const* argv,
                                       const DaemonFlagsSpec& spec);

// The --help text: usage line, description and one line per flag.
std::string DaemonUsage(const DaemonFlagsSpec& spec);

// "<program> <version>", e.g. "dgpu-scheduler 0.1.0".
std::string VersionLine(const DaemonFlagsSpec& spec);

// The project version this library was built with, e.g. "0.1.0".
std::string_view BuildVersion();

// For main(): returns the parsed flags when the daemon should run. On --help prints DaemonUsage
// to stdout and exits 0; on --version prints VersionLine to stdout and exits 0; on a usage error
// prints "<program>: <reason> (see --help)" to stderr and exits 2.
DaemonFlags ParseDaemonFlagsOrExit(int argc, const char* const* argv, const DaemonFlagsSpec& spec);

}  // namespace dgpu::common
