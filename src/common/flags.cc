#include "common/flags.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>

#ifndef DGPU_VERSION
#error "DGPU_VERSION must be defined by the build (target dgpu_options)"
#endif

namespace dgpu::common {
namespace {

struct KnownFlag {
  std::string name;
  bool takes_value;
};

std::vector<KnownFlag> KnownFlags(const DaemonFlagsSpec& spec) {
  std::vector<KnownFlag> flags = {{"config", true}, {"version", false}, {"help", false}};
  for (const ExtraFlagSpec& extra : spec.extra_flags) {
    flags.push_back({extra.name, extra.takes_value});
  }
  return flags;
}

const KnownFlag* FindFlag(const std::vector<KnownFlag>& flags, std::string_view name) {
  for (const KnownFlag& flag : flags) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

// Rewrites `-name` and `-name=value` into `--name...` for every known long flag, leaving values
// of value-taking flags and everything after "--" untouched. argv[0] is kept as is.
std::vector<std::string> NormalizeArgs(int argc, const char* const* argv,
                                       const std::vector<KnownFlag>& flags) {
  std::vector<std::string> out;
  out.reserve(argc);
  out.emplace_back(argc > 0 && argv[0] != nullptr ? argv[0] : "");
  bool literal = false;
  bool next_is_value = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i] != nullptr ? argv[i] : "";
    if (literal || next_is_value) {
      next_is_value = false;
      out.push_back(std::move(arg));
      continue;
    }
    if (arg == "--") {
      literal = true;
      out.push_back(std::move(arg));
      continue;
    }
    std::string_view body;
    bool single_dash = false;
    if (arg.starts_with("--")) {
      body = std::string_view(arg).substr(2);
    } else if (arg.size() > 2 && arg[0] == '-' && arg[1] != '-') {
      body = std::string_view(arg).substr(1);
      single_dash = true;
    } else {
      out.push_back(std::move(arg));
      continue;
    }
    const size_t equals = body.find('=');
    const KnownFlag* flag = FindFlag(flags, body.substr(0, equals));
    if (flag != nullptr) {
      if (flag->takes_value && equals == std::string_view::npos) next_is_value = true;
      if (single_dash) arg.insert(0, 1, '-');
    }
    out.push_back(std::move(arg));
  }
  return out;
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// The CLI11 application for `spec`, bound to the storage in `values`.
struct CommandLine {
  CLI::App app;
  bool help = false;
  bool version = false;
  std::string config;
  std::deque<std::string> extra_values;  // stable addresses for CLI11 bindings
  std::deque<bool> extra_switches;
  std::vector<CLI::Option*> extra_options;  // in the order of spec.extra_flags
  std::vector<CLI::Option*> all_options;

  explicit CommandLine(const DaemonFlagsSpec& spec) : app(spec.description, spec.program) {
    app.set_help_flag();
    app.allow_extras();  // leftovers are reported by ParseDaemonFlags, in command-line order
    // Repeats are accepted by CLI11 and reported by RepeatedFlag(), with a clearer message.
    all_options.push_back(app.add_flag("-h,--help", help, "Print this help and exit"));
    all_options.push_back(app.add_flag("--version", version, "Print the version and exit"));
    all_options.push_back(
        app.add_option("--config", config, "YAML configuration file (default: built-in defaults)")
            ->option_text("FILE"));
    for (const ExtraFlagSpec& extra : spec.extra_flags) {
      if (extra.takes_value) {
        extra_values.emplace_back();
        extra_options.push_back(app.add_option("--" + extra.name, extra_values.back(), extra.help)
                                    ->option_text("VALUE"));
      } else {
        extra_switches.push_back(false);
        extra_options.push_back(app.add_flag("--" + extra.name, extra_switches.back(), extra.help));
      }
      all_options.push_back(extra_options.back());
    }
    for (CLI::Option* option : all_options) {
      option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }

  // The long name of the first flag given more than once, or "".
  std::string RepeatedFlag() const {
    for (const CLI::Option* option : all_options) {
      if (option->count() > 1) return "--" + option->get_lnames().front();
    }
    return "";
  }
};

}  // namespace

StatusOr<DaemonFlags> ParseDaemonFlags(int argc, const char* const* argv,
                                       const DaemonFlagsSpec& spec) {
  try {
    const std::vector<std::string> args = NormalizeArgs(argc, argv, KnownFlags(spec));
    std::vector<const char*> pointers;
    pointers.reserve(args.size());
    for (const std::string& arg : args) pointers.push_back(arg.c_str());

    CommandLine command_line(spec);
    command_line.app.parse(static_cast<int>(pointers.size()), pointers.data());
    bool after_separator = false;  // after "--" everything is a positional argument
    for (const std::string& leftover : command_line.app.remaining()) {
      if (leftover == "--" && !after_separator) {
        after_separator = true;
        continue;
      }
      const bool is_flag = !after_separator && leftover.starts_with('-');
      return InvalidArgument((is_flag ? "unknown flag \"" : "unexpected argument \"") + leftover +
                             "\"");
    }
    const std::string repeated = command_line.RepeatedFlag();
    if (!repeated.empty()) return InvalidArgument(repeated + ": given more than once");

    DaemonFlags flags;
    flags.config_path = command_line.config;
    flags.help_requested = command_line.help;
    flags.version_requested = command_line.version;
    size_t value_index = 0;
    for (size_t i = 0; i < spec.extra_flags.size(); ++i) {
      const ExtraFlagSpec& extra = spec.extra_flags[i];
      const bool given = command_line.extra_options[i]->count() > 0;
      if (extra.takes_value) {
        if (given) flags.extra[extra.name] = command_line.extra_values[value_index];
        ++value_index;
      } else if (given) {
        flags.extra[extra.name] = "true";
      }
    }
    if (command_line.app.count("--config") > 0 && flags.config_path.empty()) {
      return InvalidArgument("--config: the file name must not be empty");
    }
    return flags;
  } catch (const CLI::Error& e) {
    return InvalidArgument(OneLine(e.what()));
  } catch (const std::exception& e) {
    return InvalidArgument(OneLine(e.what()));
  }
}

std::string DaemonUsage(const DaemonFlagsSpec& spec) {
  try {
    CommandLine command_line(spec);
    return command_line.app.help();
  } catch (const std::exception& e) {
    return spec.program + ": " + OneLine(e.what()) + "\n";
  }
}

std::string_view BuildVersion() { return DGPU_VERSION; }

std::string VersionLine(const DaemonFlagsSpec& spec) {
  return spec.program + " " + std::string(BuildVersion());
}

DaemonFlags ParseDaemonFlagsOrExit(int argc, const char* const* argv, const DaemonFlagsSpec& spec) {
  StatusOr<DaemonFlags> flags = ParseDaemonFlags(argc, argv, spec);
  if (!flags.ok()) {
    std::fprintf(stderr, "%s: %s (see --help)\n", spec.program.c_str(),
                 flags.status().message().c_str());
    std::exit(2);
  }
  if (flags->help_requested) {
    std::fputs(DaemonUsage(spec).c_str(), stdout);
    std::exit(0);
  }
  if (flags->version_requested) {
    std::printf("%s\n", VersionLine(spec).c_str());
    std::exit(0);
  }
  return std::move(flags).value();
}

}  // namespace dgpu::common
