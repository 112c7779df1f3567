// An in-memory HttpClient for dgpuctl unit tests: answers from a script of canned responses and
// records every request.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ctl/http_client.h"

namespace dgpu::ctl {

class FakeHttpClient : public HttpClient {
 public:
  struct Request {
    HttpMethod method;
    std::string url;
    std::string body;
  };

  // Queues a response for "METHOD URL"; queued responses are used in order and the last one
  // repeats.
  void Answer(HttpMethod method, const std::string& url, long status, std::string body,
              std::map<std::string, std::string> headers = {}) {
    HttpResult result;
    HttpResponse response;
    response.status = status;
    response.body = std::move(body);
    response.headers = std::move(headers);
    result.response = std::move(response);
    answers_[Key(method, url)].push_back(std::move(result));
  }

  // Every request fails at the transport level with `error`.
  void Unreachable(std::string error) { transport_error_ = std::move(error); }

  HttpResult Send(HttpMethod method, const std::string& url, const std::string& body) override {
    requests_.push_back({method, url, body});
    if (!transport_error_.empty()) {
      HttpResult result;
      result.transport_error = transport_error_;
      return result;
    }
    auto it = answers_.find(Key(method, url));
    if (it == answers_.end() || it->second.empty()) {
      HttpResult result;
      HttpResponse response;
      response.status = 404;
      response.body = R"({"error":{"code":"not_found","message":"no canned answer"}})";
      result.response = response;
      return result;
    }
    HttpResult result = it->second.front();
    if (it->second.size() > 1) it->second.pop_front();
    return result;
  }

  const std::vector<Request>& requests() const { return requests_; }

 private:
  static std::string Key(HttpMethod method, const std::string& url) {
    return std::string(HttpMethodName(method)) + " " + url;
  }

  std::map<std::string, std::deque<HttpResult>> answers_;
  std::string transport_error_;
  std::vector<Request> requests_;
};

}  // namespace dgpu::ctl
