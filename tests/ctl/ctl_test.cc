// dgpuctl command logic, driven through its command line with an in-memory HTTP client.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/time_util.h"
#include "ctl/cli.h"
#include "ctl/commands.h"
#include "ctl/format.h"
#include "fake_http_client.h"

namespace dgpu::ctl {
namespace {

using std::chrono::milliseconds;
using Method = HttpMethod;

constexpr char kBase[] = "http://127.0.0.1:8080/api/v1";

std::string Url(const std::string& path) { return kBase + path; }

// Forwards to a FakeHttpClient owned by the test.
class ForwardingClient : public HttpClient {
 public:
  explicit ForwardingClient(HttpClient* target) : target_(target) {}
  HttpResult Send(HttpMethod method, const std::string& url, const std::string& body) override {
    return target_->Send(method, url, body);
  }

 private:
  HttpClient* target_;
};

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

class CtlTest : public ::testing::Test {
 protected:
  Outcome Run(std::vector<std::string> args) {
    args.insert(args.begin(), "dgpuctl");
    std::vector<const char*> argv;
    for (const std::string& arg : args) argv.push_back(arg.c_str());
    std::ostringstream out;
    std::ostringstream err;
    CliDeps deps;
    deps.make_http = [this](milliseconds timeout) {
      http_timeout_ = timeout;
      return std::make_unique<ForwardingClient>(&http_);
    };
    deps.getenv = [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
    deps.now = [this] { return now_; };
    deps.monotonic_now = [this] { return monotonic_; };
    deps.sleep = [this](milliseconds duration) {
      sleeps_.push_back(duration);
      monotonic_ += duration;
    };
    deps.out = &out;
    deps.err = &err;
    int code = RunCtl(static_cast<int>(argv.size()), argv.data(), deps);
    return {code, out.str(), err.str()};
  }

  FakeHttpClient http_;
  std::map<std::string, std::string> env_;
  std::chrono::system_clock::time_point now_ =
      *common::ParseRfc3339TimePoint("2024-05-01T12:00:00Z");
  std::chrono::steady_clock::time_point monotonic_{};
  std::vector<milliseconds> sleeps_;
  milliseconds http_timeout_{0};
};

constexpr char kRunningTask[] =
    R"({"task_id":"task-1","status":"running","node_id":"node-a","exit_code":null})";

TEST_F(CtlTest, SubmitPostsTheContractBodyAndPrintsTheId) {
  http_.Answer(Method::kPost, Url("/tasks"), 201,
               R"({"task_id":"task-9","status":"pending","created_at":"2024-05-01T12:00:00Z"})");
  Outcome r =
      Run({"submit", "--gpus", "2",      "--priority", "high",  "--model",   "A100", "--name",
           "serve",  "--env",  "A=1",    "--env",      "B=x=y", "--timeout", "2h",   "--image",
           "img",    "--",     "python", "serve.py",   "--msg", "a b",       "$HOME"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "task-9\n");
  EXPECT_EQ(r.err, "");
  ASSERT_EQ(http_.requests().size(), 1u);
  EXPECT_EQ(http_.requests()[0].body,
            R"({"command":"python serve.py --msg 'a b' '$HOME'","env":{"A":"1","B":"x=y"},)"
            R"("gpu_count":2,"gpu_model":"A100","image":"img","name":"serve","priority":"high",)"
            R"("timeout_seconds":7200})");
}

TEST_F(CtlTest, SubmitSendsOnlyGivenFieldsAndAcceptsPlainSeconds) {
  http_.Answer(Method::kPost, Url("/tasks"), 201, R"({"task_id":"task-2","status":"pending"})");
  Outcome r = Run(
      {"submit", "--gpus", "1", "--priority", "low", "--timeout", "90", "--", "echo hi > out.txt"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(http_.requests()[0].body,
            R"({"command":"echo hi > out.txt","gpu_count":1,"priority":"low",)"
            R"("timeout_seconds":90})");
}

TEST_F(CtlTest, SubmitJsonOutputPrintsTheResponse) {
  http_.Answer(Method::kPost, Url("/tasks"), 201,
               R"({"task_id":"task-9","status":"pending","created_at":"2024-05-01T12:00:00Z"})");
  Outcome r = Run({"-o", "json", "submit", "--gpus", "1", "--priority", "low", "--", "true"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out,
            "{\n  \"created_at\": \"2024-05-01T12:00:00Z\",\n  \"status\": \"pending\",\n"
            "  \"task_id\": \"task-9\"\n}\n");
}

TEST_F(CtlTest, SubmitRejectsBadOptionsWithoutCallingTheServer) {
  EXPECT_EQ(Run({"submit", "--gpus", "1", "--priority", "low"}).code, kExitUsage);
  EXPECT_EQ(Run({"submit", "--gpus", "1", "--priority", "urgent", "--", "x"}).code, kExitUsage);
  EXPECT_EQ(Run({"submit", "--priority", "low", "--", "x"}).code, kExitUsage);
  Outcome env = Run({"submit", "--gpus", "1", "--priority", "low", "--env", "NOVALUE", "--", "x"});
  EXPECT_EQ(env.code, kExitUsage);
  EXPECT_EQ(env.err, "error: --env expects KEY=VALUE, got 'NOVALUE'\n");
  Outcome timeout =
      Run({"submit", "--gpus", "1", "--priority", "low", "--timeout", "10x", "--", "x"});
  EXPECT_EQ(timeout.code, kExitUsage);
  EXPECT_TRUE(http_.requests().empty());
}

TEST_F(CtlTest, ServerComesFromFlagThenEnvironmentThenDefault) {
  http_.Answer(Method::kGet, "http://10.0.0.5:8080/api/v1/quota", 200, "{}");
  http_.Answer(Method::kGet, "http://env-host:9000/api/v1/quota", 200, "{}");
  EXPECT_EQ(Run({"--server", "http://10.0.0.5:8080/", "quota"}).code, kExitOk);
  env_["DGPU_SERVER"] = "http://env-host:9000";
  EXPECT_EQ(Run({"quota"}).code, kExitOk);
  EXPECT_EQ(Run({"quota", "--server", "10.0.0.5:8080"}).code, kExitOk);
  ASSERT_EQ(http_.requests().size(), 3u);
  EXPECT_EQ(http_.requests()[0].url, "http://10.0.0.5:8080/api/v1/quota");
  EXPECT_EQ(http_.requests()[1].url, "http://env-host:9000/api/v1/quota");
  EXPECT_EQ(http_.requests()[2].url, "http://10.0.0.5:8080/api/v1/quota");
}

TEST_F(CtlTest, RequestTimeoutIsGlobalAndDistinctFromWaitTimeout) {
  http_.Answer(Method::kGet, Url("/gpus"), 200, R"({"gpus":[]})");
  Run({"get", "gpus"});
  EXPECT_EQ(http_timeout_, milliseconds(10'000));
  Run({"--timeout", "3s", "get", "gpus"});
  EXPECT_EQ(http_timeout_, milliseconds(3'000));
  Run({"get", "gpus", "--timeout", "4"});
  EXPECT_EQ(http_timeout_, milliseconds(4'000));

  http_.Answer(Method::kGet, Url("/tasks/task-1"), 200, kRunningTask);
  Outcome r =
      Run({"wait", "task-1", "--request-timeout", "5", "--timeout", "1", "--interval", "400ms"});
  EXPECT_EQ(http_timeout_, milliseconds(5'000));
  EXPECT_EQ(r.code, kExitWaitTimeout);
}

TEST_F(CtlTest, GetTasksPassesFiltersAsQuery) {
  http_.Answer(Method::kGet, Url("/tasks?status=pending&priority=low&limit=5&offset=10"), 200,
               R"({"tasks":[],"total":0})");
  Outcome r = Run({"get", "tasks", "--status", "pending", "--priority", "low", "--limit", "5",
                   "--offset", "10"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "no tasks found\n");
}

TEST_F(CtlTest, GetTasksTableWideAndWithoutHeaders) {
  http_.Answer(Method::kGet, Url("/tasks"), 200, R"({"tasks":[
    {"task_id":"task-2","name":"","priority":"low","gpu_count":8,"status":"pending",
     "node_id":"","pending_reason":"no_node_fits","created_at":"2024-05-01T11:59:30Z",
     "allocated_gpus":[],"attempts":0,"exit_code":null,"command":"sh -c 'a\nb'"},
    {"task_id":"task-1","name":"train","priority":"high","gpu_count":2,"status":"failed",
     "node_id":"node-a","created_at":"2024-05-01T09:00:00Z","error":"",
     "allocated_gpus":["node-a-gpu-0","node-a-gpu-1"],"attempts":2,"exit_code":137,
     "command":"python t.py"}],"total":2})");
  EXPECT_EQ(Run({"get", "tasks"}).out,
            "ID      NAME   PRIORITY  GPUS  STATUS   NODE    AGE  REASON\n"
            "task-2  -      low       8     pending  -       30s  no_node_fits\n"
            "task-1  train  high      2     failed   node-a  3h   exit code 137\n");
  EXPECT_EQ(Run({"get", "tasks", "-o", "wide"}).out,
            "ID      NAME   PRIORITY  GPUS  STATUS   NODE    AGE  REASON         ALLOCATED"
            "                  ATTEMPTS  EXIT  COMMAND\n"
            "task-2  -      low       8     pending  -       30s  no_node_fits   -"
            "                          0         -     sh -c 'a\\nb'\n"
            "task-1  train  high      2     failed   node-a  3h   exit code 137  "
            "node-a-gpu-0,node-a-gpu-1  2         137   python t.py\n");
  // Without the header, the widths come from the rows alone.
  EXPECT_EQ(Run({"--no-headers", "get", "tasks"}).out,
            "task-2  -      low   8  pending  -       30s  no_node_fits\n"
            "task-1  train  high  2  failed   node-a  3h   exit code 137\n");
}

TEST_F(CtlTest, GetTasksTellsWhenMoreArePaged) {
  http_.Answer(Method::kGet, Url("/tasks?limit=1"), 200,
               R"({"tasks":[{"task_id":"task-9","status":"running"}],"total":3})");
  Outcome r = Run({"get", "tasks", "--limit", "1"});
  EXPECT_EQ(r.err, "showing tasks 1-1 of 3; use --limit and --offset to see more\n");
}

TEST_F(CtlTest, GetTasksNamesTheNextKeysetPage) {
  http_.Answer(Method::kGet, Url("/tasks?limit=1"), 200,
               R"({"tasks":[{"task_id":"task-9","status":"running"}],"total":3,"next":"task-9"})");
  Outcome r = Run({"get", "tasks", "--limit", "1"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.err, "showing tasks 1-1 of 3; the next page: --after task-9\n");

  http_.Answer(Method::kGet, Url("/tasks?limit=1&after=task-9"), 200,
               R"({"tasks":[{"task_id":"task-5","status":"pending"}],"total":3,"next":"task-5"})");
  r = Run({"get", "tasks", "--limit", "1", "--after", "task-9"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.err, "showing 1 of 3 tasks; the next page: --after task-5\n");

  // The last page says nothing more.
  http_.Answer(Method::kGet, Url("/tasks?limit=1&after=task-5"), 200,
               R"({"tasks":[{"task_id":"task-1","status":"pending"}],"total":3,"next":null})");
  r = Run({"get", "tasks", "--limit", "1", "--after", "task-5"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.err, "");
}

TEST_F(CtlTest, GetTasksRefusesAfterWithOffset) {
  Outcome r = Run({"get", "tasks", "--after", "task-9", "--offset", "2"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--offset excludes --after"), std::string::npos) << r.err;
}

// A file name in a fresh temporary directory.
class SnapshotCtlTest : public CtlTest {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dgpuctl-snapshot-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::vector<std::string> Files() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  std::filesystem::path dir_;
};

const std::string kSqliteBody = std::string("SQLite format 3\0rest of the file", 32);

TEST_F(SnapshotCtlTest, SavesTheFileAndSaysWhatItHolds) {
  http_.Answer(Method::kGet, Url("/snapshot"), 200, kSqliteBody,
               {{"x-dgpu-snapshot-tasks", "1200"},
                {"x-dgpu-snapshot-seq", "5120"},
                {"x-dgpu-snapshot-epoch", "3"}});
  Outcome r = Run({"snapshot", Path("backup.db")});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "saved a snapshot of 1200 tasks (journal seq 5120, epoch 3) to " +
                       Path("backup.db") + ", 32 bytes\n");
  EXPECT_EQ(Read(Path("backup.db")), kSqliteBody);
  EXPECT_EQ(Files(), std::vector<std::string>{"backup.db"});

  r = Run({"-o", "json", "snapshot", "--force", Path("backup.db")});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out), (nlohmann::json{{"path", Path("backup.db")},
                                                          {"bytes", 32},
                                                          {"tasks", 1200},
                                                          {"last_applied_seq", 5120},
                                                          {"epoch", 3}}));
}

TEST_F(SnapshotCtlTest, AnExistingFileIsKeptWithoutForce) {
  std::ofstream(Path("backup.db")) << "precious";
  Outcome r = Run({"snapshot", Path("backup.db")});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "error: " + Path("backup.db") + " exists; give --force to replace it\n");
  EXPECT_EQ(Read(Path("backup.db")), "precious");
  EXPECT_TRUE(http_.requests().empty());

  r = Run({"snapshot", dir_.string()});
  EXPECT_EQ(r.code, kExitUsage);
  r = Run({"snapshot", "--force", dir_.string()});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "error: " + dir_.string() + " is a directory; give the file to write\n");
  EXPECT_EQ(Run({"snapshot"}).code, kExitUsage);
}

TEST_F(SnapshotCtlTest, AnErrorAnswerOrABodyThatIsNotADatabaseLeavesNoFile) {
  std::ofstream(Path("backup.db")) << "precious";
  http_.Answer(
      Method::kGet, Url("/snapshot"), 503,
      R"({"error":{"code":"unavailable","message":"a snapshot is being taken; ask again once it is done"}})");
  // Queued answers are used in order.
  http_.Answer(Method::kGet, Url("/snapshot"), 200, "<html>a proxy's page</html>");
  Outcome r = Run({"snapshot", "--force", Path("backup.db")});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(
      r.err,
      "error: a snapshot is being taken; ask again once it is done (unavailable, HTTP 503)\n");
  EXPECT_EQ(Read(Path("backup.db")), "precious");
  EXPECT_EQ(Files(), std::vector<std::string>{"backup.db"});

  r = Run({"snapshot", "--force", Path("backup.db")});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_NE(r.err.find("the snapshot is not a SQLite database"), std::string::npos) << r.err;
  EXPECT_EQ(Read(Path("backup.db")), "precious");
  EXPECT_EQ(Files(), std::vector<std::string>{"backup.db"});

  http_.Unreachable("Connection refused");
  r = Run({"snapshot", Path("other.db")});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(Files(), std::vector<std::string>{"backup.db"});
}

TEST_F(CtlTest, GetTaskDescribesAPendingTask) {
  http_.Answer(Method::kGet, Url("/tasks/task-2"), 200, R"({"task_id":"task-2","name":"x",
    "priority":"low","gpu_count":4,"gpu_model":"H100","command":"run","env":{},
    "timeout_seconds":30,"image":"","status":"pending","node_id":"","allocated_gpus":[],
    "pending_reason":"quota_exhausted","attempts":0,"exit_code":null,"error":"",
    "created_at":"2024-05-01T11:58:00Z","started_at":null,"finished_at":null})");
  Outcome r = Run({"get", "task", "task-2"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out,
            "ID:              task-2\n"
            "Name:            x\n"
            "Priority:        low\n"
            "Status:          pending\n"
            "Pending Reason:  quota_exhausted\n"
            "GPUs:            4\n"
            "GPU Model:       H100\n"
            "Node:            -\n"
            "Allocated GPUs:  -\n"
            "Attempts:        0\n"
            "Exit Code:       -\n"
            "Error:           -\n"
            "Command:         run\n"
            "Image:           -\n"
            "Timeout:         30s\n"
            "Created:         2024-05-01T11:58:00Z (2m ago)\n"
            "Started:         -\n"
            "Finished:        -\n"
            "Env:             -\n");
  // `get tasks ID` is the same as `get task ID`.
  EXPECT_EQ(Run({"get", "tasks", "task-2"}).out, r.out);
}

TEST_F(CtlTest, ApiErrorsUseTheContractErrorBody) {
  http_.Answer(Method::kGet, Url("/tasks/nope"), 404,
               R"({"error":{"code":"not_found","message":"task nope not found"}})");
  Outcome r = Run({"get", "task", "nope"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: task nope not found (not_found, HTTP 404)\n");
}

TEST_F(CtlTest, NonContractErrorsStillGiveOneLine) {
  http_.Answer(Method::kGet, Url("/gpus"), 502, "Bad Gateway\n<html>...</html>");
  Outcome r = Run({"get", "gpus"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.err, "error: unexpected HTTP 502 from the scheduler: Bad Gateway\n");

  http_.Answer(Method::kGet, Url("/agents"), 200, "<html>");
  r = Run({"get", "agents"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.err,
            "error: invalid response from the scheduler: the body of GET /api/v1/agents is not "
            "JSON\n");

  http_.Answer(Method::kGet, Url("/quota"), 200, "[1,2]");
  EXPECT_EQ(Run({"quota"}).err,
            "error: invalid response from the scheduler: GET /api/v1/quota did not return an "
            "object\n");
}

TEST_F(CtlTest, StandbyNamesTheLeader) {
  http_.Answer(Method::kGet, Url("/quota"), 503,
               R"({"error":{"code":"unavailable","message":"not the leader"}})",
               {{"x-leader", "http://10.0.0.2:8080"}});
  Outcome r = Run({"quota"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.err, "error: this scheduler is a standby; the leader is at http://10.0.0.2:8080\n");

  http_.Answer(Method::kGet, Url("/gpus"), 503,
               R"({"error":{"code":"unavailable","message":"no leader elected yet"}})");
  EXPECT_EQ(Run({"get", "gpus"}).err, "error: no leader elected yet (unavailable, HTTP 503)\n");
}

TEST_F(CtlTest, UnreachableServer) {
  http_.Unreachable("Connection refused");
  Outcome r = Run({"--server", "http://10.1.1.1:8080", "get", "tasks"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.err,
            "error: cannot reach the scheduler at http://10.1.1.1:8080: Connection refused\n");
}

TEST_F(CtlTest, GpusAgentsAndQuota) {
  http_.Answer(Method::kGet, Url("/gpus"), 200, R"({"total":2,"idle":1,"busy":1,"offline":0,
    "gpus":[{"id":"n1-gpu-0","node_id":"n1","index":0,"model":"A100","memory_mb":40960,
             "status":"busy","current_task":"task-1"},
            {"id":"n1-gpu-1","node_id":"n1","index":1,"model":"A100","memory_mb":40960,
             "status":"idle","current_task":null}]})");
  EXPECT_EQ(Run({"get", "gpus"}).out,
            "ID        NODE  INDEX  MODEL  MEMORY   STATUS  TASK\n"
            "n1-gpu-0  n1    0      A100   40960MB  busy    task-1\n"
            "n1-gpu-1  n1    1      A100   40960MB  idle    -\n"
            "\n"
            "2 GPUs: 1 idle, 1 busy, 0 offline\n");

  http_.Answer(Method::kGet, Url("/agents"), 200, R"({"agents":[{"id":"n1","address":"h:1",
    "status":"online","gpus":["n1-gpu-0","n1-gpu-1"],"last_heartbeat":"2024-05-01T11:59:58Z"}]})");
  EXPECT_EQ(Run({"get", "agents"}).out,
            "ID  ADDRESS  STATUS  GPUS  LAST HEARTBEAT\n"
            "n1  h:1      online  2     2s ago\n");

  http_.Answer(Method::kGet, Url("/quota"), 200, R"({"total_gpus":10,
    "online":{"quota":7,"used":7,"available":0},"batch":{"quota":3,"used":1,"available":2}})");
  EXPECT_EQ(Run({"quota"}).out,
            "CLASS   QUOTA  USED  AVAILABLE\n"
            "online  7      7     0\n"
            "batch   3      1     2\n"
            "\n"
            "total GPUs: 10\n");
}

TEST_F(CtlTest, QuotaSet) {
  http_.Answer(Method::kPut, Url("/quota"), 200, R"({"message":"Quota updated"})");
  Outcome r = Run({"quota", "set", "--online", "0.655"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "quota updated: online 65.5%, batch 34.5%\n");
  EXPECT_EQ(http_.requests()[0].body, R"({"online_percent":0.655})");
  EXPECT_EQ(Run({"quota", "set", "--online", "1.2"}).code, kExitUsage);
  EXPECT_EQ(Run({"quota", "set"}).code, kExitUsage);
  EXPECT_EQ(http_.requests().size(), 1u);
}

TEST_F(CtlTest, CancelContinuesAfterAFailure) {
  http_.Answer(Method::kDelete, Url("/tasks/task-1"), 409,
               R"({"error":{"code":"conflict","message":"task-1 already finished"}})");
  http_.Answer(Method::kDelete, Url("/tasks/task-2"), 200, R"({"message":"Task cancelled"})");
  Outcome r = Run({"cancel", "task-1", "task-2"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.out, "task-2 cancelled\n");
  EXPECT_EQ(r.err, "error: task-1: task-1 already finished (conflict, HTTP 409)\n");
  EXPECT_EQ(Run({"cancel", "task-2"}).code, kExitOk);
  EXPECT_EQ(Run({"cancel"}).code, kExitUsage);
}

TEST_F(CtlTest, CancelWithGrace) {
  http_.Answer(Method::kDelete, Url("/tasks/task-3?grace_seconds=5"), 200,
               R"({"message":"Task cancelled"})");
  http_.Answer(Method::kDelete, Url("/tasks/task-4?grace_seconds=5"), 200,
               R"({"message":"Task cancelled"})");
  Outcome r = Run({"cancel", "--grace", "5", "task-3", "task-4"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "task-3 cancelled\ntask-4 cancelled\n");
  ASSERT_EQ(http_.requests().size(), 2u);
  EXPECT_EQ(http_.requests()[1].url, Url("/tasks/task-4?grace_seconds=5"));
  for (const char* bad : {"-1", "86401", "1.5", "soon"}) {
    Outcome usage = Run({"cancel", "--grace", bad, "task-3"});
    EXPECT_EQ(usage.code, kExitUsage) << bad;
    EXPECT_NE(usage.err.find("--grace"), std::string::npos) << usage.err;
  }
  EXPECT_EQ(http_.requests().size(), 2u);
}

TEST_F(CtlTest, WaitPollsUntilTheTaskFinishes) {
  http_.Answer(Method::kGet, Url("/tasks/task-1"), 200, kRunningTask);
  http_.Answer(Method::kGet, Url("/tasks/task-1"), 200, kRunningTask);
  http_.Answer(Method::kGet, Url("/tasks/task-1"), 200,
               R"({"task_id":"task-1","status":"success","exit_code":0})");
  Outcome r = Run({"wait", "task-1", "--interval", "3s"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "task-1 success\n");
  EXPECT_EQ(sleeps_, (std::vector<milliseconds>{milliseconds(3000), milliseconds(3000)}));
}

TEST_F(CtlTest, WaitExitCodes) {
  http_.Answer(Method::kGet, Url("/tasks/f"), 200,
               R"({"task_id":"f","status":"failed","exit_code":3,"error":"boom"})");
  Outcome failed = Run({"wait", "f"});
  EXPECT_EQ(failed.code, kExitTaskFailed);
  EXPECT_EQ(failed.out, "f failed (exit code 3): boom\n");

  http_.Answer(Method::kGet, Url("/tasks/c"), 200, R"({"task_id":"c","status":"cancelled"})");
  Outcome cancelled = Run({"wait", "c"});
  EXPECT_EQ(cancelled.code, kExitTaskFailed);
  EXPECT_EQ(cancelled.out, "c cancelled\n");

  EXPECT_EQ(Run({"wait", "missing"}).code, kExitApiError);
  EXPECT_EQ(Run({"wait", "c", "--interval", "soon"}).code, kExitUsage);
}

TEST_F(CtlTest, WaitTimesOut) {
  http_.Answer(Method::kGet, Url("/tasks/task-1"), 200, kRunningTask);
  Outcome r = Run({"wait", "task-1", "--timeout", "5s", "--interval", "2s"});
  EXPECT_EQ(r.code, kExitWaitTimeout);
  EXPECT_EQ(r.err, "error: timed out after 5s waiting for task-1 (status: running)\n");
  EXPECT_EQ(sleeps_, (std::vector<milliseconds>{milliseconds(2000), milliseconds(2000),
                                                milliseconds(1000)}));
}

// Durations are printed as a sum of units ("1m30s"), never as one unit ("90s").
TEST_F(CtlTest, WaitTimeoutIsPrintedInCompoundUnits) {
  http_.Answer(Method::kGet, Url("/tasks/task-1"), 200, kRunningTask);
  Outcome r = Run({"wait", "task-1", "--timeout", "90.5", "--interval", "1m"});
  EXPECT_EQ(r.code, kExitWaitTimeout);
  EXPECT_EQ(r.err, "error: timed out after 1m30s500ms waiting for task-1 (status: running)\n");
  EXPECT_EQ(Run({"wait", "task-1", "--timeout", "1e3"}).code, kExitUsage);
}

TEST_F(CtlTest, LogsFollowReadsNewBytesUntilTheTaskEnds) {
  http_.Answer(Method::kGet, Url("/tasks/task-1/logs?offset=0"), 200, "step 1\n");
  http_.Answer(Method::kGet, Url("/tasks/task-1/logs?offset=7"), 200, "step 2\n");
  http_.Answer(Method::kGet, Url("/tasks/task-1/logs?offset=14"), 200, "done\n");
  http_.Answer(Method::kGet, Url("/tasks/task-1"), 200, kRunningTask);
  http_.Answer(Method::kGet, Url("/tasks/task-1"), 200,
               R"({"task_id":"task-1","status":"success"})");
  Outcome r = Run({"logs", "task-1", "-f", "--interval", "250ms"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "step 1\nstep 2\ndone\n");
  EXPECT_EQ(sleeps_, std::vector<milliseconds>{milliseconds(250)});
}

TEST_F(CtlTest, LogsExplainWhereTheFileIsWhenTheSchedulerDoesNotServeThem) {
  http_.Answer(Method::kGet, Url("/tasks/task-1/logs"), 405,
               R"({"error":{"code":"method_not_allowed","message":"no"}})");
  http_.Answer(Method::kGet, Url("/tasks/task-1"), 200, kRunningTask);
  Outcome r = Run({"logs", "task-1"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "error: this scheduler does not serve task logs (HTTP 405 on "
            "/api/v1/tasks/task-1/logs)\n"
            "the log of task-1 is <work_dir>/task-1.log on node node-a (work_dir is "
            "executor.work_dir in the agent config, default /var/lib/dgpu-agent/tasks)\n");

  // Unknown task: the task lookup's error is shown.
  Outcome unknown = Run({"logs", "task-404"});
  EXPECT_EQ(unknown.code, kExitApiError);
  EXPECT_EQ(unknown.err, "error: no canned answer (not_found, HTTP 404)\n");
}

TEST_F(CtlTest, UsageErrors) {
  Outcome none = Run({});
  EXPECT_EQ(none.code, kExitUsage);
  EXPECT_EQ(none.err, "error: A subcommand is required (see dgpuctl --help)\n");
  EXPECT_EQ(Run({"-o", "yaml", "get", "gpus"}).code, kExitUsage);
  EXPECT_EQ(Run({"get"}).code, kExitUsage);
  EXPECT_EQ(Run({"get", "task"}).code, kExitUsage);
  EXPECT_EQ(Run({"--timeout", "never", "get", "gpus"}).code, kExitUsage);
  EXPECT_EQ(Run({"get", "tasks", "--limit", "0"}).code, kExitUsage);
  EXPECT_EQ(Run({"completion", "fish"}).code, kExitUsage);
  env_["DGPUCTL_NOW"] = "yesterday";
  EXPECT_EQ(Run({"get", "gpus"}).code, kExitUsage);
  EXPECT_TRUE(http_.requests().empty());
}

TEST_F(CtlTest, HelpAndVersionExitZero) {
  Outcome version = Run({"--version"});
  EXPECT_EQ(version.code, kExitOk);
  EXPECT_EQ(version.out, std::string("dgpuctl ") + DGPU_VERSION + "\n");
  Outcome help = Run({"--help"});
  EXPECT_EQ(help.code, kExitOk);
  EXPECT_NE(help.out.find("submit"), std::string::npos);
  EXPECT_NE(help.out.find("Exit codes"), std::string::npos);
  EXPECT_EQ(Run({"wait", "--help"}).code, kExitOk);
}

TEST_F(CtlTest, CompletionPrintsTheScript) {
  Outcome r = Run({"completion", "bash"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, BashCompletionScript());
  EXPECT_NE(r.out.find("complete -F _dgpuctl dgpuctl"), std::string::npos);
}

}  // namespace
}  // namespace dgpu::ctl
