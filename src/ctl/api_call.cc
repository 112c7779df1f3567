#include "ctl/api_call.h"

#include "ctl/format.h"
#include "ctl/render.h"

namespace dgpu::ctl {

using nlohmann::json;

std::string TaskPath(const std::string& id) { return "/tasks/" + UrlEncode(id); }

std::string TeamPath(const std::string& name) { return "/teams/" + UrlEncode(name); }

int Fail(const CtlContext& ctx, const ApiFailure& failure) {
  *ctx.err << "error: " << DescribeFailure(failure, ctx.server) << "\n";
  return kExitApiError;
}

int BadResponse(const CtlContext& ctx, const std::string& what) {
  ApiFailure failure;
  failure.status = 200;
  failure.detail = what;
  return Fail(ctx, failure);
}

HttpResult SendRaw(const CtlContext& ctx, HttpMethod method, const std::string& path,
                   const std::string& body) {
  return ctx.http->Send(method, ctx.server + kApiPrefix + path, body);
}

// Fills `failure` from a non-2xx response.
void FailureFromResponse(const HttpResponse& response, ApiFailure* failure) {
  failure->status = response.status;
  failure->leader = response.Header("X-Leader");
  json body = json::parse(response.body, nullptr, false);
  if (!body.is_discarded() && body.is_object() && body.contains("error") &&
      body["error"].is_object()) {
    failure->code = Field(body["error"], "code");
    failure->message = Field(body["error"], "message");
  }
  if (failure->code.empty() && failure->message.empty()) {
    failure->detail = FirstLine(response.body);
  }
}

std::string DescribeFailure(const ApiFailure& failure, const std::string& server) {
  if (failure.transport) {
    return "cannot reach the scheduler at " + server + ": " + failure.detail;
  }
  if (failure.status == 503 && !failure.leader.empty()) {
    return "this scheduler is a standby; the leader is at " + failure.leader;
  }
  if (!failure.code.empty() || !failure.message.empty()) {
    std::string text = OrDash(failure.message) + " (" + OrDash(failure.code) + ", HTTP " +
                       std::to_string(failure.status) + ")";
    if (failure.status == 401) {
      text += "; give a token with --token, $DGPU_TOKEN or the config file's token";
    }
    return text;
  }
  if (failure.status >= 200 && failure.status < 300) {
    return "invalid response from the scheduler: " + failure.detail;
  }
  std::string text = "unexpected HTTP " + std::to_string(failure.status) + " from the scheduler";
  if (!failure.detail.empty()) text += ": " + failure.detail;
  return text;
}

std::optional<json> CallApi(const CtlContext& ctx, HttpMethod method, const std::string& path,
                            const json* body, ApiFailure* failure) {
  HttpResult result = SendRaw(ctx, method, path, body ? body->dump() : std::string());
  if (!result.has_response()) {
    failure->transport = true;
    failure->detail = result.transport_error;
    return std::nullopt;
  }
  const HttpResponse& response = *result.response;
  if (response.status < 200 || response.status >= 300) {
    FailureFromResponse(response, failure);
    return std::nullopt;
  }
  if (response.body.empty()) return json();
  json parsed = json::parse(response.body, nullptr, false);
  if (parsed.is_discarded()) {
    failure->status = response.status;
    failure->detail = "the body of " + std::string(HttpMethodName(method)) + " " + kApiPrefix +
                      path + " is not JSON";
    return std::nullopt;
  }
  return parsed;
}

}  // namespace dgpu::ctl
