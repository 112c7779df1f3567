// dgpuctl: command-line client of the dgpu scheduler's REST API.
#include <curl/curl.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <thread>

#include "ctl/cli.h"
#include "ctl/commands.h"
#include "ctl/http_client.h"

int main(int argc, char** argv) {
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    std::cerr << "error: cannot initialize libcurl\n";
    return dgpu::ctl::kExitApiError;
  }
  int exit_code = dgpu::ctl::kExitApiError;
  try {
    dgpu::ctl::CliDeps deps;
    deps.make_http = [](std::chrono::milliseconds timeout) {
      return std::make_unique<dgpu::ctl::CurlHttpClient>(timeout);
    };
    deps.getenv = [](const char* name) -> const char* { return std::getenv(name); };
    deps.now = [] { return std::chrono::system_clock::now(); };
    deps.monotonic_now = [] { return std::chrono::steady_clock::now(); };
    deps.sleep = [](std::chrono::milliseconds duration) { std::this_thread::sleep_for(duration); };
    deps.out = &std::cout;
    deps.err = &std::cerr;
    exit_code = dgpu::ctl::RunCtl(argc, argv, deps);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "error: unexpected failure\n";
  }
  std::cout.flush();
  curl_global_cleanup();
  return exit_code;
}
