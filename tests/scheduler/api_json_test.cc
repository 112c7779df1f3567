// The REST API's request parsing: every error path names the field and the reason, with the
// HTTP status and code of the contract, and leaves the output untouched.
#include "scheduler/api_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dgpu::scheduler {
namespace {

using nlohmann::json;

struct Refusal {
  std::string body;
  int http_status;
  std::string code;
  std::string message;
};

json ValidSubmit() { return {{"priority", "low"}, {"gpu_count", 1}, {"command", "true"}}; }

std::string SubmitWith(const std::string& field, const json& value) {
  json body = ValidSubmit();
  body[field] = value;
  return body.dump();
}

std::string SubmitWithout(const std::string& field) {
  json body = ValidSubmit();
  body.erase(field);
  return body.dump();
}

json EnvWithEntries(int n) {
  json env = json::object();
  for (int i = 0; i < n; ++i) env["V" + std::to_string(i)] = "x";
  return env;
}

void ExpectRefusal(const std::optional<ApiError>& error, const Refusal& r) {
  ASSERT_TRUE(error.has_value()) << r.body.substr(0, 200) << " was accepted";
  EXPECT_EQ(error->http_status, r.http_status) << r.message;
  EXPECT_EQ(error->code, r.code) << r.message;
  EXPECT_EQ(error->message, r.message);
}

TEST(ApiJsonTest, SubmitRefusesEveryBadBodyNamingTheFieldAndLeavesTheSpecAsItWas) {
  const std::string too_long_command(kMaxCommandBytes + 1, 'x');
  const std::vector<Refusal> refusals = {
      {std::string(kMaxBodyBytes + 1, ' '), 413, "payload_too_large",
       "request body is 1048577 bytes; the limit is 1048576"},
      {R"({"priority": )", 400, "invalid_json",
       "malformed JSON at byte 14: syntax error while parsing value - unexpected end of input; "
       "expected '[', '{', or a literal"},
      {R"({"gpu_count": 1e400})", 400, "invalid_json",
       "malformed JSON: number overflow parsing '1e400'"},
      {"[1, 2]", 400, "invalid_json", "request body must be a JSON object"},
      {SubmitWith("gpus", 1), 400, "unknown_field", "unknown field \"gpus\""},
      {SubmitWithout("priority"), 400, "invalid_field", "priority is required (high or low)"},
      {SubmitWith("priority", nullptr), 400, "invalid_field", "priority is required (high or low)"},
      {SubmitWith("priority", 1), 400, "invalid_field",
       "priority must be \"high\" or \"low\", got number"},
      {SubmitWith("priority", "medium"), 400, "invalid_field",
       "priority must be \"high\" or \"low\", got \"medium\""},
      {SubmitWithout("gpu_count"), 400, "invalid_field", "gpu_count is required"},
      {SubmitWith("gpu_count", "2"), 400, "invalid_field",
       "gpu_count must be an integer, got string"},
      {SubmitWith("gpu_count", 1.5), 400, "invalid_field",
       "gpu_count must be an integer, got a non-integer number"},
      {SubmitWith("gpu_count", 0), 400, "invalid_field",
       "gpu_count must be between 1 and 1024, got 0"},
      // JSON reads a positive integer as unsigned: above the range the value is not repeated.
      {SubmitWith("gpu_count", 1025), 400, "invalid_field", "gpu_count must be between 1 and 1024"},
      {SubmitWith("gpu_count", UINT64_MAX), 400, "invalid_field",
       "gpu_count must be between 1 and 1024"},
      {SubmitWith("gpu_count", INT64_MIN), 400, "invalid_field",
       "gpu_count must be between 1 and 1024, got -9223372036854775808"},
      {SubmitWithout("command"), 400, "invalid_field", "command is required"},
      {SubmitWith("command", json::array({"true"})), 400, "invalid_field",
       "command must be a string, got array"},
      {SubmitWith("command", too_long_command), 400, "invalid_field",
       "command is 65537 bytes; the limit is 65536"},
      {SubmitWith("command", std::string("tr\0ue", 5)), 400, "invalid_field",
       "command must not contain a NUL byte"},
      {SubmitWith("command", " \t\n"), 400, "invalid_field", "command must not be empty"},
      {SubmitWith("gpu_model", 80), 400, "invalid_field", "gpu_model must be a string, got number"},
      {SubmitWith("name", std::string(kMaxShortField + 1, 'n')), 400, "invalid_field",
       "name is 257 bytes; the limit is 256"},
      {SubmitWith("image", std::string(1025, 'i')), 400, "invalid_field",
       "image is 1025 bytes; the limit is 1024"},
      {SubmitWith("timeout_seconds", -1), 400, "invalid_field",
       "timeout_seconds must be between 0 and 315360000, got -1"},
      {SubmitWith("timeout_seconds", true), 400, "invalid_field",
       "timeout_seconds must be an integer, got boolean"},
      {SubmitWith("env", json::array()), 400, "invalid_field",
       "env must be an object of string to string, got array"},
      {SubmitWith("env", EnvWithEntries(kMaxEnvEntries + 1)), 400, "invalid_field",
       "env has 257 entries; the limit is 256"},
      {SubmitWith("env", {{"1A", "x"}}), 400, "invalid_field",
       "env key \"1A\" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"},
      {SubmitWith("env", {{"A-B", "x"}}), 400, "invalid_field",
       "env key \"A-B\" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"},
      {SubmitWith("env", {{"", "x"}}), 400, "invalid_field",
       "env key \"\" is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"},
      {SubmitWith("env", {{"A", 1}}), 400, "invalid_field", "env.A must be a string, got number"},
  };
  for (const Refusal& r : refusals) {
    core::TaskSpec spec;
    spec.name = "untouched";
    ExpectRefusal(ParseSubmitRequest(r.body, &spec), r);
    EXPECT_EQ(spec.name, "untouched") << r.message;
  }
}

TEST(ApiJsonTest, SubmitReadsEveryFieldSortsEnvAndTakesNullAsAbsent) {
  json body = {{"priority", "high"},
               {"gpu_count", 4},
               {"command", "python train.py"},
               {"gpu_model", "A100"},
               {"name", "train"},
               {"image", "pytorch:2"},
               {"timeout_seconds", 3600},
               {"env", {{"ZETA", "z"}, {"ALPHA", "a"}}}};
  core::TaskSpec spec;
  ASSERT_EQ(ParseSubmitRequest(body.dump(), &spec), std::nullopt);
  EXPECT_EQ(spec.priority, core::Priority::kHigh);
  EXPECT_EQ(spec.gpu_count, 4);
  EXPECT_EQ(spec.command, "python train.py");
  EXPECT_EQ(spec.gpu_model, "A100");
  EXPECT_EQ(spec.name, "train");
  EXPECT_EQ(spec.image, "pytorch:2");
  EXPECT_EQ(spec.timeout_seconds, 3600);
  using Env = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(spec.env, (Env{{"ALPHA", "a"}, {"ZETA", "z"}}));

  json nulls = ValidSubmit();
  for (const char* field : {"gpu_model", "name", "image", "timeout_seconds", "env"}) {
    nulls[field] = nullptr;
  }
  core::TaskSpec defaults;
  ASSERT_EQ(ParseSubmitRequest(nulls.dump(), &defaults), std::nullopt);
  EXPECT_EQ(defaults.priority, core::Priority::kLow);
  EXPECT_EQ(defaults.gpu_model, "");
  EXPECT_EQ(defaults.timeout_seconds, 0);
  EXPECT_TRUE(defaults.env.empty());
}

TEST(ApiJsonTest, QuotaRefusesEveryBadBodyNamingTheField) {
  const std::vector<Refusal> refusals = {
      {"{", 400, "invalid_json",
       "malformed JSON at byte 2: syntax error while parsing object key - unexpected end of "
       "input; expected string literal"},
      {"0.5", 400, "invalid_json", "request body must be a JSON object"},
      {R"({"online": 0.5})", 400, "unknown_field", "unknown field \"online\""},
      {"{}", 400, "invalid_field", "online_percent is required"},
      {R"({"online_percent": "0.5"})", 400, "invalid_field",
       "online_percent must be a number between 0 and 1, got string"},
      {R"({"online_percent": 1.5})", 400, "invalid_field",
       "online_percent must be between 0 and 1, got 1.5"},
      {R"({"batch_percent": -0.25})", 400, "invalid_field",
       "batch_percent must be between 0 and 1, got -0.25"},
      {R"({"online_percent": 0.5, "batch_percent": 0.25})", 400, "invalid_field",
       "online_percent and batch_percent must add up to 1"},
  };
  for (const Refusal& r : refusals) {
    double online = -7;
    ExpectRefusal(ParseQuotaRequest(r.body, &online), r);
    EXPECT_EQ(online, -7) << r.message;
  }
}

TEST(ApiJsonTest, QuotaTakesEitherShareOrBothWhenTheyAddUpToOne) {
  double online = -1;
  ASSERT_EQ(ParseQuotaRequest(R"({"online_percent": 0.6})", &online), std::nullopt);
  EXPECT_DOUBLE_EQ(online, 0.6);
  ASSERT_EQ(ParseQuotaRequest(R"({"batch_percent": 0.25})", &online), std::nullopt);
  EXPECT_DOUBLE_EQ(online, 0.75);
  ASSERT_EQ(ParseQuotaRequest(R"({"online_percent": 0.7, "batch_percent": 0.3})", &online),
            std::nullopt);
  EXPECT_DOUBLE_EQ(online, 0.7);
  ASSERT_EQ(ParseQuotaRequest(R"({"online_percent": 0})", &online), std::nullopt);
  EXPECT_EQ(online, 0.0);
}

TEST(ApiJsonTest, ContentTypeIsJsonOrAbsent) {
  EXPECT_EQ(CheckJsonContentType(""), std::nullopt);
  EXPECT_EQ(CheckJsonContentType("application/json"), std::nullopt);
  EXPECT_EQ(CheckJsonContentType(" Application/JSON ; charset=utf-8"), std::nullopt);
  std::optional<ApiError> error = CheckJsonContentType("text/plain; charset=utf-8");
  ExpectRefusal(error, {"", 415, "unsupported_media_type",
                        "Content-Type must be application/json, got text/plain; charset=utf-8"});
}

TEST(ApiJsonTest, ApplicationErrorsMapOntoTheContractsHttpStatuses) {
  struct Mapping {
    ErrorCode code;
    int http_status;
    std::string word;
  };
  const std::vector<Mapping> mappings = {
      {ErrorCode::kInvalidArgument, 400, "invalid_field"},
      {ErrorCode::kNotFound, 404, "not_found"},
      {ErrorCode::kAlreadyExists, 409, "already_exists"},
      {ErrorCode::kConflict, 409, "conflict"},
      {ErrorCode::kForbidden, 403, "forbidden"},
      {ErrorCode::kNotLeader, 503, "not_leader"},
      {ErrorCode::kUnavailable, 503, "unavailable"},
      {ErrorCode::kStorageUnavailable, 503, "storage_unavailable"},
      {ErrorCode::kInternal, 500, "internal"},
  };
  for (const Mapping& m : mappings) {
    Error e;
    e.code = m.code;
    e.message = "bad";
    ApiError error = ToApiError(e);
    EXPECT_EQ(error.http_status, m.http_status) << m.word;
    EXPECT_EQ(error.code, m.word);
    EXPECT_EQ(error.message, "bad");
  }
}

TEST(ApiJsonTest, ListQueryRefusalsNameTheParameter) {
  struct Case {
    const char* query;
    ApiError want;
  };
  const Case cases[] = {
      {"status=sleeping",
       {400, "invalid_field",
        "status must be one of pending, running, success, failed, cancelled; got \"sleeping\""}},
      {"priority=urgent", {400, "invalid_field", "priority must be high or low; got \"urgent\""}},
      {"limit=0", {400, "invalid_field", "limit must be an integer from 1 to 1000"}},
      {"limit=1001", {400, "invalid_field", "limit must be an integer from 1 to 1000"}},
      {"limit=ten", {400, "invalid_field", "limit must be an integer from 1 to 1000"}},
      {"offset=-1", {400, "invalid_field", "offset must be a non-negative integer"}},
      {"sort=id", {400, "unknown_field", "unknown query parameter \"sort\""}},
      {"after=42",
       {400, "invalid_field",
        "after must be a task id like task-42 (the next of a page); got \"42\""}},
      {"after=task-0",
       {400, "invalid_field",
        "after must be a task id like task-42 (the next of a page); got \"task-0\""}},
      {"after=task-9&offset=3",
       {400, "invalid_field",
        "after and offset cannot be combined: after already says where the page starts"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.query);
    ListTasksRequest request;
    std::optional<ApiError> error = ParseListQuery(c.query, &request);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->http_status, c.want.http_status);
    EXPECT_EQ(error->code, c.want.code);
    EXPECT_EQ(error->message, c.want.message);
  }
}

TEST(ApiJsonTest, ListQueryReadsEveryParameter) {
  ListTasksRequest request;
  ASSERT_EQ(ParseListQuery("status=running&priority=high&limit=5&offset=99999999999", &request),
            std::nullopt);
  EXPECT_EQ(request.status, core::TaskStatus::kRunning);
  EXPECT_EQ(request.priority, core::Priority::kHigh);
  EXPECT_EQ(request.limit, 5);
  EXPECT_EQ(request.offset, INT32_MAX) << "an offset past every task is clamped";
  EXPECT_EQ(request.after, std::nullopt);
  ListTasksRequest keyset;
  ASSERT_EQ(ParseListQuery("after=task-1041&limit=2&offset=0", &keyset), std::nullopt);
  EXPECT_EQ(keyset.after, 1041u);
  EXPECT_EQ(keyset.offset, 0);
  ListTasksRequest empty;
  const ListTasksRequest defaults;
  ASSERT_EQ(ParseListQuery("status=&priority=&after=", &empty), std::nullopt);
  EXPECT_EQ(empty.status, std::nullopt);
  EXPECT_EQ(empty.limit, defaults.limit);
}

TEST(ApiJsonTest, CancelQueryTakesOnlyAGraceInteger) {
  std::optional<int32_t> grace;
  ASSERT_EQ(ParseCancelQuery("", &grace), std::nullopt);
  EXPECT_EQ(grace, std::nullopt);
  ASSERT_EQ(ParseCancelQuery("grace_seconds=30", &grace), std::nullopt);
  EXPECT_EQ(grace, 30);
  std::optional<ApiError> e = ParseCancelQuery("grace_seconds=soon", &grace);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "invalid_field");
  EXPECT_EQ(e->message,
            "grace_seconds must be an integer from 0 to " + std::to_string(kMaxGraceSeconds));
  e = ParseCancelQuery("force=1", &grace);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, "unknown_field");
  EXPECT_EQ(e->message, "unknown query parameter \"force\"");
}

TEST(ApiJsonTest, ErrorBodyIsTheContractsEnvelopeEvenForInvalidUtf8) {
  EXPECT_EQ(InvalidField("gpu_count is required").Body(),
            R"({"error":{"code":"invalid_field","message":"gpu_count is required"}})");
  EXPECT_EQ((ApiError{404, "not_found", "task \xff"}).Body(),
            "{\"error\":{\"code\":\"not_found\",\"message\":\"task \xEF\xBF\xBD\"}}");
}

}  // namespace
}  // namespace dgpu::scheduler
