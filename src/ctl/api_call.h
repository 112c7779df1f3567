// How dgpuctl's commands call the API and report what went wrong (DescribeFailure and CallApi
// are declared in commands.h). Private to dgpuctl.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ctl/commands.h"
#include "ctl/http_client.h"

namespace dgpu::ctl {

inline constexpr char kApiPrefix[] = "/api/v1";

std::string TaskPath(const std::string& id);

std::string TeamPath(const std::string& name);

int Fail(const CtlContext& ctx, const ApiFailure& failure);

int BadResponse(const CtlContext& ctx, const std::string& what);

HttpResult SendRaw(const CtlContext& ctx, HttpMethod method, const std::string& path,
                   const std::string& body);

// Fills `failure` from a non-2xx response.
void FailureFromResponse(const HttpResponse& response, ApiFailure* failure);

}  // namespace dgpu::ctl
