#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "common/time_util.h"

namespace dgpu::common {
namespace {

using nlohmann::ordered_json;

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("dgpu_logging_test_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "out.log").string();
  }

  void TearDown() override {
    // Release the file before it is removed.
    ASSERT_TRUE(SetupLogging({LogLevel::kError, LogFormat::kText, "stderr"}, "test").ok());
    std::filesystem::remove_all(dir_);
  }

  void Setup(LogLevel level, LogFormat format, std::string_view component) {
    const Status status = SetupLogging({level, format, path_}, component);
    ASSERT_TRUE(status.ok()) << status.ToString();
  }

  std::vector<std::string> ReadLines() {
    FlushLogs();
    std::ifstream in(path_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  // Parses every line as one JSON object, keeping key order.
  std::vector<ordered_json> ReadJsonLines() {
    std::vector<ordered_json> objects;
    for (const std::string& line : ReadLines()) {
      ordered_json object = ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
      EXPECT_TRUE(object.is_object()) << "not a JSON object: " << line;
      objects.push_back(std::move(object));
    }
    return objects;
  }

  static std::vector<std::string> Keys(const ordered_json& object) {
    std::vector<std::string> keys;
    for (const auto& item : object.items()) keys.push_back(item.key());
    return keys;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(LoggingTest, JsonEventLineHasTheContractFieldsInOrder) {
  Setup(LogLevel::kInfo, LogFormat::kJson, "scheduler");
  const int64_t before = NowMicros();
  LogEvent(events::kTaskScheduled, {{"task_id", "task-3"}, {"node", "n1"}, {"gpus", "0,1"}});
  const int64_t after = NowMicros();

  const std::vector<std::string> lines = ReadLines();
  ASSERT_EQ(lines.size(), 1u);
  const std::regex shape(
      R"(^\{"ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z","level":"info","component":"scheduler",)"
      R"("event":"task_scheduled","task_id":"task-3","node":"n1","gpus":"0,1"\}$)");
  EXPECT_TRUE(std::regex_match(lines[0], shape)) << lines[0];

  const std::vector<ordered_json> objects = ReadJsonLines();
  ASSERT_EQ(objects.size(), 1u);
  const std::optional<int64_t> ts = ParseRfc3339(objects[0]["ts"].get<std::string>());
  ASSERT_TRUE(ts.has_value());
  EXPECT_GE(*ts, before / 1000 * 1000);
  EXPECT_LE(*ts, after);
}

TEST_F(LoggingTest, JsonValuesAreTypedAndEscaped) {
  Setup(LogLevel::kDebug, LogFormat::kJson, "agent");
  Log(LogLevel::kWarn, "disk \"almost\" full\n\tsoon \\ now",
      {{"free_mb", 12},
       {"ratio", 0.5},
       {"ok", false},
       {"count", uint64_t{18446744073709551615u}},
       {"neg", -3},
       {"ctl", std::string("a\x01z")},
       {"utf8", "gr\xC3\xBC\xC3\x9F"},
       {"bad_utf8", "x\xFFy"},
       {"level", "shadow"}});
  LogEvent("agent_offline", {{"node", "n2"}}, LogLevel::kError);
  LogEvent("debug_event", {}, LogLevel::kDebug);

  const std::vector<ordered_json> objects = ReadJsonLines();
  ASSERT_EQ(objects.size(), 3u);
  const ordered_json& warn = objects[0];
  EXPECT_EQ(Keys(warn),
            (std::vector<std::string>{"ts", "level", "component", "msg", "free_mb", "ratio", "ok",
                                      "count", "neg", "ctl", "utf8", "bad_utf8", "_level"}));
  EXPECT_EQ(warn["level"], "warn");
  EXPECT_EQ(warn["component"], "agent");
  EXPECT_EQ(warn["msg"], "disk \"almost\" full\n\tsoon \\ now");
  EXPECT_EQ(warn["free_mb"], 12);
  EXPECT_EQ(warn["ratio"], 0.5);
  EXPECT_EQ(warn["ok"], false);
  EXPECT_EQ(warn["count"], uint64_t{18446744073709551615u});
  EXPECT_EQ(warn["neg"], -3);
  EXPECT_EQ(warn["ctl"], "a\x01z");
  EXPECT_EQ(warn["utf8"], "gr\xC3\xBC\xC3\x9F");
  EXPECT_EQ(warn["bad_utf8"], "x\xEF\xBF\xBDy");  // U+FFFD
  EXPECT_EQ(warn["_level"], "shadow");

  EXPECT_EQ(objects[1]["level"], "error");
  EXPECT_EQ(objects[1]["event"], "agent_offline");
  EXPECT_EQ(objects[2]["level"], "debug");
  EXPECT_EQ(Keys(objects[2]), (std::vector<std::string>{"ts", "level", "component", "event"}));
}

TEST_F(LoggingTest, PlainSpdlogCallsUseTheSameFormat) {
  Setup(LogLevel::kInfo, LogFormat::kJson, "scheduler");
  spdlog::info("listening on {}", ":8080");
  const std::vector<ordered_json> objects = ReadJsonLines();
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_EQ(Keys(objects[0]), (std::vector<std::string>{"ts", "level", "component", "msg"}));
  EXPECT_EQ(objects[0]["msg"], "listening on :8080");
}

TEST_F(LoggingTest, ReopenAfterTheFileWasMovedWritesToANewFileAtThePath) {
  Setup(LogLevel::kInfo, LogFormat::kText, "scheduler");
  spdlog::info("before the rotation");
  const std::string rotated = path_ + ".1";
  std::filesystem::rename(path_, rotated);  // What logrotate does before it signals.
  spdlog::info("after the move, before the reopen");
  ASSERT_TRUE(ReopenLogs().ok());
  spdlog::info("after the reopen");
  FlushLogs();

  std::vector<std::string> now = ReadLines();
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0].find("after the reopen"), std::string::npos) << now[0];
  std::ifstream old(rotated);
  std::vector<std::string> before;
  for (std::string line; std::getline(old, line);) before.push_back(line);
  ASSERT_EQ(before.size(), 2u);
  EXPECT_NE(before[0].find("before the rotation"), std::string::npos) << before[0];
  EXPECT_NE(before[1].find("after the move, before the reopen"), std::string::npos) << before[1];
}

TEST_F(LoggingTest, ReopenThatCannotOpenKeepsThePreviousFile) {
  Setup(LogLevel::kInfo, LogFormat::kText, "scheduler");
  spdlog::info("one");
  const std::string rotated = path_ + ".1";
  std::filesystem::rename(path_, rotated);
  std::filesystem::create_directory(path_);  // Nothing can open it as a file, not even root.
  const Status status = ReopenLogs();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("cannot reopen the log file \"" + path_ + "\""),
            std::string::npos)
      << status.message();
  spdlog::info("two");  // Still written, to the file in use.
  FlushLogs();
  std::ifstream old(rotated);
  std::vector<std::string> lines;
  for (std::string line; std::getline(old, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("two"), std::string::npos) << lines[1];
}

TEST_F(LoggingTest, ReopenWithoutAFileDoesNothing) {
  ASSERT_TRUE(SetupLogging({LogLevel::kInfo, LogFormat::kText, "stderr"}, "test").ok());
  EXPECT_TRUE(ReopenLogs().ok());
}

TEST_F(LoggingTest, LevelFiltersLines) {
  Setup(LogLevel::kWarn, LogFormat::kJson, "scheduler");
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug));
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kWarn));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  LogEvent("dropped", {{"a", 1}});
  Log(LogLevel::kDebug, "dropped too");
  LogEvent("kept", {}, LogLevel::kWarn);
  const std::vector<ordered_json> objects = ReadJsonLines();
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_EQ(objects[0]["event"], "kept");
}

TEST_F(LoggingTest, TextFormatIsHumanReadable) {
  Setup(LogLevel::kInfo, LogFormat::kText, "scheduler");
  LogEvent(events::kTaskScheduled, {{"task_id", "task-3"}, {"node", "n1"}, {"gpus", "0,1"}});
  Log(LogLevel::kError, "start failed", {{"cmd", "echo \"hi\" there"}, {"empty", ""}, {"n", 2}});
  Log(LogLevel::kWarn, "line one\nline two");

  const std::vector<std::string> lines = ReadLines();
  ASSERT_EQ(lines.size(), 3u);
  const std::string ts = R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)";
  EXPECT_TRUE(std::regex_match(
      lines[0], std::regex("^" + ts +
                           R"( info  \[scheduler\] event=task_scheduled task_id=task-3 node=n1 )"
                           R"(gpus=0,1$)")))
      << lines[0];
  EXPECT_TRUE(std::regex_match(
      lines[1], std::regex("^" + ts +
                           R"( error \[scheduler\] start failed cmd="echo \\"hi\\" there" )"
                           R"(empty="" n=2$)")))
      << lines[1];
  EXPECT_TRUE(std::regex_match(
      lines[2], std::regex("^" + ts + R"( warn  \[scheduler\] line one\\nline two$)")))
      << lines[2];
}

TEST_F(LoggingTest, FileOutputAppends) {
  std::ofstream(path_) << "existing line\n";
  Setup(LogLevel::kInfo, LogFormat::kJson, "scheduler");
  LogEvent("leader_elected", {{"epoch", 4}});
  const std::vector<std::string> lines = ReadLines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "existing line");
  EXPECT_EQ(ordered_json::parse(lines[1])["epoch"], 4);
}

TEST_F(LoggingTest, UnopenableFileIsAnError) {
  const std::string blocker = (dir_ / "a_file").string();
  std::ofstream(blocker) << "x";
  const std::string bad_path = blocker + "/out.log";  // parent is a regular file
  const Status status = SetupLogging({LogLevel::kInfo, LogFormat::kJson, bad_path}, "scheduler");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message().rfind("logging.output: cannot open \"" + bad_path + "\": ", 0), 0u)
      << status.message();
}

TEST(LogEventNamesTest, MatchTheContract) {
  EXPECT_EQ(events::kTaskSubmitted, "task_submitted");
  EXPECT_EQ(events::kTaskScheduled, "task_scheduled");
  EXPECT_EQ(events::kTaskFinished, "task_finished");
  EXPECT_EQ(events::kAgentRegistered, "agent_registered");
  EXPECT_EQ(events::kAgentOffline, "agent_offline");
  EXPECT_EQ(events::kLeaderElected, "leader_elected");
  EXPECT_EQ(events::kLeaderLost, "leader_lost");
}

}  // namespace
}  // namespace dgpu::common
