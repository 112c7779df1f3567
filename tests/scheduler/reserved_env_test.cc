// A task's env may not give a name the agent sets or any DGPU_ name: the REST API parses such a
// request, and the application refuses it, naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/task_env.h"
#include "scheduler/api_json.h"
#include "scheduler/application.h"

namespace dgpu::scheduler {
namespace {

std::string SubmitBodyWithEnv(std::string_view name) {
  nlohmann::json body = {{"priority", "low"}, {"gpu_count", 1}, {"command", "true"}};
  body["env"] = {{"FOO", "bar"}, {std::string(name), "spoofed"}};
  return body.dump();
}

void ExpectRefused(std::string_view name) {
  core::TaskSpec spec;
  ASSERT_FALSE(ParseSubmitRequest(SubmitBodyWithEnv(name), &spec).has_value()) << name;
  std::optional<Error> error = ValidateTaskSpec(spec);
  ASSERT_TRUE(error.has_value()) << name << " was accepted";
  EXPECT_EQ(error->code, ErrorCode::kInvalidArgument) << name;
  EXPECT_EQ(error->field, "env." + std::string(name));
  EXPECT_EQ(error->message,
            "env." + std::string(name) + " is set by dgpu for GPU isolation and cannot be given");
}

TEST(ReservedEnvTest, EveryNameTheAgentSetsIsRefused) {
  for (std::string_view name : common::kTaskEnvSetByDgpu) ExpectRefused(name);
}

TEST(ReservedEnvTest, AnyDgpuNameIsRefused) {
  ExpectRefused("DGPU_FUTURE_NAME");
  ExpectRefused("DGPU_");
}

TEST(ReservedEnvTest, SimilarNamesAreAccepted) {
  for (std::string_view name : {"CUDA_HOME", "CUDA_VISIBLE_DEVICES_X", "dgpu_task_id", "DGPU"}) {
    core::TaskSpec spec;
    std::optional<ApiError> error = ParseSubmitRequest(SubmitBodyWithEnv(name), &spec);
    ASSERT_FALSE(error.has_value()) << name << ": " << error->message;
    std::optional<Error> refused = ValidateTaskSpec(spec);
    EXPECT_FALSE(refused.has_value()) << name << ": " << refused->message;
    ASSERT_EQ(spec.env.size(), 2u) << name;
  }
}

}  // namespace
}  // namespace dgpu::scheduler
