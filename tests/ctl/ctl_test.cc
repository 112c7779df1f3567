// dgpuctl command logic, driven through its command line with an in-memory HTTP client.
#include <gtest/gtest.h>
#include <sys/stat.h>
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
    target_->set_auth(auth_);  // What the command was given, for the test to read.
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

// --token, then $DGPU_TOKEN, then the config file; the same order for the server and the CA.
TEST_F(CtlTest, TokenServerAndCaComeFromFlagsThenEnvironmentThenTheConfigFile) {
  char dir[] = "/tmp/dgpuctl-config-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string config = std::string(dir) + "/config.yaml";
  std::ofstream(config) << "server: http://file:1\ntoken: file-token\nca_file: /file/ca.pem\n";
  ::chmod(config.c_str(), 0600);
  env_["DGPU_CONFIG"] = config;
  http_.Answer(Method::kGet, "http://file:1/api/v1/quota", 200, "{}");
  Outcome r = Run({"-o", "json", "quota"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(http_.auth().token, "file-token");
  EXPECT_EQ(http_.auth().ca_file, "/file/ca.pem");

  env_["DGPU_TOKEN"] = "env-token";
  env_["DGPU_SERVER"] = "http://env:2";
  http_.Answer(Method::kGet, "http://env:2/api/v1/quota", 200, "{}");
  r = Run({"-o", "json", "quota"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(http_.auth().token, "env-token");

  http_.Answer(Method::kGet, Url("/quota"), 200, "{}");
  r = Run({"--server", kDefaultServer, "--token", "flag-token", "--cacert", "/flag/ca.pem", "-o",
           "json", "quota"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(http_.auth().token, "flag-token");
  EXPECT_EQ(http_.auth().ca_file, "/flag/ca.pem");

  // A token others may read is worth a warning; a broken file stops the command.
  ::chmod(config.c_str(), 0644);
  r = Run({"-o", "json", "quota"});
  EXPECT_NE(r.err.find("holds a token and other users may read it (chmod 600"), std::string::npos)
      << r.err;
  std::ofstream(config) << "server: x\ntokn: y\n";
  r = Run({"quota"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "error: " + config +
                       ": unknown key \"tokn\" (the file holds server, token and ca_file)\n");
  env_["DGPU_CONFIG"] = std::string(dir) + "/missing.yaml";
  r = Run({"quota"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("which does not exist"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_F(CtlTest, UnauthenticatedSaysHowToGiveAToken) {
  http_.Answer(Method::kGet, Url("/quota"), 401,
               R"j({"error":{"code":"unauthenticated","message":"this scheduler requires a )j"
               R"j(bearer token (Authorization: Bearer <token>)"}})j");
  Outcome r = Run({"quota"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.err,
            "error: this scheduler requires a bearer token (Authorization: Bearer <token>) "
            "(unauthenticated, HTTP 401); give a token with --token, $DGPU_TOKEN or the config "
            "file's token\n");
}

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
  // --time is the same option, in Slurm's name; days too.
  EXPECT_EQ(Run({"submit", "--gpus", "1", "--priority", "low", "--time", "2d", "--", "x"}).code,
            kExitOk);
  EXPECT_EQ(http_.requests()[1].body,
            R"({"command":"x","gpu_count":1,"priority":"low","timeout_seconds":172800})");
}

TEST_F(CtlTest, SubmitSendsDependenciesByConditionAndRefusesWhatIsNoTaskId) {
  http_.Answer(Method::kPost, Url("/tasks"), 201, R"({"task_id":"task-9","status":"pending"})");
  Outcome r = Run({"submit", "--gpus", "1", "--priority", "low", "--after-ok", "task-3,4",
                   "--after-any", "task-5", "--after", "6", "--after-not-ok", "task-7", "--", "x"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(http_.requests()[0].body,
            R"({"command":"x","depends_on":[{"condition":"afterok","task_id":"task-3"},)"
            R"({"condition":"afterok","task_id":"task-4"},)"
            R"({"condition":"afternotok","task_id":"task-7"},)"
            R"({"condition":"afterany","task_id":"task-5"},)"
            R"({"condition":"after","task_id":"task-6"}],"gpu_count":1,"priority":"low"})");
  Outcome bad =
      Run({"submit", "--gpus", "1", "--priority", "low", "--after-ok", "train", "--", "x"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_EQ(bad.err, "error: --after-ok expects a task id such as task-7; got 'train'\n");
  EXPECT_EQ(http_.requests().size(), 1u) << "nothing sent";
}

TEST_F(CtlTest, GetTaskShowsEachDependencyAfterThePendingReason) {
  http_.Answer(Method::kGet, Url("/tasks/task-9"), 200, R"({"task_id":"task-9","name":"eval",
    "priority":"low","gpu_count":1,"gpu_model":"","command":"run","env":{},
    "timeout_seconds":0,"image":"","status":"pending","node_id":"","allocated_gpus":[],
    "pending_reason":"dependency","attempts":0,"exit_code":null,"error":"",
    "created_at":"2024-05-01T11:58:00Z","started_at":null,"finished_at":null,
    "team":"vision","user":"","preemptible":true,"preemption_grace_seconds":-1,
    "borrowed":false,"preemptions":0,
    "depends_on":[{"task_id":"task-3","condition":"afterok","state":"satisfied"},
                  {"task_id":"task-4","condition":"afterany","state":"waiting"}]})");
  Outcome r = Run({"get", "task", "task-9"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("Pending Reason:    dependency\n"
                       "Depends On:        task-3 (afterok, satisfied), task-4 (afterany, "
                       "waiting)\n"),
            std::string::npos)
      << r.out;
}

TEST_F(CtlTest, SubmitAnArrayPrintsEveryId) {
  http_.Answer(Method::kPost, Url("/tasks"), 201,
               R"({"task_id":"task-4","status":"pending","created_at":"2024-05-01T12:00:00Z",
                   "task_ids":["task-4","task-5","task-6"]})");
  Outcome r = Run({"submit", "--gpus", "1", "--priority", "low", "--array", "3", "--", "true"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "task-4\ntask-5\ntask-6\n");
  EXPECT_EQ(http_.requests()[0].body,
            R"({"array":3,"command":"true","gpu_count":1,"priority":"low"})");
  Outcome bad = Run({"submit", "--gpus", "1", "--priority", "low", "--array", "0", "--", "true"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_EQ(http_.requests().size(), 1u) << "nothing sent for a bad size";
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

TEST_F(CtlTest, SubmitSendsTeamAndPreemptionFields) {
  http_.Answer(Method::kPost, Url("/tasks"), 201, R"({"task_id":"task-3","status":"pending"})");
  Outcome r = Run({"submit", "--gpus", "1", "--priority", "low", "--team", "vision", "--no-preempt",
                   "--", "python", "train.py"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "task-3\n");
  r = Run({"submit", "--gpus", "2", "--priority", "high", "--team", "ml-infra_2",
           "--preemption-grace", "120", "--", "serve"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  r = Run({"submit", "--gpus", "1", "--priority", "low", "--preemption-grace", "0", "--", "x"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  ASSERT_EQ(http_.requests().size(), 3u);
  EXPECT_EQ(http_.requests()[0].method, Method::kPost);
  EXPECT_EQ(http_.requests()[0].url, Url("/tasks"));
  EXPECT_EQ(http_.requests()[0].body,
            R"({"command":"python train.py","gpu_count":1,"preemptible":false,"priority":"low",)"
            R"("team":"vision"})");
  EXPECT_EQ(http_.requests()[1].body,
            R"({"command":"serve","gpu_count":2,"preemption_grace_seconds":120,)"
            R"("priority":"high","team":"ml-infra_2"})");
  EXPECT_EQ(http_.requests()[2].body,
            R"({"command":"x","gpu_count":1,"preemption_grace_seconds":0,"priority":"low"})");

  for (const char* bad : {"-1", "86401", "1.5", "soon"}) {
    Outcome usage =
        Run({"submit", "--gpus", "1", "--priority", "low", "--preemption-grace", bad, "--", "x"});
    EXPECT_EQ(usage.code, kExitUsage) << bad;
    EXPECT_NE(usage.err.find("--preemption-grace"), std::string::npos) << usage.err;
  }
  Outcome both = Run({"submit", "--gpus", "1", "--priority", "low", "--no-preempt",
                      "--preemption-grace", "5", "--", "x"});
  EXPECT_EQ(both.code, kExitUsage);
  EXPECT_EQ(both.err, "error: --no-preempt excludes --preemption-grace (see dgpuctl --help)\n");
  EXPECT_EQ(http_.requests().size(), 3u);
}

TEST_F(CtlTest, SubmitSendsCpusAndMemoryInMiB) {
  http_.Answer(Method::kPost, Url("/tasks"), 201, R"({"task_id":"task-3","status":"pending"})");
  Outcome r = Run({"submit", "--gpus", "1", "--priority", "low", "--cpus", "1.5", "--memory", "16G",
                   "--", "python", "load.py"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(http_.requests()[0].body,
            R"({"command":"python load.py","cpus":1.5,"gpu_count":1,"memory_mb":16384,)"
            R"("priority":"low"})");
  EXPECT_EQ(ParseMemoryMb("512"), 512);
  EXPECT_EQ(ParseMemoryMb("512M"), 512);
  EXPECT_EQ(ParseMemoryMb("512MiB"), 512);
  EXPECT_EQ(ParseMemoryMb("2Gi"), 2048);
  EXPECT_EQ(ParseMemoryMb("1.5T"), 1572864);
  EXPECT_EQ(ParseMemoryMb("2048K"), 2);
  for (const char* bad : {"", "G", "0", "0.5", "1000K", "12X", "-1G", "1e3", "16 G"}) {
    EXPECT_EQ(ParseMemoryMb(bad), std::nullopt) << bad;
  }
  for (const auto& [flag, value, message] :
       {std::tuple{"--cpus", "0",
                   "error: --cpus expects a number of CPUs above 0, e.g. 4 or "
                   "1.5; got '0'\n"},
        std::tuple{"--cpus", "two",
                   "error: --cpus expects a number of CPUs above 0, e.g. 4 or "
                   "1.5; got 'two'\n"},
        std::tuple{"--memory", "16X",
                   "error: --memory expects MiB or a size with a unit (K, M, G, T: powers of "
                   "1024), e.g. 16G or 512M, of at least 1 MiB; got '16X'\n"}}) {
    Outcome bad = Run({"submit", "--gpus", "1", "--priority", "low", flag, value, "--", "x"});
    EXPECT_EQ(bad.code, kExitUsage) << flag << " " << value;
    EXPECT_EQ(bad.err, message);
  }
  EXPECT_EQ(http_.requests().size(), 1u);
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
  EXPECT_EQ(timeout.err,
            "error: --time expects a positive whole number of seconds or a duration like 30s, "
            "90m, 2h, 7d; got '10x'\n");
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
  // task-1 comes from a scheduler without teams: its TEAM is "-".
  http_.Answer(Method::kGet, Url("/tasks"), 200, R"({"tasks":[
    {"task_id":"task-2","name":"","team":"vision","priority":"low","gpu_count":8,
     "status":"pending","node_id":"","pending_reason":"no_node_fits",
     "created_at":"2024-05-01T11:59:30Z","allocated_gpus":[],"attempts":0,"exit_code":null,
     "command":"sh -c 'a\nb'"},
    {"task_id":"task-1","name":"train","priority":"high","gpu_count":2,"status":"failed",
     "node_id":"node-a","created_at":"2024-05-01T09:00:00Z","error":"",
     "allocated_gpus":["node-a-gpu-0","node-a-gpu-1"],"attempts":2,"exit_code":137,
     "command":"python t.py"}],"total":2})");
  EXPECT_EQ(Run({"get", "tasks"}).out,
            "ID      NAME   TEAM    PRIORITY  GPUS  STATUS   NODE    AGE  REASON\n"
            "task-2  -      vision  low       8     pending  -       30s  no_node_fits\n"
            "task-1  train  -       high      2     failed   node-a  3h   exit code 137\n");
  EXPECT_EQ(Run({"get", "tasks", "-o", "wide"}).out,
            "ID      NAME   TEAM    PRIORITY  GPUS  STATUS   NODE    AGE  REASON         ALLOCATED"
            "                  ATTEMPTS  EXIT  COMMAND\n"
            "task-2  -      vision  low       8     pending  -       30s  no_node_fits   -"
            "                          0         -     sh -c 'a\\nb'\n"
            "task-1  train  -       high      2     failed   node-a  3h   exit code 137  "
            "node-a-gpu-0,node-a-gpu-1  2         137   python t.py\n");
  // Without the header, the widths come from the rows alone.
  EXPECT_EQ(Run({"--no-headers", "get", "tasks"}).out,
            "task-2  -      vision  low   8  pending  -       30s  no_node_fits\n"
            "task-1  train  -       high  2  failed   node-a  3h   exit code 137\n");
}

TEST_F(CtlTest, GetTasksFiltersByTeam) {
  http_.Answer(Method::kGet, Url("/tasks?status=running&team=ml-infra_2&limit=10"), 200,
               R"({"tasks":[{"task_id":"task-8","name":"serve","team":"ml-infra_2",
                   "priority":"high","gpu_count":1,"status":"running","node_id":"node-b",
                   "created_at":"2024-05-01T11:00:00Z"}],"total":1,"next":null})");
  Outcome r = Run({"get", "tasks", "--team", "ml-infra_2", "--status", "running", "--limit", "10"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "ID      NAME   TEAM        PRIORITY  GPUS  STATUS   NODE    AGE  REASON\n"
            "task-8  serve  ml-infra_2  high      1     running  node-b  60m  -\n");
  EXPECT_EQ(r.err, "");
  ASSERT_EQ(http_.requests().size(), 1u);
  EXPECT_EQ(http_.requests()[0].method, Method::kGet);
  EXPECT_EQ(http_.requests()[0].url, Url("/tasks?status=running&team=ml-infra_2&limit=10"));
  EXPECT_EQ(http_.requests()[0].body, "");

  // The server judges team names; its error is shown as it is.
  http_.Answer(
      Method::kGet, Url("/tasks?team=Vision%20X"), 400,
      R"({"error":{"code":"invalid_field","message":"team must be a team name ([a-z0-9][a-z0-9_-]{0,62}); got \"Vision X\""}})");
  r = Run({"get", "tasks", "--team", "Vision X"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "error: team must be a team name ([a-z0-9][a-z0-9_-]{0,62}); got \"Vision X\" "
            "(invalid_field, HTTP 400)\n");
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
    "pending_reason":"team_limit","attempts":0,"exit_code":null,"error":"",
    "created_at":"2024-05-01T11:58:00Z","started_at":null,"finished_at":null,
    "team":"vision","user":"","preemptible":false,"preemption_grace_seconds":-1,
    "borrowed":false,"preemptions":0})");
  Outcome r = Run({"get", "task", "task-2"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out,
            "ID:                task-2\n"
            "Name:              x\n"
            "Team:              vision\n"
            "User:              -\n"
            "Priority:          low\n"
            "Status:            pending\n"
            "Pending Reason:    team_limit\n"
            "GPUs:              4\n"
            "GPU Model:         H100\n"
            "Node:              -\n"
            "Allocated GPUs:    -\n"
            "Attempts:          0\n"
            "Preemptible:       no\n"
            "Preemption Grace:  the scheduler's default\n"
            "Borrowed:          no\n"
            "Preemptions:       0\n"
            "Exit Code:         -\n"
            "Error:             -\n"
            "Command:           run\n"
            "Image:             -\n"
            "Timeout:           30s\n"
            "Created:           2024-05-01T11:58:00Z (2m ago)\n"
            "Started:           -\n"
            "Finished:          -\n"
            "Env:               -\n");
  // `get tasks ID` is the same as `get task ID`.
  EXPECT_EQ(Run({"get", "tasks", "task-2"}).out, r.out);
}

// A pending task's pending_detail follows its reason, wherever other rows were added above.
TEST_F(CtlTest, GetTaskSaysWhichNodesCouldTakeAPendingTask) {
  http_.Answer(Method::kGet, Url("/tasks/task-2"), 200, R"({"task_id":"task-2","name":"x",
    "priority":"low","gpu_count":4,"gpu_model":"","command":"run","env":{},
    "timeout_seconds":0,"image":"","status":"pending","node_id":"","allocated_gpus":[],
    "pending_reason":"no_node_matches",
    "pending_detail":"0 of 3 nodes can take it; 1 cordoned, 2 without label rack=r9",
    "attempts":0,"exit_code":null,"error":"","array_index":1,"array_size":4,
    "created_at":"2024-05-01T11:58:00Z","started_at":null,"finished_at":null,
    "team":"vision","user":"","preemptible":true,"preemption_grace_seconds":-1,
    "borrowed":false,"preemptions":0})");
  Outcome r = Run({"get", "task", "task-2"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("Array Index:       1 of 4\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Pending Reason:    no_node_matches\n"
                       "Placement:         0 of 3 nodes can take it; 1 cordoned, 2 without label "
                       "rack=r9\n"
                       "GPUs:              4\n"),
            std::string::npos)
      << r.out;
}

TEST_F(CtlTest, GetTaskShowsPreemptionAndBorrowing) {
  // Preempted twice and requeued.
  http_.Answer(Method::kGet, Url("/tasks/task-5"), 200, R"({"task_id":"task-5","name":"sweep",
    "priority":"low","gpu_count":2,"gpu_model":"","command":"./sweep.sh","env":{},
    "timeout_seconds":0,"image":"","status":"pending","node_id":null,"allocated_gpus":[],
    "allocation":[],"pending_reason":"waiting_for_preemption","attempts":2,"exit_code":null,
    "error":"preempted","created_at":"2024-05-01T11:00:00Z","started_at":null,
    "finished_at":null,"team":"research","user":"alice","preemptible":true,
    "preemption_grace_seconds":90,"borrowed":false,"preemptions":2})");
  Outcome r = Run({"get", "task", "task-5"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "ID:                task-5\n"
            "Name:              sweep\n"
            "Team:              research\n"
            "User:              alice\n"
            "Priority:          low\n"
            "Status:            pending\n"
            "Pending Reason:    waiting_for_preemption\n"
            "GPUs:              2\n"
            "GPU Model:         -\n"
            "Node:              -\n"
            "Allocated GPUs:    -\n"
            "Attempts:          2\n"
            "Preemptible:       yes\n"
            "Preemption Grace:  90s (1m30s)\n"
            "Borrowed:          no\n"
            "Preemptions:       2\n"
            "Exit Code:         -\n"
            "Error:             preempted (its GPUs were taken back and it was requeued)\n"
            "Command:           ./sweep.sh\n"
            "Image:             -\n"
            "Timeout:           -\n"
            "Created:           2024-05-01T11:00:00Z (60m ago)\n"
            "Started:           -\n"
            "Finished:          -\n"
            "Env:               -\n");

  http_.Answer(Method::kGet, Url("/tasks/task-6"), 200, R"({"task_id":"task-6","status":"running",
    "team":"research","user":"bob","preemptible":true,"preemption_grace_seconds":0,
    "borrowed":true,"preemptions":0,"started_at":"2024-05-01T11:59:00Z"})");
  r = Run({"get", "task", "task-6"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("\nPreemption Grace:  0s\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nBorrowed:          yes (on GPUs beyond its team's guarantee; may be "
                       "preempted)\n"),
            std::string::npos)
      << r.out;
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

TEST_F(CtlTest, UnhealthyGpusShowTheirReason) {
  http_.Answer(Method::kGet, Url("/gpus"), 200, R"({"total":2,"idle":1,"busy":0,"offline":0,
    "unhealthy":1,
    "gpus":[{"id":"n1-gpu-0","node_id":"n1","index":0,"model":"A100","memory_mb":40960,
             "status":"unhealthy","current_task":null,"health_reason":"xid 79"},
            {"id":"n1-gpu-1","node_id":"n1","index":1,"model":"A100","memory_mb":40960,
             "status":"idle","current_task":null,"health_reason":null}]})");
  EXPECT_EQ(Run({"get", "gpus"}).out,
            "ID        NODE  INDEX  MODEL  MEMORY   STATUS     TASK  HEALTH\n"
            "n1-gpu-0  n1    0      A100   40960MB  unhealthy  -     xid 79\n"
            "n1-gpu-1  n1    1      A100   40960MB  idle       -     -\n"
            "\n"
            "2 GPUs: 1 idle, 0 busy, 0 offline, 1 unhealthy\n");
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
    "status":"online","gpus":["n1-gpu-0","n1-gpu-1"],"last_heartbeat":"2024-05-01T11:59:58Z",
    "nvlink_groups":[[0,2],[1,3],[4,5,6,7]]},
    {"id":"n2","address":"h:2","status":"online","gpus":[],"labels":{"rack":"r1","zone":"a"},
     "last_heartbeat":"2024-05-01T11:59:58Z"}]})");
  EXPECT_EQ(Run({"get", "agents"}).out,
            "ID  ADDRESS  STATUS  GPUS  FREE  CPUS  MEMORY  ISOLATION  TASKS  NVLINK       "
            "LAST HEARTBEAT  LABELS\n"
            "n1  h:1      online  2     -     -     -       -          -      0,2|1,3|4-7  "
            "2s ago          -\n"
            "n2  h:2      online  0     -     -     -       -          -      -            "
            "2s ago          rack=r1,zone=a\n");

  http_.Answer(Method::kGet, Url("/quota"), 200, R"({"total_gpus":10,
    "online":{"quota":7,"used":9,"available":0,"borrowed":2,"lent":0,
              "teams":{"serving":{"guaranteed":4,"used":6,"borrowed":2},
                       "vision":{"guaranteed":3,"used":3,"borrowed":0}}},
    "batch":{"quota":3,"used":1,"available":0,"borrowed":0,"lent":2,
             "teams":{"vision":{"guaranteed":0,"used":1,"borrowed":1}}},
    "online_percent":0.7,"batch_percent":0.3})");
  EXPECT_EQ(Run({"quota"}).out,
            "CLASS   QUOTA  USED  AVAILABLE  BORROWED  LENT\n"
            "online  7      9     0          2         0\n"
            "batch   3      1     0          0         2\n"
            "\n"
            "total GPUs: 10\n"
            "\n"
            "TEAM     CLASS   GUARANTEED  USED  BORROWED\n"
            "serving  online  4           6     2\n"
            "vision   online  3           3     0\n"
            "vision   batch   0           1     1\n");
  EXPECT_EQ(Run({"--no-headers", "quota"}).out,
            "online  7  9  0  2  0\n"
            "batch   3  1  0  0  2\n");
}

TEST_F(CtlTest, QuotaOfASchedulerWithoutBorrowing) {
  http_.Answer(Method::kGet, Url("/quota"), 200, R"({"total_gpus":10,
    "online":{"quota":7,"used":7,"available":0},"batch":{"quota":3,"used":1,"available":2}})");
  EXPECT_EQ(Run({"quota"}).out,
            "CLASS   QUOTA  USED  AVAILABLE  BORROWED  LENT\n"
            "online  7      7     0          -         -\n"
            "batch   3      1     2          -         -\n"
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

constexpr char kTeams[] = R"({"teams":[
  {"name":"default","configured":false,"online":{"guaranteed":0,"used":2,"borrowed":2},
   "batch":{"guaranteed":0,"used":0,"borrowed":0},"max_gpus":null,"weight":1.0,"pending":0,
   "usage_gpu_seconds":360.25},
  {"name":"vision","configured":true,"online":{"guaranteed":16,"used":4,"borrowed":0},
   "batch":{"guaranteed":8,"used":10,"borrowed":2},"max_gpus":64,"weight":2.5,"pending":3,
   "usage_gpu_seconds":1234.5}]})";

constexpr char kVision[] =
    R"({"name":"vision","configured":true,"online":{"guaranteed":16,"used":4,"borrowed":0},)"
    R"("batch":{"guaranteed":8,"used":10,"borrowed":2},"max_gpus":64,"weight":2.5,)"
    R"("default_time_limit":86400,"pending":3,"usage_gpu_seconds":1234.5})";

constexpr char kVisionDescribed[] =
    "Team:        vision\n"
    "Configured:  yes\n"
    "Online:      16 guaranteed, 4 used, 0 borrowed\n"
    "Batch:       8 guaranteed, 10 used, 2 borrowed\n"
    "Max GPUs:    64\n"
    "Weight:      2.5\n"
    "Time limit:  1d for tasks submitted without one\n"
    "Pending:     3\n"
    "Usage:       1234.5 GPU-seconds\n";

TEST_F(CtlTest, GetTeamsTableWideAndWithoutHeaders) {
  http_.Answer(Method::kGet, Url("/teams"), 200, kTeams);
  Outcome r = Run({"get", "teams"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "TEAM     ONLINE  BATCH   MAX GPUS  WEIGHT  PENDING\n"
            "default  0/2/2   0/0/0   none      1       0\n"
            "vision   16/4/0  8/10/2  64        2.5     3\n"
            "\n"
            "ONLINE, BATCH: guaranteed/used/borrowed GPUs (borrowed: used beyond the guarantee)\n");
  EXPECT_EQ(Run({"get", "teams", "-o", "wide"}).out,
            "TEAM     ONLINE  BATCH   MAX GPUS  WEIGHT  PENDING  CONFIGURED  USAGE (GPU-S)\n"
            "default  0/2/2   0/0/0   none      1       0        no          360.25\n"
            "vision   16/4/0  8/10/2  64        2.5     3        yes         1234.5\n"
            "\n"
            "ONLINE, BATCH: guaranteed/used/borrowed GPUs (borrowed: used beyond the guarantee)\n");
  EXPECT_EQ(Run({"--no-headers", "get", "teams"}).out,
            "default  0/2/2   0/0/0   none  1    0\n"
            "vision   16/4/0  8/10/2  64    2.5  3\n");
  ASSERT_EQ(http_.requests().size(), 3u);
  EXPECT_EQ(http_.requests()[0].method, Method::kGet);
  EXPECT_EQ(http_.requests()[0].url, Url("/teams"));
  EXPECT_EQ(http_.requests()[0].body, "");
}

TEST_F(CtlTest, GetTeamsJsonAndEmpty) {
  http_.Answer(Method::kGet, Url("/teams"), 200,
               R"({"teams":[{"name":"a","weight":1.0,"max_gpus":null}]})");
  http_.Answer(Method::kGet, Url("/teams"), 200, R"({"teams":[]})");
  http_.Answer(Method::kGet, Url("/teams"), 200, R"({"names":[]})");
  Outcome r = Run({"-o", "json", "get", "teams"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out,
            "{\n  \"teams\": [\n    {\n      \"max_gpus\": null,\n      \"name\": \"a\",\n"
            "      \"weight\": 1.0\n    }\n  ]\n}\n");
  r = Run({"get", "teams"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "no teams found\n");

  r = Run({"get", "teams"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.err,
            "error: invalid response from the scheduler: GET /api/v1/teams did not return a "
            "teams array\n");
}

TEST_F(CtlTest, GetTeamDescribesOneTeam) {
  http_.Answer(Method::kGet, Url("/teams/vision"), 200, kVision);
  Outcome r = Run({"get", "team", "vision"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, kVisionDescribed);
  // `get teams NAME` is the same as `get team NAME`.
  EXPECT_EQ(Run({"get", "teams", "vision"}).out, r.out);

  http_.Answer(Method::kGet, Url("/teams/default"), 200,
               R"({"name":"default","configured":false,"online":{"guaranteed":0,"used":0,)"
               R"("borrowed":0},"batch":{"guaranteed":0,"used":1,"borrowed":1},)"
               R"("max_gpus":null,"weight":1.0,"default_time_limit":null,"pending":0,)"
               R"("usage_gpu_seconds":0.0})");
  EXPECT_EQ(Run({"get", "team", "default"}).out,
            "Team:        default\n"
            "Configured:  no\n"
            "Online:      0 guaranteed, 0 used, 0 borrowed\n"
            "Batch:       0 guaranteed, 1 used, 1 borrowed\n"
            "Max GPUs:    none (no cap)\n"
            "Weight:      1\n"
            "Time limit:  the scheduler's default\n"
            "Pending:     0\n"
            "Usage:       0 GPU-seconds\n");
}

TEST_F(CtlTest, GetUnknownTeamShowsTheServersNotFound) {
  http_.Answer(Method::kGet, Url("/teams/nope"), 404,
               R"({"error":{"code":"not_found","message":"team nope not found"}})");
  Outcome r = Run({"get", "team", "nope"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: team nope not found (not_found, HTTP 404)\n");
  EXPECT_EQ(Run({"get", "team"}).code, kExitUsage);
  // Names are sent URL-encoded.
  Run({"get", "team", "a/b c"});
  EXPECT_EQ(http_.requests().back().url, Url("/teams/a%2Fb%20c"));
}

TEST_F(CtlTest, TeamSetSendsOnlyTheGivenFieldsAndPrintsTheTeam) {
  http_.Answer(Method::kPut, Url("/teams/vision"), 200, kVision);
  Outcome r = Run({"team", "set", "vision", "--online", "16", "--batch", "8"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, kVisionDescribed);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(Run({"team", "set", "vision", "--max-gpus", "none"}).code, kExitOk);
  EXPECT_EQ(Run({"team", "set", "vision", "--max-gpus", "64", "--weight", "2.5"}).code, kExitOk);
  EXPECT_EQ(Run({"team", "set", "vision", "--online", "0", "--max-gpus", "0"}).code, kExitOk);
  EXPECT_EQ(Run({"team", "set", "vision", "--time-limit", "1d12h"}).code, kExitOk);
  EXPECT_EQ(Run({"team", "set", "vision", "--time-limit", "none"}).code, kExitOk);
  ASSERT_EQ(http_.requests().size(), 6u);
  EXPECT_EQ(http_.requests()[4].body, R"({"default_time_limit":129600})");
  EXPECT_EQ(http_.requests()[5].body, R"({"default_time_limit":null})");
  EXPECT_EQ(http_.requests()[0].method, Method::kPut);
  EXPECT_EQ(http_.requests()[0].url, Url("/teams/vision"));
  EXPECT_EQ(http_.requests()[0].body, R"({"batch":8,"online":16})");
  EXPECT_EQ(http_.requests()[1].body, R"({"max_gpus":null})");
  EXPECT_EQ(http_.requests()[2].body, R"({"max_gpus":64,"weight":2.5})");
  EXPECT_EQ(http_.requests()[3].body, R"({"max_gpus":0,"online":0})");

  r = Run({"-o", "json", "team", "set", "vision", "--weight", "1"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json::parse(kVision));
  EXPECT_EQ(r.out, nlohmann::json::parse(kVision).dump(2) + "\n");
  EXPECT_EQ(http_.requests().back().body, R"({"weight":1.0})");
}

TEST_F(CtlTest, TeamSetRejectsBadValuesWithoutCallingTheServer) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--online", "-1"}, "error: --online expects a whole number of GPUs, 0 or more; got '-1'\n"},
      {{"--batch", "2.5"}, "error: --batch expects a whole number of GPUs, 0 or more; got '2.5'\n"},
      {{"--online", "many"},
       "error: --online expects a whole number of GPUs, 0 or more; got 'many'\n"},
      {{"--max-gpus", "-3"},
       "error: --max-gpus expects a whole number of GPUs, 0 or more, or none (no cap); got "
       "'-3'\n"},
      {{"--max-gpus", "unlimited"},
       "error: --max-gpus expects a whole number of GPUs, 0 or more, or none (no cap); got "
       "'unlimited'\n"},
      {{"--weight", "0"}, "error: --weight expects a number above 0, e.g. 1 or 2.5; got '0'\n"},
      {{"--weight", "-1"}, "error: --weight expects a number above 0, e.g. 1 or 2.5; got '-1'\n"},
      {{"--weight", "heavy"},
       "error: --weight expects a number above 0, e.g. 1 or 2.5; got 'heavy'\n"},
      {{"--online", "4", "--weight", "nan"},
       "error: --weight expects a number above 0, e.g. 1 or 2.5; got 'nan'\n"},
      {{"--time-limit", "0"},
       "error: --time-limit expects a duration of whole seconds like 90m, 2h, 7d, or none; got "
       "'0'\n"},
      {{"--time-limit", "1.5s"},
       "error: --time-limit expects a duration of whole seconds like 90m, 2h, 7d, or none; got "
       "'1.5s'\n"},
      {{},
       "error: team set needs at least one of --online, --batch, --max-gpus, --weight, "
       "--time-limit\n"},
  };
  for (const auto& [options, message] : cases) {
    std::vector<std::string> args = {"team", "set", "vision"};
    args.insert(args.end(), options.begin(), options.end());
    Outcome r = Run(args);
    EXPECT_EQ(r.code, kExitUsage) << message;
    EXPECT_EQ(r.err, message);
    EXPECT_EQ(r.out, "");
  }
  EXPECT_EQ(Run({"team", "set", "--online", "1"}).code, kExitUsage);
  EXPECT_EQ(Run({"team"}).code, kExitUsage);
  EXPECT_EQ(Run({"team", "rename", "vision"}).code, kExitUsage);
  EXPECT_TRUE(http_.requests().empty());
}

TEST_F(CtlTest, TeamSetShowsTheServersError) {
  http_.Answer(
      Method::kPut, Url("/teams/vision"), 400,
      R"({"error":{"code":"invalid_field","message":"online: the online guarantees would add up to 20 GPUs, more than the online quota of 16"}})");
  Outcome r = Run({"team", "set", "vision", "--online", "20"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "error: online: the online guarantees would add up to 20 GPUs, more than the online "
            "quota of 16 (invalid_field, HTTP 400)\n");
}

TEST_F(CtlTest, TeamDelete) {
  http_.Answer(Method::kDelete, Url("/teams/vision"), 200, R"({"name":"vision","deleted":true})");
  http_.Answer(
      Method::kDelete, Url("/teams/busy"), 409,
      R"({"error":{"code":"conflict","message":"team busy has 2 pending task(s) and holds 0 GPU(s); delete it once they have ended"}})");
  http_.Answer(Method::kDelete, Url("/teams/nope"), 404,
               R"({"error":{"code":"not_found","message":"team nope has no limits to delete"}})");
  Outcome r = Run({"team", "delete", "vision"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "team vision deleted\n");
  EXPECT_EQ(r.err, "");
  ASSERT_EQ(http_.requests().size(), 1u);
  EXPECT_EQ(http_.requests()[0].method, Method::kDelete);
  EXPECT_EQ(http_.requests()[0].url, Url("/teams/vision"));
  EXPECT_EQ(http_.requests()[0].body, "");

  r = Run({"-o", "json", "team", "delete", "vision"});
  EXPECT_EQ(r.out, "{\n  \"deleted\": true,\n  \"name\": \"vision\"\n}\n");

  r = Run({"team", "delete", "busy"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "error: team busy has 2 pending task(s) and holds 0 GPU(s); delete it once they have "
            "ended (conflict, HTTP 409)\n");
  r = Run({"team", "delete", "nope"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.err, "error: team nope has no limits to delete (not_found, HTTP 404)\n");
  EXPECT_EQ(Run({"team", "delete"}).code, kExitUsage);
  EXPECT_EQ(http_.requests().size(), 4u);
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

TEST_F(CtlTest, TopShowsGpuUsePerNodeInNaturalOrder) {
  http_.Answer(Method::kGet, Url("/gpus"), 200, R"({"total":6,"idle":1,"busy":2,"offline":2,
      "unhealthy":1,"gpus":[
    {"id":"n10-gpu-0","node_id":"n10","index":0,"status":"unhealthy","utilization":null},
    {"id":"n2-gpu-1","node_id":"n2","index":1,"status":"idle","utilization":0.1},
    {"id":"n2-gpu-0","node_id":"n2","index":0,"status":"busy","utilization":0.9},
    {"id":"n2-gpu-2","node_id":"n2","index":2,"status":"busy","utilization":0.7},
    {"id":"n3-gpu-0","node_id":"n3","index":0,"status":"offline","utilization":0.5},
    {"id":"n3-gpu-1","node_id":"n3","index":1,"status":"offline","utilization":null}]})");
  Outcome r = Run({"top"});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out,
            "NODE  GPUS  BUSY  IDLE  DOWN  UTIL  GPU USE\n"
            "n2    3     2     1     0     57%   #.#\n"
            "n3    2     0     0     2     -     xx\n"
            "n10   1     0     0     1     -     !\n"
            "\n"
            "6 GPUs: 2 busy (33%), 1 idle, 2 offline, 1 unhealthy; utilization 57% on 3 "
            "reporting GPUs\n"
            "(gpu use: # busy, . idle, x offline, ! unhealthy)\n");
  r = Run({"-o", "json", "top"});
  EXPECT_EQ(r.code, kExitOk);
  nlohmann::json nodes = nlohmann::json::parse(r.out)["nodes"];
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0]["node_id"], "n2");
  EXPECT_EQ(nodes[0]["busy"], 2);
  EXPECT_NEAR(nodes[0]["utilization"].get<double>(), 1.7 / 3, 1e-9);
  EXPECT_EQ(nodes[1]["offline"], 2);
  EXPECT_TRUE(nodes[1]["utilization"].is_null());
  EXPECT_EQ(nodes[2]["unhealthy"], 1);
}

TEST_F(CtlTest, LogsAskForWhatTheFlagsSayAndPrintTheStream) {
  http_.Answer(Method::kGet, Url("/tasks/task-1/logs?follow=true"), 200, "step 1\nstep 2\n");
  http_.Answer(Method::kGet, Url("/tasks/task-1/logs?tail=2&follow=true&rank=1"), 200, "b\nc\n");
  http_.Answer(Method::kGet, Url("/tasks/task-1/logs?tail=0"), 200, "");
  Outcome r = Run({"logs", "task-1", "-f"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "step 1\nstep 2\n");
  r = Run({"logs", "task-1", "--follow", "--tail", "2", "--rank", "1"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "b\nc\n");
  r = Run({"logs", "task-1", "--tail", "0"});
  EXPECT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(sleeps_, std::vector<milliseconds>{});
  EXPECT_EQ(Run({"logs", "task-1", "--tail", "-1"}).code, kExitUsage);
  EXPECT_EQ(Run({"logs", "task-1", "--rank", "x"}).code, kExitUsage);
}

TEST_F(CtlTest, LogsUnavailableIsTheSchedulersError) {
  http_.Answer(
      Method::kGet, Url("/tasks/task-1/logs"), 404,
      R"({"error":{"code":"log_unavailable","message":"task-1 has not run on any node yet"}})");
  Outcome r = Run({"logs", "task-1"});
  EXPECT_EQ(r.code, kExitApiError);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: task-1 has not run on any node yet (log_unavailable, HTTP 404)\n");
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
