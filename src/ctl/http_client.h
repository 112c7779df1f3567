// HTTP transport used by dgpuctl.
//
// Command logic talks to an HttpClient so that it can be exercised with a fake transport in unit
// tests; CurlHttpClient is the production implementation over libcurl.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dgpu::ctl {

enum class HttpMethod { kGet, kPost, kPut, kDelete };

std::string_view HttpMethodName(HttpMethod method);

struct HttpResponse {
  long status = 0;
  // Header names are stored in lower case; a repeated header keeps its last value.
  std::map<std::string, std::string> headers;
  std::string body;

  // Case-insensitive header lookup; empty when the header is absent.
  std::string Header(std::string_view name) const;
};

// Either a response (whatever its status) or a transport error (no response at all).
struct HttpResult {
  std::optional<HttpResponse> response;
  std::string transport_error;

  bool has_response() const { return response.has_value(); }
};

// How dgpuctl proves who it is and whom it trusts.
struct HttpAuth {
  std::string token;    // Sent as "Authorization: Bearer <token>" when not empty.
  std::string ca_file;  // PEM CA bundle for https:// servers; empty: the system's.
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;

  void set_auth(HttpAuth auth) { auth_ = std::move(auth); }
  const HttpAuth& auth() const { return auth_; }

  // Sends one request. `body` is sent as application/json when it is non-empty or the method is
  // POST or PUT.
  virtual HttpResult Send(HttpMethod method, const std::string& url, const std::string& body) = 0;

  HttpResult Get(const std::string& url) { return Send(HttpMethod::kGet, url, ""); }
  HttpResult Post(const std::string& url, const std::string& body) {
    return Send(HttpMethod::kPost, url, body);
  }
  HttpResult Put(const std::string& url, const std::string& body) {
    return Send(HttpMethod::kPut, url, body);
  }
  HttpResult Delete(const std::string& url) { return Send(HttpMethod::kDelete, url, ""); }

  // GET whose 2xx body goes to the new file `path` (created, or truncated) instead of memory; the
  // response's body then stays empty. Any other answer keeps its body in memory and leaves no
  // file. A transport error leaves no file either. This default sends with Send and writes the
  // body; CurlHttpClient streams it, with no limit on the transfer's total time.
  virtual HttpResult Download(const std::string& url, const std::string& path);

  // GET whose 2xx body is handed to `on_data` piece by piece as it arrives (a watch stream, a
  // log being followed); `on_data` returns false to end the transfer early, which is then a
  // success. Any other answer keeps its body in memory. `headers` are extra request headers
  // ("Name: value"). This default sends with Send and hands over the whole body at once;
  // CurlHttpClient streams, with no limit on the transfer's total time.
  virtual HttpResult Stream(const std::string& url, const std::vector<std::string>& headers,
                            const std::function<bool(std::string_view)>& on_data);

 protected:
  HttpAuth auth_;
};

// libcurl implementation. curl_global_init must have been called by the program (main does it);
// each request uses its own easy handle, so one client may be used from one thread at a time.
class CurlHttpClient : public HttpClient {
 public:
  explicit CurlHttpClient(std::chrono::milliseconds timeout);

  HttpResult Send(HttpMethod method, const std::string& url, const std::string& body) override;
  // Gives up when no byte arrives for max(timeout, 60 s), however long the whole transfer takes.
  HttpResult Download(const std::string& url, const std::string& path) override;
  // Gives up when no byte arrives for max(timeout, 60 s) (a watch stream sends a keepalive
  // every 15 s).
  HttpResult Stream(const std::string& url, const std::vector<std::string>& headers,
                    const std::function<bool(std::string_view)>& on_data) override;

 private:
  std::chrono::milliseconds timeout_;
};

}  // namespace dgpu::ctl
