#include <curl/curl.h>

#include <algorithm>
#include <cctype>
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
