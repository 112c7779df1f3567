#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "ctl/http_client.h"

namespace dgpu::ctl {
namespace {

std::string ToLower(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

std::string Trim(std::string_view text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return std::string(text.substr(begin, end - begin));
}

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

size_t WriteHeader(char* data, size_t size, size_t count, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {
    // A new response starts (after a redirect or an interim 1xx): forget earlier headers.
    headers->clear();
  } else if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    (*headers)[ToLower(Trim(line.substr(0, colon)))] = Trim(line.substr(colon + 1));
  }
  return size * count;
}

bool IsSuccess(long status) { return status >= 200 && status < 300; }

// Where a download's body goes: the file for a 2xx answer, memory for any other.
struct DownloadSink {
  CURL* curl = nullptr;
  std::FILE* file = nullptr;
  std::string* body = nullptr;
  int error = 0;  // errno of a failed write to the file.
};

// An answer that is not a 2xx keeps its body in memory (the API's error); true when it did.
bool KeptAsError(CURL* curl, std::string* body, const char* data, size_t n) {
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (IsSuccess(status)) return false;
  body->append(data, n);
  return true;
}

size_t WriteDownload(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<DownloadSink*>(user);
  if (KeptAsError(sink->curl, sink->body, data, size * count)) return size * count;
  if (std::fwrite(data, 1, size * count, sink->file) != size * count) {
    sink->error = errno != 0 ? errno : EIO;
    return 0;  // Aborts the transfer.
  }
  return size * count;
}

struct StreamSink {
  CURL* curl = nullptr;
  const std::function<bool(std::string_view)>* on_data = nullptr;
  std::string* body = nullptr;
  bool stopped = false;  // on_data asked to end the transfer.
};

size_t WriteStream(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<StreamSink*>(user);
  if (KeptAsError(sink->curl, sink->body, data, size * count)) return size * count;
  if (!(*sink->on_data)(std::string_view(data, size * count))) {
    sink->stopped = true;
    return 0;  // Aborts the transfer.
  }
  return size * count;
}

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

}  // namespace

std::string_view HttpMethodName(HttpMethod method) {
  switch (method) {
    case HttpMethod::kGet:
      return "GET";
    case HttpMethod::kPost:
      return "POST";
    case HttpMethod::kPut:
      return "PUT";
    case HttpMethod::kDelete:
      return "DELETE";
  }
  return "GET";
}

std::string HttpResponse::Header(std::string_view name) const {
  auto it = headers.find(ToLower(name));
  return it == headers.end() ? std::string() : it->second;
}

HttpResult HttpClient::Download(const std::string& url, const std::string& path) {
  HttpResult result = Send(HttpMethod::kGet, url, "");
  if (!result.has_response() || !IsSuccess(result.response->status)) return result;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  const std::string& body = result.response->body;
  const bool written =
      file != nullptr && std::fwrite(body.data(), 1, body.size(), file) == body.size();
  const int err = errno;
  if (file != nullptr && std::fclose(file) != 0 && written) {
    std::remove(path.c_str());
    return {std::nullopt, "cannot write " + path + ": " + std::strerror(errno)};
  }
  if (!written) {
    if (file != nullptr) std::remove(path.c_str());
    return {std::nullopt, "cannot write " + path + ": " + std::strerror(err)};
  }
  result.response->body.clear();
  return result;
}

HttpResult HttpClient::Stream(const std::string& url, const std::vector<std::string>&,
                              const std::function<bool(std::string_view)>& on_data) {
  HttpResult result = Send(HttpMethod::kGet, url, "");
  if (!result.has_response() || !IsSuccess(result.response->status)) return result;
  on_data(result.response->body);
  result.response->body.clear();
  return result;
}

CurlHttpClient::CurlHttpClient(std::chrono::milliseconds timeout) : timeout_(timeout) {}

HttpResult CurlHttpClient::Send(HttpMethod method, const std::string& url,
                                const std::string& body) {
  HttpResult result;
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) {
    result.transport_error = "cannot initialize libcurl";
    return result;
  }
  HttpResponse response;
  char error_buffer[CURL_ERROR_SIZE] = {0};
  curl_slist* raw_headers = nullptr;
  raw_headers = curl_slist_append(raw_headers, "Accept: application/json");
  raw_headers = curl_slist_append(raw_headers, "Expect:");
  if (!auth_.token.empty()) {
    raw_headers = curl_slist_append(raw_headers, ("Authorization: Bearer " + auth_.token).c_str());
  }
  const bool has_body = method == HttpMethod::kPost || method == HttpMethod::kPut || !body.empty();
  if (has_body) raw_headers = curl_slist_append(raw_headers, "Content-Type: application/json");
  std::unique_ptr<curl_slist, SlistDeleter> headers(raw_headers);

  CURL* h = curl.get();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_.count()));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_.count()));
  curl_easy_setopt(h, CURLOPT_USERAGENT, "dgpuctl/" DGPU_VERSION);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  if (!auth_.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, auth_.ca_file.c_str());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, WriteHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &response.headers);
  if (has_body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  if (method != HttpMethod::kGet && method != HttpMethod::kPost) {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, std::string(HttpMethodName(method)).c_str());
  }

  CURLcode code = curl_easy_perform(h);
  if (code != CURLE_OK) {
    result.transport_error = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
    return result;
  }
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  result.response = std::move(response);
  return result;
}

}  // namespace dgpu::ctl

namespace dgpu::ctl {

namespace {

// The options of a transfer with no limit on its total time (a download, a stream): it gives up
// when no byte arrives for max(timeout, 60 s). Returns the request headers, which must outlive
// the transfer.
std::unique_ptr<curl_slist, SlistDeleter> SetLongTransfer(
    CURL* h, const std::string& url, const HttpAuth& auth, std::chrono::milliseconds timeout,
    const std::vector<std::string>& extra_headers, char* error_buffer, HttpResponse* response) {
  curl_slist* raw_headers = curl_slist_append(nullptr, "Expect:");
  if (!auth.token.empty()) {
    raw_headers = curl_slist_append(raw_headers, ("Authorization: Bearer " + auth.token).c_str());
  }
  for (const std::string& line : extra_headers) {
    raw_headers = curl_slist_append(raw_headers, line.c_str());
  }
  std::unique_ptr<curl_slist, SlistDeleter> headers(raw_headers);
  const long quiet_seconds = std::max(60L, static_cast<long>((timeout.count() + 999) / 1000));
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, quiet_seconds);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "dgpuctl/" DGPU_VERSION);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
  if (!auth.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, auth.ca_file.c_str());
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, WriteHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &response->headers);
  return headers;
}

}  // namespace

HttpResult CurlHttpClient::Download(const std::string& url, const std::string& path) {
  HttpResult result;
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) {
    result.transport_error = "cannot initialize libcurl";
    return result;
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    result.transport_error = "cannot create " + path + ": " + std::strerror(errno);
    return result;
  }
  HttpResponse response;
  DownloadSink sink{curl.get(), file, &response.body, 0};
  char error_buffer[CURL_ERROR_SIZE] = {0};
  CURL* h = curl.get();
  auto headers = SetLongTransfer(h, url, auth_, timeout_, {}, error_buffer, &response);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteDownload);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);

  const CURLcode code = curl_easy_perform(h);
  const bool closed = std::fclose(file) == 0;
  const int close_error = errno;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  if (code != CURLE_OK || !closed || !IsSuccess(response.status)) std::remove(path.c_str());
  if (sink.error != 0) {
    result.transport_error = "cannot write " + path + ": " + std::strerror(sink.error);
  } else if (code != CURLE_OK) {
    result.transport_error = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
  } else if (!closed) {
    result.transport_error = "cannot write " + path + ": " + std::strerror(close_error);
  } else {
    result.response = std::move(response);
  }
  return result;
}

}  // namespace dgpu::ctl

namespace dgpu::ctl {

HttpResult CurlHttpClient::Stream(const std::string& url, const std::vector<std::string>& headers,
                                  const std::function<bool(std::string_view)>& on_data) {
  HttpResult result;
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) {
    result.transport_error = "cannot initialize libcurl";
    return result;
  }
  HttpResponse response;
  StreamSink sink{curl.get(), &on_data, &response.body};
  char error_buffer[CURL_ERROR_SIZE] = {0};
  CURL* h = curl.get();
  auto header_list = SetLongTransfer(h, url, auth_, timeout_, headers, error_buffer, &response);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteStream);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);

  const CURLcode code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  if (code != CURLE_OK && !sink.stopped) {
    result.transport_error = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
  } else {
    result.response = std::move(response);
  }
  return result;
}

}  // namespace dgpu::ctl
