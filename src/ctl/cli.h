// dgpuctl command line: parses arguments with CLI11 and dispatches to the commands.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "ctl/http_client.h"

namespace dgpu::ctl {

struct CliDeps {
  // Creates the HTTP transport once the request timeout is known.
  std::function<std::unique_ptr<HttpClient>(std::chrono::milliseconds timeout)> make_http;
  // Environment lookup (DGPU_SERVER, DGPUCTL_NOW); returns nullptr when unset.
  std::function<const char*(const char*)> getenv;
  std::function<std::chrono::system_clock::time_point()> now;
  std::function<std::chrono::steady_clock::time_point()> monotonic_now;
  std::function<void(std::chrono::milliseconds)> sleep;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
};

// Runs dgpuctl with the given arguments (argv[0] is the program name) and returns the exit code.
int RunCtl(int argc, const char* const* argv, const CliDeps& deps);

// The bash completion script printed by `dgpuctl completion bash`.
std::string BashCompletionScript();

}  // namespace dgpu::ctl
