// The REST API's request parsing: every error path names the field and the reason, with the
// HTTP status and code of the contract, and leaves the output untouched.
#include "scheduler/api_json.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../store/store_test_util.h"
#include "core/task_fields.h"
#include "scheduler/openapi_spec.h"

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
      {SubmitWith("team", 7), 400, "invalid_field", "team must be a string, got number"},
      {SubmitWith("team", std::string(64, 't')), 400, "invalid_field",
       "team is 64 bytes; the limit is 63"},
      {SubmitWith("team", "Vision"), 400, "invalid_field",
       "team must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
       "digit; got \"Vision\""},
      {SubmitWith("team", ""), 400, "invalid_field",
       "team must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
       "digit; got \"\""},
      {SubmitWith("team", "-nlp"), 400, "invalid_field",
       "team must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
       "digit; got \"-nlp\""},
      {SubmitWith("team", "a b"), 400, "invalid_field",
       "team must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
       "digit; got \"a b\""},
      {SubmitWith("user", json::object()), 400, "invalid_field",
       "user must be a string, got object"},
      {SubmitWith("user", std::string(kMaxShortField + 1, 'u')), 400, "invalid_field",
       "user is 257 bytes; the limit is 256"},
      {SubmitWith("user", std::string("al\0ice", 6)), 400, "invalid_field",
       "user must not contain a NUL byte"},
      {SubmitWith("preemptible", "false"), 400, "invalid_field",
       "preemptible must be true or false, got string"},
      {SubmitWith("preemptible", 0), 400, "invalid_field",
       "preemptible must be true or false, got number"},
      {SubmitWith("preemption_grace_seconds", -1), 400, "invalid_field",
       "preemption_grace_seconds must be between 0 and 86400, got -1"},
      {SubmitWith("preemption_grace_seconds", kMaxGraceSeconds + 1), 400, "invalid_field",
       "preemption_grace_seconds must be between 0 and 86400"},
      {SubmitWith("preemption_grace_seconds", 2.5), 400, "invalid_field",
       "preemption_grace_seconds must be an integer, got a non-integer number"},
      {SubmitWith("preemption_grace_seconds", "30"), 400, "invalid_field",
       "preemption_grace_seconds must be an integer, got string"},
      {SubmitWith("preempt", false), 400, "unknown_field", "unknown field \"preempt\""},
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

TEST(ApiJsonTest, SubmitReadsAGangAsNodesTimesGpusPerNode) {
  auto parse = [](json body, core::TaskSpec* spec) {
    body["priority"] = "high";
    body["command"] = "true";
    return ParseSubmitRequest(body.dump(), spec);
  };
  core::TaskSpec spec;
  ASSERT_EQ(parse({{"nodes", 2}, {"gpus_per_node", 4}}, &spec), std::nullopt);
  EXPECT_EQ(std::make_pair(spec.nodes, spec.gpu_count), std::make_pair(2, 8));
  ASSERT_EQ(parse({{"nodes", 2}, {"gpus_per_node", 4}, {"gpu_count", 8}}, &spec), std::nullopt);
  EXPECT_EQ(std::make_pair(spec.nodes, spec.gpu_count), std::make_pair(2, 8));
  ASSERT_EQ(parse({{"nodes", 3}, {"gpu_count", 6}}, &spec), std::nullopt);
  EXPECT_EQ(std::make_pair(spec.nodes, spec.gpu_count), std::make_pair(3, 2 * 3));
  ASSERT_EQ(parse({{"gpus_per_node", 5}}, &spec), std::nullopt);
  EXPECT_EQ(std::make_pair(spec.nodes, spec.gpu_count), std::make_pair(1, 5));
  ASSERT_EQ(parse({{"gpu_count", 2}, {"nodes", nullptr}}, &spec), std::nullopt);
  EXPECT_EQ(std::make_pair(spec.nodes, spec.gpu_count), std::make_pair(1, 2)) << "v1's body";
  auto e = parse({{"nodes", 2}, {"gpus_per_node", 4}, {"gpu_count", 6}}, &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "gpu_count 6 is not nodes x gpus_per_node (2 x 4)");
  e = parse({{"nodes", 4}, {"gpu_count", 6}}, &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "gpu_count 6 is not split evenly over 4 nodes: give gpus_per_node");
  e = parse({{"nodes", 2}}, &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "gpu_count is required");
  e = parse({{"nodes", 2}, {"gpus_per_node", 1000}}, &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "nodes x gpus_per_node must be at most 1024 GPUs, got 2 x 1000");
}

// A submission of `body` plus the required fields (priority low, command true, one GPU).
std::optional<ApiError> ParseWithRequiredFields(json body, core::TaskSpec* spec) {
  body["priority"] = "low";
  body["command"] = "true";
  body["gpu_count"] = 1;
  return ParseSubmitRequest(body.dump(), spec);
}

// Each of `bad` (fields, message) is refused as invalid_field with exactly that message, and
// leaves the spec as it was.
template <typename Parse, size_t N>
void ExpectInvalidFields(Parse parse, const std::pair<json, std::string> (&bad)[N]) {
  for (const auto& [fields, message] : bad) {
    core::TaskSpec untouched;
    auto e = parse(fields, &untouched);
    ASSERT_TRUE(e.has_value()) << fields.dump();
    EXPECT_EQ(std::make_pair(e->code, e->message),
              std::make_pair(std::string("invalid_field"), message));
    EXPECT_EQ(untouched, core::TaskSpec{});
  }
}

TEST(ApiJsonTest, SubmitReadsCpusAndMemoryAndTheTaskObjectShowsThem) {
  auto parse = ParseWithRequiredFields;
  core::TaskSpec spec;
  ASSERT_EQ(parse({{"cpus", 1.5}, {"memory_mb", 16384}}, &spec), std::nullopt);
  EXPECT_EQ(std::make_pair(spec.cpus_milli, spec.memory_mb),
            std::make_pair(int64_t{1500}, int64_t{16384}));
  ASSERT_EQ(parse({{"cpus", 4}, {"memory_mb", nullptr}}, &spec), std::nullopt);
  EXPECT_EQ(std::make_pair(spec.cpus_milli, spec.memory_mb),
            std::make_pair(int64_t{4000}, int64_t{0}));
  ASSERT_EQ(parse({{"cpus", 0.125}}, &spec), std::nullopt);
  EXPECT_EQ(spec.cpus_milli, 125);
  const std::pair<json, std::string> bad[] = {
      {{{"cpus", 0}}, "cpus must be more than 0 and at most 4096, got 0"},
      {{{"cpus", -2}}, "cpus must be more than 0 and at most 4096, got -2"},
      {{{"cpus", 5000}}, "cpus must be more than 0 and at most 4096, got 5000"},
      {{{"cpus", 0.0001}}, "cpus must have at most 3 decimals, got 0.0001"},
      {{{"cpus", "2"}}, "cpus must be a number, got string"},
      {{{"memory_mb", 0}}, "memory_mb must be between 1 and 67108864, got 0"},
      {{{"memory_mb", 1.5}}, "memory_mb must be an integer, got a non-integer number"},
  };
  ExpectInvalidFields(parse, bad);
  // The object: as asked; else what rank 0 was given; else null.
  core::Task t = store::testing::FullTask(5);
  t.spec.cpus_milli = 1500;
  t.spec.memory_mb = 0;
  t.allocation[0].memory_mb = 8192;
  json j = TaskToJson(t, core::PendingReason::kNone);
  EXPECT_EQ(std::make_pair(j["cpus"], j["memory_mb"]), std::make_pair(json(1.5), json(8192)));
  t.allocation.clear();
  j = TaskToJson(t, core::PendingReason::kInsufficientMemory);
  EXPECT_EQ(std::make_pair(j["cpus"], j["memory_mb"]), std::make_pair(json(1.5), json(nullptr)));
  EXPECT_EQ(j["pending_reason"], "insufficient_memory");
}

TEST(ApiJsonTest, SubmitReadsANodeSelectorSortedAndRefusesBadLabelsNamingThem) {
  auto parse = ParseWithRequiredFields;
  core::TaskSpec spec;
  ASSERT_EQ(parse({{"node_selector", {{"zone", "a"}, {"example.com/rack", "r-1.b_2"}}}}, &spec),
            std::nullopt);
  EXPECT_EQ(spec.node_selector, (std::vector<std::pair<std::string, std::string>>{
                                    {"example.com/rack", "r-1.b_2"}, {"zone", "a"}}));
  ASSERT_EQ(parse({{"node_selector", {{"gpu", ""}}}}, &spec), std::nullopt);
  ASSERT_EQ(parse({{"node_selector", nullptr}}, &spec), std::nullopt);
  EXPECT_TRUE(spec.node_selector.empty());
  json many = json::object();
  for (int i = 0; i < 33; ++i) many["k" + std::to_string(i)] = "v";
  const std::pair<json, std::string> bad[] = {
      {{{"node_selector", "rack=r1"}},
       "node_selector must be an object of label keys to values, got string"},
      {{{"node_selector", {{"rack", 1}}}}, "node_selector.rack must be a string, got number"},
      {{{"node_selector", {{"rack", "r 1"}}}},
       "node_selector.rack \"r 1\" is not valid: a label value is at most 63 letters, digits, "
       "'-', '_' or '.', beginning and ending with a letter or digit"},
      {{{"node_selector", {{"-rack", "r1"}}}},
       "node_selector key \"-rack\" is not valid: a label key is 1 to 63 letters, digits, '-', "
       "'_' or '.', beginning and ending with a letter or digit (optionally after a DNS prefix "
       "and '/')"},
      {{{"node_selector", {{"Example.com/rack", "r1"}}}},
       "node_selector key \"Example.com/rack\" is not valid: the prefix before '/' must be a DNS "
       "subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"},
      {{{"node_selector", {{std::string(64, 'k'), "v"}}}},
       "node_selector key \"" + std::string(64, 'k') +
           "\" is not valid: a label key is 1 to 63 letters, digits, '-', '_' or '.', beginning "
           "and ending with a letter or digit (optionally after a DNS prefix and '/')"},
      {{{"node_selector", many}}, "node_selector has 33 entries; the limit is 32"},
  };
  ExpectInvalidFields(parse, bad);
  // The object shows it as an object.
  core::Task t = store::testing::FullTask(5);
  EXPECT_EQ(TaskToJson(t, core::PendingReason::kNone)["node_selector"],
            (json{{"rack", "r1"}, {"topology.example.com/zone", "a"}}));
  EXPECT_EQ(TaskToJson(t, core::PendingReason::kNoNodeMatches)["pending_reason"],
            "no_node_matches");
}

TEST(ApiJsonTest, SubmitReadsDependenciesAndRefusesBadOnesNamingTheEntry) {
  auto parse = ParseWithRequiredFields;
  core::TaskSpec spec;
  ASSERT_EQ(parse({{"depends_on",
                    {{{"task_id", "task-3"}, {"condition", "afternotok"}},
                     {{"task_id", "task-12"}},
                     {{"task_id", "task-4"}, {"condition", "after"}},
                     {{"task_id", "task-4"}, {"condition", nullptr}}}}},
                  &spec),
            std::nullopt);
  using C = core::DependencyCondition;
  EXPECT_EQ(spec.depends_on,
            (core::Dependencies{
                {3, C::kAfterNotOk}, {12, C::kAfterOk}, {4, C::kAfter}, {4, C::kAfterOk}}))
      << "in the order given; afterok when no condition is given";
  ASSERT_EQ(parse({{"depends_on", nullptr}}, &spec), std::nullopt);
  EXPECT_TRUE(spec.depends_on.empty());
  json many = json::array();
  for (int i = 0; i < 65; ++i) many.push_back({{"task_id", "task-1"}});
  const std::pair<json, std::string> bad[] = {
      {{{"depends_on", "task-1"}},
       "depends_on must be a list of {task_id, condition} objects, got string"},
      {{{"depends_on", {"task-1"}}},
       "depends_on[0] must be a {task_id, condition} object, got string"},
      {{{"depends_on", {{{"task_id", "task-1"}}, {{"condition", "afterok"}}}}},
       "depends_on[1].task_id is required (a task id such as \"task-1\")"},
      {{{"depends_on", {{{"task_id", 7}}}}},
       "depends_on[0].task_id is required (a task id such as \"task-1\")"},
      {{{"depends_on", {{{"task_id", "7"}}}}},
       "depends_on[0].task_id \"7\" is not a task id (task-<number>)"},
      {{{"depends_on", {{{"task_id", "task-1"}, {"condition", "afterdone"}}}}},
       "depends_on[0].condition must be afterok, afternotok, afterany or after, got "
       "\"afterdone\""},
      {{{"depends_on", {{{"task_id", "task-1"}, {"type", "afterok"}}}}},
       "depends_on[0] has an unknown field \"type\""},
      {{{"depends_on", many}}, "depends_on has 65 entries; the limit is 64"},
  };
  ExpectInvalidFields(parse, bad);
  // The object shows each entry with its state.
  EXPECT_EQ(TaskToJson(store::testing::FullTask(5), core::PendingReason::kNone)["depends_on"],
            (json{{{"task_id", "task-3"}, {"condition", "afterok"}, {"state", "satisfied"}},
                  {{"task_id", "task-1000000007"},
                   {"condition", "afternotok"},
                   {"state", "never_satisfied"}},
                  {{"task_id", "task-2"}, {"condition", "after"}, {"state", "waiting"}}}));
  EXPECT_EQ(TaskToJson(store::testing::FullPendingTask(9),
                       core::PendingReason::kDependency)["pending_reason"],
            "dependency");
}

TEST(ApiJsonTest, ATaskHeldBackByAPlannedStartNamesTheTaskItIsKeptFor) {
  const core::Task t = store::testing::FullPendingTask(9);
  EXPECT_EQ(TaskToJson(t, core::PendingReason::kReservedFor, {}, 4)["pending_reason"],
            "reserved_for:task-4");
  EXPECT_EQ(TaskToJson(t, core::PendingReason::kNoNodeFits, {}, 4)["pending_reason"],
            "no_node_fits");
}

TEST(ApiJsonTest, SubmitReadsAnArraySizeWithinItsBounds) {
  json body = ValidSubmit();
  core::TaskSpec spec;
  int array = 0;
  ASSERT_EQ(ParseSubmitRequest(body.dump(), &spec, &array), std::nullopt);
  EXPECT_EQ(array, 0) << "no array";
  body["array"] = 100000;
  ASSERT_EQ(ParseSubmitRequest(body.dump(), &spec, &array), std::nullopt);
  EXPECT_EQ(array, 100000);
  for (json bad : {json(0), json(100001), json("3"), json(2.5)}) {
    body["array"] = bad;
    auto e = ParseSubmitRequest(body.dump(), &spec, &array);
    ASSERT_TRUE(e.has_value()) << bad;
    EXPECT_EQ(e->code, "invalid_field") << bad;
    EXPECT_NE(e->message.find("array"), std::string::npos) << e->message;
  }
  body["array"] = 2;
  auto e = ParseSubmitRequest(body.dump(), &spec);
  ASSERT_TRUE(e.has_value()) << "a caller that takes no array";
  EXPECT_EQ(e->code, "unknown_field");

  core::Task t;
  t.id = 3;
  t.spec.array_index = 2;
  t.spec.array_size = 4;
  json j = TaskToJson(t, core::PendingReason::kQueued);
  EXPECT_EQ(std::make_tuple(j["array_index"], j["array_size"]), std::make_tuple(json(2), json(4)));
  t.spec.array_index = -1;
  t.spec.array_size = 0;
  j = TaskToJson(t, core::PendingReason::kQueued);
  EXPECT_TRUE(j["array_index"].is_null() && j["array_size"].is_null());
}

TEST(ApiJsonTest, SubmitReadsTeamUserAndPreemptionFields) {
  json body = ValidSubmit();
  body["team"] = "vision-2_b";
  body["user"] = "alice";
  body["preemptible"] = false;
  body["preemption_grace_seconds"] = 0;
  core::TaskSpec spec;
  ASSERT_EQ(ParseSubmitRequest(body.dump(), &spec), std::nullopt);
  EXPECT_EQ(spec.team, "vision-2_b");
  EXPECT_EQ(spec.user, "alice");
  EXPECT_FALSE(spec.preemptible);
  EXPECT_EQ(spec.preemption_grace_seconds, 0);

  body["team"] = "0" + std::string(62, 'z');  // 63 characters, starting with a digit.
  body["preemptible"] = true;
  body["preemption_grace_seconds"] = kMaxGraceSeconds;
  ASSERT_EQ(ParseSubmitRequest(body.dump(), &spec), std::nullopt);
  EXPECT_EQ(spec.team, "0" + std::string(62, 'z'));
  EXPECT_TRUE(spec.preemptible);
  EXPECT_EQ(spec.preemption_grace_seconds, 86400);

  // Absent or null: team "default", no user, preemptible, the configured grace (-1).
  for (const json& submit :
       {ValidSubmit(), [] {
          json b = ValidSubmit();
          for (const char* field : {"team", "user", "preemptible", "preemption_grace_seconds"}) {
            b[field] = nullptr;
          }
          return b;
        }()}) {
    core::TaskSpec defaults;
    defaults.team = "before";
    defaults.user = "before";
    defaults.preemptible = false;
    defaults.preemption_grace_seconds = 5;
    ASSERT_EQ(ParseSubmitRequest(submit.dump(), &defaults), std::nullopt) << submit.dump();
    EXPECT_EQ(defaults.team, "default");
    EXPECT_EQ(defaults.user, "");
    EXPECT_TRUE(defaults.preemptible);
    EXPECT_EQ(defaults.preemption_grace_seconds, -1);
  }
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
      {"team=Vision",
       {400, "invalid_field",
        "team must be a team name ([a-z0-9][a-z0-9_-]{0,62}); got \"Vision\""}},
      {"team=_x",
       {400, "invalid_field", "team must be a team name ([a-z0-9][a-z0-9_-]{0,62}); got \"_x\""}},
      {"team=a%20b",
       {400, "invalid_field", "team must be a team name ([a-z0-9][a-z0-9_-]{0,62}); got \"a b\""}},
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
  ASSERT_EQ(ParseListQuery("status=&priority=&after=&team=", &empty), std::nullopt);
  EXPECT_EQ(empty.status, std::nullopt);
  EXPECT_EQ(empty.team, std::nullopt);
  EXPECT_EQ(empty.limit, defaults.limit);
}

TEST(ApiJsonTest, ListQueryFiltersByTeam) {
  ListTasksRequest request;
  ASSERT_EQ(ParseListQuery("team=vision&status=pending", &request), std::nullopt);
  EXPECT_EQ(request.team, "vision");
  EXPECT_EQ(request.status, core::TaskStatus::kPending);
  ListTasksRequest longest;
  const std::string name = "9" + std::string(62, '-');
  ASSERT_EQ(ParseListQuery("team=" + name, &longest), std::nullopt);
  EXPECT_EQ(longest.team, name);
  ListTasksRequest too_long;
  std::optional<ApiError> error = ParseListQuery("team=" + name + "x", &too_long);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, "invalid_field");
  EXPECT_EQ(error->message,
            "team must be a team name ([a-z0-9][a-z0-9_-]{0,62}); got \"" + name + "x\"");
  EXPECT_EQ(too_long.team, std::nullopt);
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

// --- Response bodies ----------------------------------------------------------------------------

// 2023-11-14T22:13:20Z.
constexpr core::TimeMicros kT0 = 1'700'000'000'000'000;

core::Task RunningTask() {
  core::Task t;
  t.id = 42;
  t.spec.name = "train";
  t.spec.team = "vision";
  t.spec.user = "alice";
  t.spec.priority = core::Priority::kLow;
  t.spec.gpu_count = 2;
  t.spec.command = "python train.py";
  t.spec.preemptible = true;
  t.spec.preemption_grace_seconds = 10;
  t.status = core::TaskStatus::kRunning;
  t.allocation = {{"node-1", {2, 3}}};
  t.attempts = 1;
  t.created_at = kT0;
  t.started_at = kT0 + 1'500'000;
  t.borrowed = true;
  t.preemptions = 3;
  t.preempted_by = 7;
  return t;
}

TEST(ApiJsonTest, TaskObjectCarriesTeamUserPreemptibleBorrowedAndPreemptions) {
  const json expected = {
      {"task_id", "task-42"},
      {"name", "train"},
      {"priority", "low"},
      {"gpu_count", 2},
      {"gpu_model", ""},
      {"command", "python train.py"},
      {"env", json::object()},
      {"timeout_seconds", 0},
      {"image", ""},
      {"status", "running"},
      {"node_id", "node-1"},
      {"allocated_gpus", {"node-1-gpu-2", "node-1-gpu-3"}},
      {"allocation", {{{"node_id", "node-1"}, {"gpu_indices", {2, 3}}, {"cpu_set", nullptr}}}},
      {"pending_reason", nullptr},
      {"pending_detail", nullptr},
      {"attempts", 1},
      {"exit_code", nullptr},
      {"error", ""},
      {"created_at", "2023-11-14T22:13:20Z"},
      {"started_at", "2023-11-14T22:13:21.500Z"},
      {"finished_at", nullptr},
      {"team", "vision"},
      {"user", "alice"},
      {"preemptible", true},
      {"preemption_grace_seconds", 10},
      {"borrowed", true},
      {"preemptions", 3},
      {"array_index", nullptr},
      {"array_size", nullptr},
      {"max_retries", 0},
      {"retry_backoff_seconds", 10},
      {"retries", 0},
      {"retry_at", nullptr},
      {"nodes", 1},
      {"gpus_per_node", 2},
      {"master_port", nullptr},
      {"cpus", nullptr},
      {"memory_mb", nullptr},
      {"cpu_set", nullptr},
      {"usage", nullptr},
      {"node_selector", nlohmann::json::object()},
      {"depends_on", nlohmann::json::array()},
  };
  // The whole object: preempted_by is the core's (and the agent's) business, not the API's.
  EXPECT_EQ(TaskToJson(RunningTask(), core::PendingReason::kNone), expected);
  // Bound to CPUs: rank 0's at the top, each member's in its entry.
  core::Task bound = RunningTask();
  bound.allocation[0].cpu_set = {4, 5};
  const json j = TaskToJson(bound, core::PendingReason::kNone);
  EXPECT_EQ(j["cpu_set"], json({4, 5}));
  EXPECT_EQ(j["allocation"][0]["cpu_set"], json({4, 5}));
}

TEST(ApiJsonTest, TaskIsBorrowedOnlyWhileItRuns) {
  core::Task t = RunningTask();
  t.borrowed = false;
  EXPECT_EQ(TaskToJson(t, core::PendingReason::kNone)["borrowed"], false);

  // Stopping for its preemption, it still runs on borrowed GPUs.
  t = RunningTask();
  t.stopping = true;
  t.stop_reason = core::StopReason::kPreempt;
  EXPECT_EQ(TaskToJson(t, core::PendingReason::kNone)["borrowed"], true);

  // Back in the queue after a preemption: a stale flag is not shown.
  t = RunningTask();
  t.status = core::TaskStatus::kPending;
  t.allocation.clear();
  json pending = TaskToJson(t, core::PendingReason::kQuotaExhausted);
  EXPECT_EQ(pending["borrowed"], false);
  EXPECT_EQ(pending["preemptions"], 3);
  EXPECT_EQ(pending["pending_reason"], "quota_exhausted");
  EXPECT_EQ(pending["node_id"], nullptr);

  for (core::TaskStatus finished :
       {core::TaskStatus::kSuccess, core::TaskStatus::kFailed, core::TaskStatus::kCancelled}) {
    t = RunningTask();
    t.status = finished;
    t.finished_at = kT0 + 2'000'000;
    EXPECT_EQ(TaskToJson(t, core::PendingReason::kNone)["borrowed"], false)
        << core::ToString(finished);
  }
}

TEST(ApiJsonTest, TaskObjectShowsTheDefaultsOfASubmissionWithoutTeamFields) {
  core::Task t;
  t.id = 1;
  t.spec.command = "true";
  json j = TaskToJson(t, core::PendingReason::kWaitingForPreemption);
  EXPECT_EQ(j["team"], "default");
  EXPECT_EQ(j["user"], "");
  EXPECT_EQ(j["preemptible"], true);
  EXPECT_EQ(j["preemption_grace_seconds"], -1);
  EXPECT_EQ(j["borrowed"], false);
  EXPECT_EQ(j["preemptions"], 0);
  EXPECT_EQ(j["pending_reason"], "waiting_for_preemption");
  t.spec.preemptible = false;
  EXPECT_EQ(TaskToJson(t, core::PendingReason::kTeamLimit)["preemptible"], false);
  EXPECT_EQ(TaskToJson(t, core::PendingReason::kTeamLimit)["pending_reason"], "team_limit");
}

TEST(ApiJsonTest, TeamObjectHasBothClassesAndNullForNoCap) {
  core::TeamView v;
  v.name = "vision";
  v.configured = true;
  v.limits = {16, 8, 64, 2.5, 86400};
  v.classes[0] = {16, 20, 4};
  v.classes[1] = {6, 3, 0};
  v.pending = 5;
  v.usage = 1234.5;
  EXPECT_EQ(TeamToJson(v), (json{
                               {"name", "vision"},
                               {"configured", true},
                               {"online", {{"guaranteed", 16}, {"used", 20}, {"borrowed", 4}}},
                               {"batch", {{"guaranteed", 6}, {"used", 3}, {"borrowed", 0}}},
                               {"max_gpus", 64},
                               {"weight", 2.5},
                               {"default_time_limit", 86400},
                               {"pending", 5},
                               {"usage_gpu_seconds", 1234.5},
                           }));

  core::TeamView open;
  open.name = "default";
  EXPECT_EQ(TeamToJson(open), (json{
                                  {"name", "default"},
                                  {"configured", false},
                                  {"online", {{"guaranteed", 0}, {"used", 0}, {"borrowed", 0}}},
                                  {"batch", {{"guaranteed", 0}, {"used", 0}, {"borrowed", 0}}},
                                  {"max_gpus", nullptr},
                                  {"weight", 1.0},
                                  {"default_time_limit", nullptr},
                                  {"pending", 0},
                                  {"usage_gpu_seconds", 0.0},
                              }));
  core::TeamView capped_at_zero = open;
  capped_at_zero.limits.max_gpus = 0;
  EXPECT_EQ(TeamToJson(capped_at_zero)["max_gpus"], 0);
}

TEST(ApiJsonTest, QuotaObjectAddsBorrowedAndLentPerClass) {
  core::QuotaView q;
  q.total_gpus = 10;
  q.quota[0] = 7;
  q.quota[1] = 3;
  q.used[0] = 2;
  q.used[1] = 8;
  q.borrowed[0] = 0;
  q.borrowed[1] = 5;
  q.lent[0] = 5;
  q.lent[1] = 0;
  EXPECT_EQ(
      QuotaToJson(q),
      (json{
          {"total_gpus", 10},
          {"online", {{"quota", 7}, {"used", 2}, {"available", 5}, {"borrowed", 0}, {"lent", 5}}},
          {"batch", {{"quota", 3}, {"used", 8}, {"available", 0}, {"borrowed", 5}, {"lent", 0}}}}));
  const core::QuotaView empty;
  EXPECT_EQ(
      QuotaToJson(empty),
      (json{
          {"total_gpus", 0},
          {"online", {{"quota", 0}, {"used", 0}, {"available", 0}, {"borrowed", 0}, {"lent", 0}}},
          {"batch", {{"quota", 0}, {"used", 0}, {"available", 0}, {"borrowed", 0}, {"lent", 0}}}}));
}

TEST(ApiJsonTest, QuotaTeamsListEachClassesTeamsWithAGuaranteeOrGpus) {
  core::TeamView vision;
  vision.name = "vision";
  vision.classes[0] = {.guaranteed = 4, .used = 0, .borrowed = 0};
  vision.classes[1] = {.guaranteed = 0, .used = 3, .borrowed = 3};
  core::TeamView idle;  // Neither a guarantee nor GPUs: in no class.
  idle.name = "idle";
  json body = QuotaToJson(core::QuotaView{});
  AddQuotaTeams({idle, vision}, &body);
  EXPECT_EQ(body["online"]["teams"],
            (json{{"vision", {{"guaranteed", 4}, {"used", 0}, {"borrowed", 0}}}}));
  EXPECT_EQ(body["batch"]["teams"],
            (json{{"vision", {{"guaranteed", 0}, {"used", 3}, {"borrowed", 3}}}}));
  json none = QuotaToJson(core::QuotaView{});
  AddQuotaTeams({}, &none);
  EXPECT_EQ(none["online"]["teams"], json::object());
  EXPECT_EQ(none["batch"]["quota"], 0);
}

// --- PUT /teams/{name} ---------------------------------------------------------------------------

TEST(ApiJsonTest, TeamRequestReadsEveryFieldAndLeavesAbsentOnesUnset) {
  TeamRequest full;
  full.name = "vision";
  ASSERT_EQ(
      ParseTeamRequest(
          R"({"online": 16, "batch": 8, "max_gpus": 64, "weight": 2.5, "default_time_limit": 3600})",
          &full),
      std::nullopt);
  EXPECT_EQ(full.name, "vision") << "the name comes from the path";
  EXPECT_EQ(full.online, 16);
  EXPECT_EQ(full.batch, 8);
  EXPECT_EQ(full.max_gpus, 64);
  EXPECT_EQ(full.weight, 2.5);
  EXPECT_EQ(full.default_time_limit, 3600);
  TeamRequest no_limit;
  ASSERT_EQ(ParseTeamRequest(R"({"default_time_limit": null})", &no_limit), std::nullopt);
  EXPECT_EQ(no_limit.default_time_limit, 0) << "null removes the team's default";

  TeamRequest none;
  ASSERT_EQ(ParseTeamRequest("{}", &none), std::nullopt);
  EXPECT_EQ(none.online, std::nullopt);
  EXPECT_EQ(none.batch, std::nullopt);
  EXPECT_EQ(none.max_gpus, std::nullopt);
  EXPECT_EQ(none.weight, std::nullopt);
  EXPECT_EQ(none.default_time_limit, std::nullopt);

  // null: the default for online, batch and weight (left unset), but "no cap" for max_gpus.
  TeamRequest nulls;
  ASSERT_EQ(ParseTeamRequest(R"({"online": null, "batch": null, "max_gpus": null, "weight": null})",
                             &nulls),
            std::nullopt);
  EXPECT_EQ(nulls.online, std::nullopt);
  EXPECT_EQ(nulls.batch, std::nullopt);
  EXPECT_EQ(nulls.max_gpus, -1);
  EXPECT_EQ(nulls.weight, std::nullopt);

  TeamRequest bounds;
  ASSERT_EQ(ParseTeamRequest(R"({"online": 0, "batch": 16777216, "max_gpus": 0, "weight": 1e-9})",
                             &bounds),
            std::nullopt);
  EXPECT_EQ(bounds.online, 0);
  EXPECT_EQ(bounds.batch, 16'777'216);
  EXPECT_EQ(bounds.max_gpus, 0);
  EXPECT_EQ(bounds.weight, 1e-9);
  TeamRequest integer_weight;
  ASSERT_EQ(ParseTeamRequest(R"({"weight": 3})", &integer_weight), std::nullopt);
  EXPECT_EQ(integer_weight.weight, 3.0);
}

TEST(ApiJsonTest, TeamRequestRefusesEveryBadBodyNamingTheField) {
  const std::vector<Refusal> refusals = {
      {"", 400, "invalid_json",
       "malformed JSON at byte 1: syntax error while parsing value - unexpected end of input; "
       "expected '[', '{', or a literal"},
      {"[16]", 400, "invalid_json", "request body must be a JSON object"},
      {std::string(kMaxBodyBytes + 1, ' '), 413, "payload_too_large",
       "request body is 1048577 bytes; the limit is 1048576"},
      {R"({"gpus": 4})", 400, "unknown_field", "unknown field \"gpus\""},
      {R"({"name": "vision"})", 400, "unknown_field", "unknown field \"name\""},
      {R"({"online": "16"})", 400, "invalid_field", "online must be an integer, got string"},
      {R"({"online": -1})", 400, "invalid_field", "online must be between 0 and 16777216, got -1"},
      {R"({"online": 16777217})", 400, "invalid_field", "online must be between 0 and 16777216"},
      {R"({"batch": 1.5})", 400, "invalid_field",
       "batch must be an integer, got a non-integer number"},
      {R"({"batch": true})", 400, "invalid_field", "batch must be an integer, got boolean"},
      {R"({"batch": -8})", 400, "invalid_field", "batch must be between 0 and 16777216, got -8"},
      // No cap is null, not -1.
      {R"({"max_gpus": -1})", 400, "invalid_field",
       "max_gpus must be between 0 and 16777216, got -1"},
      {R"({"max_gpus": "none"})", 400, "invalid_field", "max_gpus must be an integer, got string"},
      {R"({"max_gpus": 99999999999})", 400, "invalid_field",
       "max_gpus must be between 0 and 16777216"},
      {R"({"weight": 0})", 400, "invalid_field", "weight must be a number above 0"},
      {R"({"default_time_limit": -1})", 400, "invalid_field",
       "default_time_limit must be between 0 and 315360000, got -1"},
      {R"({"default_time_limit": "2h"})", 400, "invalid_field",
       "default_time_limit must be an integer, got string"},
      {R"({"weight": -0.5})", 400, "invalid_field", "weight must be a number above 0"},
      {R"({"weight": "2"})", 400, "invalid_field", "weight must be a number above 0"},
      {R"({"weight": false})", 400, "invalid_field", "weight must be a number above 0"},
      {R"({"weight": [1]})", 400, "invalid_field", "weight must be a number above 0"},
  };
  for (const Refusal& r : refusals) {
    TeamRequest request;
    request.name = "vision";
    ExpectRefusal(ParseTeamRequest(r.body, &request), r);
    EXPECT_EQ(request.name, "vision") << r.message;
  }
}

TEST(ApiJsonTest, ErrorBodyIsTheContractsEnvelopeEvenForInvalidUtf8) {
  EXPECT_EQ(InvalidField("gpu_count is required").Body(),
            R"({"error":{"code":"invalid_field","message":"gpu_count is required"}})");
  EXPECT_EQ((ApiError{404, "not_found", "task \xff"}).Body(),
            "{\"error\":{\"code\":\"not_found\",\"message\":\"task \xEF\xBF\xBD\"}}");
}

TEST(ApiJsonTest, AcceptsDeflateReadsTheAcceptEncodingList) {
  EXPECT_TRUE(AcceptsDeflate("deflate"));
  EXPECT_TRUE(AcceptsDeflate("gzip, deflate, br, zstd"));  // What Chromium sends.
  EXPECT_TRUE(AcceptsDeflate("gzip;q=1.0, Deflate;q=0.5"));
  EXPECT_TRUE(AcceptsDeflate(" deflate ; q=0.1"));
  EXPECT_FALSE(AcceptsDeflate(""));
  EXPECT_FALSE(AcceptsDeflate("gzip, br"));
  EXPECT_FALSE(AcceptsDeflate("deflate;q=0"));
  EXPECT_FALSE(AcceptsDeflate("x-deflate, deflater"));
  EXPECT_FALSE(AcceptsDeflate(",,;"));
}

TEST(ApiJsonTest, LogQueryReadsEachParameter) {
  LogQuery q;
  ASSERT_EQ(ParseLogQuery("", &q), std::nullopt);
  EXPECT_EQ(q.tail, std::nullopt);
  EXPECT_FALSE(q.follow);
  EXPECT_EQ(q.rank, 0);
  EXPECT_EQ(q.offset, 0);
  ASSERT_EQ(ParseLogQuery("tail=20&follow=true&rank=3", &q), std::nullopt);
  EXPECT_EQ(q.tail, 20);
  EXPECT_TRUE(q.follow);
  EXPECT_EQ(q.rank, 3);
  LogQuery resume;
  ASSERT_EQ(ParseLogQuery("offset=4096&follow=0", &resume), std::nullopt);
  EXPECT_EQ(resume.offset, 4096);
  EXPECT_FALSE(resume.follow);
  LogQuery zero;
  ASSERT_EQ(ParseLogQuery("tail=0&follow=1", &zero), std::nullopt);
  EXPECT_EQ(zero.tail, 0);
}

TEST(ApiJsonTest, LogQueryRefusesBadValuesNamingTheParameter) {
  struct Case {
    const char* query;
    const char* code;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"tail=-1", "invalid_field",
            "tail must be an integer from 0 to 1000000 (lines); got \"-1\""},
           {"tail=1000001", "invalid_field",
            "tail must be an integer from 0 to 1000000 (lines); got \"1000001\""},
           {"follow=yes", "invalid_field", "follow must be true or false; got \"yes\""},
           {"rank=x", "invalid_field", "rank must be an integer from 0 to 100000; got \"x\""},
           {"offset=-5", "invalid_field", "offset must be a non-negative integer; got \"-5\""},
           {"tail=5&offset=10", "invalid_field",
            "tail and offset cannot be combined: each says where the log starts"},
           {"since=1", "unknown_field", "unknown query parameter \"since\""},
       }) {
    LogQuery q;
    std::optional<ApiError> e = ParseLogQuery(c.query, &q);
    ASSERT_TRUE(e.has_value()) << c.query;
    EXPECT_EQ(e->http_status, 400) << c.query;
    EXPECT_EQ(e->code, c.code) << c.query;
    EXPECT_EQ(e->message, c.message) << c.query;
  }
}

// The task object is derived from the field table: its keys are the table's shown fields and
// kTaskApiKeys, and the OpenAPI description (from which the Python client's model is checked,
// tests/client/test_models.py) lists exactly those, all required.
TEST(ApiJsonTest, TheTaskObjectTheTableAndTheOpenApiDescriptionAgree) {
  std::set<std::string> from_table(std::begin(kTaskApiKeys), std::end(kTaskApiKeys));
  core::ForEachTaskField([&](int, const auto& field) {
    if (field.info.api != core::ApiForm::kHidden) from_table.insert(std::string(field.info.name));
  });
  const json task_object = TaskToJson(store::testing::FullTask(3), core::PendingReason::kNone);
  std::set<std::string> shown;
  for (const auto& [key, value] : task_object.items()) shown.insert(key);
  EXPECT_EQ(shown, from_table);

  const YAML::Node task = YAML::Load(std::string(OpenApiYaml()))["components"]["schemas"]["Task"];
  ASSERT_TRUE(task.IsMap());
  std::set<std::string> described, required;
  for (const auto& property : task["properties"])
    described.insert(property.first.as<std::string>());
  for (const auto& name : task["required"]) required.insert(name.as<std::string>());
  EXPECT_EQ(described, from_table) << "api/openapi.yaml's Task and the task table disagree";
  EXPECT_EQ(required, from_table);
}

TEST(ApiJsonTest, TheTaskObjectShowsTimesAsTextAndUnsetArrayFieldsAsNull) {
  core::Task task = store::testing::FullPendingTask(4);
  task.started_at = 0;
  json j = TaskToJson(task, core::PendingReason::kRetryBackoff);
  EXPECT_EQ(j["task_id"], "task-4");
  EXPECT_EQ(j["created_at"], "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(j["started_at"], nullptr);
  EXPECT_EQ(j["retry_at"], "2023-11-14T22:13:23Z");
  EXPECT_EQ(j["array_index"], 1);
  EXPECT_EQ(j["env"]["B"], "2");
  EXPECT_EQ(j["pending_reason"], "retry_backoff");
  EXPECT_EQ(j["pending_detail"], nullptr);  // Only GET /tasks/{id} explains.
  EXPECT_EQ(TaskToJson(task, core::PendingReason::kNoNodeFits, "0 of 1 node can take it")
                .at("pending_detail"),
            "0 of 1 node can take it");
  EXPECT_EQ(j["node_id"], nullptr);
  EXPECT_EQ(j["exit_code"], nullptr);
  EXPECT_EQ(j["borrowed"], false);  // Only a running task shows that it borrows.
  EXPECT_EQ(j.count("queue_seq") + j.count("stopping") + j.count("preempted_by"), 0u);
  task.spec.array_index = -1;
  task.spec.array_size = 0;
  j = TaskToJson(task, core::PendingReason::kNone);
  EXPECT_EQ(j["array_index"], nullptr);
  EXPECT_EQ(j["array_size"], nullptr);
  EXPECT_EQ(j["pending_reason"], nullptr);
}

}  // namespace
}  // namespace dgpu::scheduler
