// Runs the real dgpuctl binary (libcurl transport) against fake_api_server.py, a python HTTP
// server that answers per the REST contract, and checks exact output and exit codes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr char kNow[] = "2024-05-01T12:00:00Z";

struct ProcessResult {
  int code = -1;
  std::string out;
  std::string err;
};

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Runs `argv` with exactly `env` as its environment; kills it after 15 s.
ProcessResult RunProcess(std::vector<std::string> argv, std::vector<std::string> env) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    auto args = CStrings(argv);
    auto envp = CStrings(env);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  ProcessResult result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (open_fds > 0 && std::chrono::steady_clock::now() < deadline) {
    if (poll(fds, 2, 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        sinks[i]->append(buffer, n);
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  if (open_fds > 0) kill(pid, SIGKILL);
  for (auto& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// A running fake_api_server.py.
class FakeServer {
 public:
  explicit FakeServer(std::vector<std::string> extra_args) {
    record_ = "/tmp/dgpuctl_process_test_" + std::to_string(getpid()) + "_" +
              std::to_string(counter_++) + ".jsonl";
    std::remove(record_.c_str());
    int out_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0) return;
    std::vector<std::string> argv = {"python3", FAKE_API_SERVER, "--record", record_};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out_pipe[1], STDOUT_FILENO);
      auto args = CStrings(argv);
      execvp(args[0], args.data());
      _exit(127);
    }
    close(out_pipe[1]);
    std::string line;
    pollfd fd = {out_pipe[0], POLLIN, 0};
    while (line.find('\n') == std::string::npos && poll(&fd, 1, 10'000) > 0) {
      char buffer[64];
      ssize_t n = read(out_pipe[0], buffer, sizeof(buffer));
      if (n <= 0) break;
      line.append(buffer, n);
    }
    close(out_pipe[0]);
    port_ = std::atoi(line.c_str());
  }
  ~FakeServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    std::remove(record_.c_str());
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::vector<nlohmann::json> Requests() const {
    std::vector<nlohmann::json> requests;
    std::ifstream in(record_);
    std::string line;
    while (std::getline(in, line)) requests.push_back(nlohmann::json::parse(line));
    return requests;
  }

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string record_;
};

class DgpuctlProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<FakeServer>(std::vector<std::string>{});
    ASSERT_GT(server_->port(), 0) << "fake_api_server.py did not start";
  }

  ProcessResult Ctl(std::vector<std::string> args, std::string server = "") {
    args.insert(args.begin(), DGPUCTL_BIN);
    if (server.empty()) server = server_->url();
    return RunProcess(args, {"DGPU_SERVER=" + server, std::string("DGPUCTL_NOW=") + kNow});
  }

  std::unique_ptr<FakeServer> server_;
};

TEST_F(DgpuctlProcessTest, SubmitPrintsTheIdAndPostsTheExactBody) {
  ProcessResult r =
      Ctl({"submit",         "--gpus",    "2",      "--priority", "low",    "--model",
           "A100",           "--name",    "train",  "--env",      "LR=0.1", "--env",
           "DATA=/data/x y", "--timeout", "5m",     "--",         "python", "train.py",
           "--note",         "it's done", "--glob", "*.txt"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "task-7\n");
  EXPECT_EQ(r.err, "");
  auto requests = server_->Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0]["method"], "POST");
  EXPECT_EQ(requests[0]["path"], "/api/v1/tasks");
  EXPECT_EQ(requests[0]["content_type"], "application/json");
  EXPECT_EQ(requests[0]["body"].get<std::string>(),
            R"({"command":"python train.py --note 'it'\\''s done' --glob '*.txt'",)"
            R"("env":{"DATA":"/data/x y","LR":"0.1"},"gpu_count":2,"gpu_model":"A100",)"
            R"("name":"train","priority":"low","timeout_seconds":300})");
}

TEST_F(DgpuctlProcessTest, SubmitJson) {
  ProcessResult r =
      Ctl({"submit", "-o", "json", "--gpus", "1", "--priority", "high", "--", "true"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "{\n  \"created_at\": \"2024-05-01T12:00:00Z\",\n  \"status\": \"pending\",\n"
            "  \"task_id\": \"task-7\"\n}\n");
}

TEST_F(DgpuctlProcessTest, SubmitWithTeamAndPreemptionOptions) {
  ProcessResult r = Ctl({"submit", "--gpus", "1", "--priority", "low", "--team", "research",
                         "--no-preempt", "--", "python", "eval.py"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "task-7\n");
  EXPECT_EQ(r.err, "");
  r = Ctl({"submit", "--gpus", "2", "--priority", "high", "--team", "vision", "--preemption-grace",
           "45", "--", "serve"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "task-7\n");
  auto requests = server_->Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0]["method"], "POST");
  EXPECT_EQ(requests[0]["path"], "/api/v1/tasks");
  EXPECT_EQ(requests[0]["content_type"], "application/json");
  EXPECT_EQ(requests[0]["body"].get<std::string>(),
            R"({"command":"python eval.py","gpu_count":1,"preemptible":false,"priority":"low",)"
            R"("team":"research"})");
  EXPECT_EQ(requests[1]["body"].get<std::string>(),
            R"({"command":"serve","gpu_count":2,"preemption_grace_seconds":45,)"
            R"("priority":"high","team":"vision"})");
}

TEST_F(DgpuctlProcessTest, SubmitToABadTeamShowsTheApiError) {
  ProcessResult r =
      Ctl({"submit", "--gpus", "1", "--priority", "low", "--team", "Vision", "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "error: team must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a "
            "letter or digit; got \"Vision\" (invalid_field, HTTP 400)\n");
}

TEST_F(DgpuctlProcessTest, BadRequestShowsTheApiError) {
  ProcessResult r = Ctl({"submit", "--gpus", "0", "--priority", "low", "--", "true"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: gpu_count must be at least 1 (invalid_argument, HTTP 400)\n");
}

TEST_F(DgpuctlProcessTest, GetTasksTable) {
  ProcessResult r = Ctl({"get", "tasks"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(
      r.out,
      "ID      NAME        TEAM      PRIORITY  GPUS  STATUS   NODE    AGE  REASON\n"
      "task-4  eval        vision    high      1     failed   node-b  3d   CUDA out of memory\n"
      "task-3  prep        default   low       1     success  node-b  24h  -\n"
      "task-2  train-llm   research  low       8     pending  -       60m  quota_exhausted\n"
      "task-1  infer-bert  vision    high      2     running  node-a  5m   -\n");
}

TEST_F(DgpuctlProcessTest, GetTasksOfATeam) {
  ProcessResult r = Ctl({"get", "tasks", "--team", "vision"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "ID      NAME        TEAM    PRIORITY  GPUS  STATUS   NODE    AGE  REASON\n"
            "task-4  eval        vision  high      1     failed   node-b  3d   CUDA out of memory\n"
            "task-1  infer-bert  vision  high      2     running  node-a  5m   -\n");
  auto requests = server_->Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0]["method"], "GET");
  EXPECT_EQ(requests[0]["path"], "/api/v1/tasks?team=vision");
  EXPECT_EQ(requests[0]["body"], "");
}

TEST_F(DgpuctlProcessTest, GetTasksFilteredAndPaged) {
  ProcessResult r = Ctl({"get", "tasks", "--limit", "1", "--offset", "1"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "ID      NAME  TEAM     PRIORITY  GPUS  STATUS   NODE    AGE  REASON\n"
            "task-3  prep  default  low       1     success  node-b  24h  -\n");
  EXPECT_EQ(r.err, "showing tasks 2-2 of 4; use --limit and --offset to see more\n");
  EXPECT_EQ(server_->Requests().at(0)["path"], "/api/v1/tasks?limit=1&offset=1");

  r = Ctl({"get", "tasks", "--status", "pending", "--priority", "low"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "ID      NAME       TEAM      PRIORITY  GPUS  STATUS   NODE  AGE  REASON\n"
            "task-2  train-llm  research  low       8     pending  -     60m  quota_exhausted\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(server_->Requests().at(1)["path"], "/api/v1/tasks?status=pending&priority=low");
}

TEST_F(DgpuctlProcessTest, GetTaskDescribes) {
  ProcessResult r = Ctl({"get", "task", "task-1"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "ID:                task-1\n"
            "Name:              infer-bert\n"
            "Team:              vision\n"
            "User:              bob\n"
            "Priority:          high\n"
            "Status:            running\n"
            "Pending Reason:    -\n"
            "GPUs:              2\n"
            "GPU Model:         A100\n"
            "Node:              node-a\n"
            "Allocated GPUs:    node-a-gpu-0,node-a-gpu-1\n"
            "Attempts:          1\n"
            "Preemptible:       yes\n"
            "Preemption Grace:  60s (1m)\n"
            "Borrowed:          yes (on GPUs beyond its team's guarantee; may be preempted)\n"
            "Preemptions:       0\n"
            "Exit Code:         -\n"
            "Error:             -\n"
            "Command:           python serve.py --port 8000\n"
            "Image:             nvcr.io/nvidia/pytorch:24.01-py3\n"
            "Timeout:           7200s (2h)\n"
            "Created:           2024-05-01T11:55:00Z (5m ago)\n"
            "Started:           2024-05-01T11:55:02Z (4m ago)\n"
            "Finished:          -\n"
            "Run Time:          4m\n"
            "Env:\n"
            "  BATCH=16\n"
            "  MODEL=bert\n");
}

TEST_F(DgpuctlProcessTest, GetTaskOfAPreemptedTask) {
  ProcessResult r = Ctl({"get", "task", "task-2"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "ID:                task-2\n"
            "Name:              train-llm\n"
            "Team:              research\n"
            "User:              alice\n"
            "Priority:          low\n"
            "Status:            pending\n"
            "Pending Reason:    quota_exhausted\n"
            "GPUs:              8\n"
            "GPU Model:         A100\n"
            "Node:              -\n"
            "Allocated GPUs:    -\n"
            "Attempts:          1\n"
            "Preemptible:       yes\n"
            "Preemption Grace:  the scheduler's default\n"
            "Borrowed:          no\n"
            "Preemptions:       1\n"
            "Exit Code:         -\n"
            "Error:             preempted (its GPUs were taken back and it was requeued)\n"
            "Command:           torchrun train.py\n"
            "Image:             -\n"
            "Timeout:           -\n"
            "Created:           2024-05-01T11:00:00Z (60m ago)\n"
            "Started:           -\n"
            "Finished:          -\n"
            "Env:               -\n");
}

TEST_F(DgpuctlProcessTest, GetUnknownTask) {
  ProcessResult r = Ctl({"get", "task", "task-99"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: task task-99 not found (not_found, HTTP 404)\n");
}

TEST_F(DgpuctlProcessTest, GetGpus) {
  ProcessResult r = Ctl({"get", "gpus"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "ID            NODE    INDEX  MODEL  MEMORY   STATUS   TASK\n"
            "node-a-gpu-0  node-a  0      A100   81920MB  busy     task-1\n"
            "node-a-gpu-1  node-a  1      A100   81920MB  busy     task-1\n"
            "node-b-gpu-0  node-b  0      T4     15360MB  idle     -\n"
            "node-b-gpu-1  node-b  1      T4     15360MB  offline  -\n"
            "\n"
            "4 GPUs: 1 idle, 2 busy, 1 offline\n");
}

TEST_F(DgpuctlProcessTest, GetAgents) {
  ProcessResult r = Ctl({"get", "agents"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "ID      ADDRESS         STATUS   GPUS  FREE  CPUS   MEMORY         ISOLATION  TASKS  "
            "NVLINK  LAST HEARTBEAT  LABELS\n"
            "node-a  10.0.0.1:50051  online   2     0     6.5/8  32768/65536MB  cgroup_v1  1      "
            "0-1     3s ago          rack=r1\n"
            "node-b  10.0.0.2:50051  offline  2     -     -      -              -          -      "
            "-       20m ago         -\n");
}

TEST_F(DgpuctlProcessTest, Quota) {
  ProcessResult r = Ctl({"quota"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "CLASS   QUOTA  USED  AVAILABLE  BORROWED  LENT\n"
            "online  3      2     1          0         0\n"
            "batch   1      0     1          0         0\n"
            "\n"
            "total GPUs: 4\n");
}

TEST_F(DgpuctlProcessTest, QuotaSet) {
  ProcessResult r = Ctl({"quota", "set", "--online", "0.65"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, "quota updated: online 65%, batch 35%\n");
  auto requests = server_->Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0]["method"], "PUT");
  EXPECT_EQ(requests[0]["path"], "/api/v1/quota");
  EXPECT_EQ(requests[0]["body"], R"({"online_percent":0.65})");
}

constexpr char kTeamsTable[] =
    "TEAM      ONLINE  BATCH  MAX GPUS  WEIGHT  PENDING\n"
    "default   0/0/0   0/0/0  none      1       0\n"
    "research  0/0/0   1/0/0  8         1       1\n"
    "vision    1/2/1   0/0/0  none      2       0\n"
    "\n"
    "ONLINE, BATCH: guaranteed/used/borrowed GPUs (borrowed: used beyond the guarantee)\n";

TEST_F(DgpuctlProcessTest, GetTeams) {
  ProcessResult r = Ctl({"get", "teams"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, kTeamsTable);
  auto requests = server_->Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0]["method"], "GET");
  EXPECT_EQ(requests[0]["path"], "/api/v1/teams");

  r = Ctl({"get", "teams", "-o", "json"});
  EXPECT_EQ(r.code, 0);
  auto teams = nlohmann::json::parse(r.out)["teams"];
  ASSERT_EQ(teams.size(), 3u);
  EXPECT_EQ(teams[2],
            nlohmann::json::parse(
                R"({"name":"vision","configured":true,"online":{"guaranteed":1,"used":2,)"
                R"("borrowed":1},"batch":{"guaranteed":0,"used":0,"borrowed":0},)"
                R"("max_gpus":null,"weight":2.0,"pending":0,"usage_gpu_seconds":1234.5})"));
}

TEST_F(DgpuctlProcessTest, GetTeam) {
  ProcessResult r = Ctl({"get", "team", "research"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "Team:        research\n"
            "Configured:  yes\n"
            "Online:      0 guaranteed, 0 used, 0 borrowed\n"
            "Batch:       1 guaranteed, 0 used, 0 borrowed\n"
            "Max GPUs:    8\n"
            "Weight:      1\n"
            "Pending:     1\n"
            "Usage:       0 GPU-seconds\n");
  EXPECT_EQ(server_->Requests().at(0)["path"], "/api/v1/teams/research");
}

TEST_F(DgpuctlProcessTest, GetUnknownTeam) {
  ProcessResult r = Ctl({"get", "team", "nope"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: team nope not found (not_found, HTTP 404)\n");
}

TEST_F(DgpuctlProcessTest, TeamSetPutsTheGivenFieldsAndPrintsTheTeam) {
  ProcessResult r = Ctl({"team", "set", "audio", "--online", "1", "--batch", "0", "--max-gpus", "4",
                         "--weight", "0.5"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "Team:        audio\n"
            "Configured:  yes\n"
            "Online:      1 guaranteed, 0 used, 0 borrowed\n"
            "Batch:       0 guaranteed, 0 used, 0 borrowed\n"
            "Max GPUs:    4\n"
            "Weight:      0.5\n"
            "Pending:     0\n"
            "Usage:       0 GPU-seconds\n");
  // Fields left out keep their value; none removes the cap.
  r = Ctl({"team", "set", "audio", "--max-gpus", "none"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("\nOnline:      1 guaranteed, 0 used, 0 borrowed\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nMax GPUs:    none (no cap)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nWeight:      0.5\n"), std::string::npos) << r.out;
  auto requests = server_->Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0]["method"], "PUT");
  EXPECT_EQ(requests[0]["path"], "/api/v1/teams/audio");
  EXPECT_EQ(requests[0]["content_type"], "application/json");
  EXPECT_EQ(requests[0]["body"], R"({"batch":0,"max_gpus":4,"online":1,"weight":0.5})");
  EXPECT_EQ(requests[1]["body"], R"({"max_gpus":null})");

  r = Ctl({"get", "teams", "--no-headers"});
  EXPECT_EQ(r.out,
            "audio     1/0/0  0/0/0  none  0.5  0\n"
            "default   0/0/0  0/0/0  none  1    0\n"
            "research  0/0/0  1/0/0  8     1    1\n"
            "vision    1/2/1  0/0/0  none  2    0\n");
}

TEST_F(DgpuctlProcessTest, TeamSetErrors) {
  // Bad values are refused before anything is sent.
  ProcessResult r = Ctl({"team", "set", "vision", "--online", "-1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: --online expects a whole number of GPUs, 0 or more; got '-1'\n");
  r = Ctl({"team", "set", "vision", "--weight", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "error: --weight expects a number above 0, e.g. 1 or 2.5; got '0'\n");
  r = Ctl({"team", "set", "vision"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "error: team set needs at least one of --online, --batch, --max-gpus, --weight, "
            "--time-limit\n");
  EXPECT_TRUE(server_->Requests().empty());

  // What only the server knows: the guarantees of a class may not exceed its quota.
  r = Ctl({"team", "set", "research", "--online", "3"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "error: online: the online guarantees would add up to 4 GPUs, more than the online "
            "quota of 3 (invalid_field, HTTP 400)\n");
  r = Ctl({"team", "set", "Vision", "--online", "1"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err,
            "error: team names are 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a "
            "letter or digit, got 'Vision' (invalid_field, HTTP 400)\n");
  EXPECT_EQ(Ctl({"get", "teams"}).out, kTeamsTable);
}

TEST_F(DgpuctlProcessTest, TeamDelete) {
  ASSERT_EQ(Ctl({"team", "set", "audio", "--batch", "0"}).code, 0);
  ProcessResult r = Ctl({"team", "delete", "audio"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "team audio deleted\n");
  EXPECT_EQ(r.err, "");
  auto requests = server_->Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1]["method"], "DELETE");
  EXPECT_EQ(requests[1]["path"], "/api/v1/teams/audio");
  EXPECT_EQ(requests[1]["body"], "");
  EXPECT_EQ(Ctl({"get", "teams"}).out, kTeamsTable);

  r = Ctl({"team", "delete", "vision"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "error: team vision has 0 pending task(s) and holds 2 GPU(s); delete it once they "
            "have ended (conflict, HTTP 409)\n");
  r = Ctl({"team", "delete", "research"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err,
            "error: team research has 1 pending task(s) and holds 0 GPU(s); delete it once they "
            "have ended (conflict, HTTP 409)\n");
  r = Ctl({"team", "delete", "audio"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: team audio has no limits to delete (not_found, HTTP 404)\n");
}

TEST_F(DgpuctlProcessTest, CancelOneOkOneConflict) {
  ProcessResult r = Ctl({"cancel", "task-1", "task-3"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "task-1 cancelled\n");
  EXPECT_EQ(r.err, "error: task-3: task task-3 already finished (conflict, HTTP 409)\n");
  auto requests = server_->Requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0]["method"], "DELETE");
  EXPECT_EQ(requests[0]["path"], "/api/v1/tasks/task-1");
  EXPECT_EQ(requests[1]["path"], "/api/v1/tasks/task-3");
}

TEST_F(DgpuctlProcessTest, WaitSuccess) {
  ProcessResult r = Ctl({"wait", "task-5", "--interval", "50ms", "--timeout", "10s"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "task-5 success\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(server_->Requests().size(), 3u);
}

TEST_F(DgpuctlProcessTest, WaitFailed) {
  ProcessResult r = Ctl({"wait", "task-6", "--interval", "50ms"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out, "task-6 failed (exit code 1): process exited with code 1\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(DgpuctlProcessTest, WaitTimeout) {
  ProcessResult r = Ctl({"wait", "task-1", "--interval", "50ms", "--timeout", "200ms"});
  EXPECT_EQ(r.code, 4);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: timed out after 200ms waiting for task-1 (status: running)\n");
}

TEST_F(DgpuctlProcessTest, LogsNotServed) {
  ProcessResult r = Ctl({"logs", "task-1"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "error: this scheduler does not serve task logs (HTTP 404 on "
            "/api/v1/tasks/task-1/logs)\n"
            "the log of task-1 is <work_dir>/task-1.log on node node-a (work_dir is "
            "executor.work_dir in the agent config, default /var/lib/dgpu-agent/tasks)\n");
}

TEST_F(DgpuctlProcessTest, LogsServedAndFollowed) {
  ProcessResult r = Ctl({"logs", "task-3", "-f"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "preparing\ndone\n");
  EXPECT_EQ(r.err, "");
  r = Ctl({"logs", "task-3", "--tail", "1"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "done\n");
}

TEST_F(DgpuctlProcessTest, UnreachableServer) {
  // A port that was free a moment ago: nothing listens there.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  ProcessResult r = Ctl({"get", "tasks"}, url);
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  std::string prefix = "error: cannot reach the scheduler at " + url + ": ";
  EXPECT_EQ(r.err.substr(0, prefix.size()), prefix) << r.err;
  EXPECT_GT(r.err.size(), prefix.size() + 1);
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line expected: " << r.err;
}

TEST_F(DgpuctlProcessTest, StandbyNamesTheLeader) {
  FakeServer standby({"--standby", "http://10.0.0.1:8080"});
  ASSERT_GT(standby.port(), 0);
  ProcessResult r = Ctl({"get", "gpus"}, standby.url());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: this scheduler is a standby; the leader is at http://10.0.0.1:8080\n");
}

TEST_F(DgpuctlProcessTest, CompletionScriptMatchesTheDeployedFileAndCompletes) {
  ProcessResult r = Ctl({"completion", "bash"});
  EXPECT_EQ(r.code, 0);
  std::ifstream file(COMPLETION_FILE);
  std::stringstream content;
  content << file.rdbuf();
  EXPECT_EQ(r.out, content.str());

  auto complete = [&](const std::string& words, int cword) {
    std::string script = std::string("source ") + COMPLETION_FILE + "; COMP_WORDS=(" + words +
                         "); COMP_CWORD=" + std::to_string(cword) +
                         "; _dgpuctl; echo \"${COMPREPLY[*]}\"";
    return RunProcess({"/bin/bash", "--norc", "-c", script},
                      {"DGPU_SERVER=" + server_->url(), "PATH=/usr/bin:/bin"})
        .out;
  };
  EXPECT_EQ(complete("dgpuctl ''", 1),
            "submit get quota team snapshot cancel wait events usage logs top cordon uncordon "
            "drain completion\n");
  EXPECT_EQ(complete("dgpuctl get ''", 2), "tasks task teams team gpus agents\n");
  EXPECT_EQ(complete("dgpuctl team ''", 2), "set delete\n");
  EXPECT_EQ(complete("dgpuctl team set vision --", 4),
            "--online --batch --max-gpus --weight --help\n");
  EXPECT_EQ(complete("dgpuctl team set vision --max-gpus ''", 5), "none\n");
  EXPECT_EQ(complete("dgpuctl team set vision --weight ''", 5), "\n");
  EXPECT_EQ(complete("dgpuctl submit --no", 2), "--no-preempt\n");
  EXPECT_EQ(complete("dgpuctl submit --team vision --pre", 4), "--preemption-grace\n");
  EXPECT_EQ(complete("dgpuctl get tasks --team vision --t", 5), "--team\n");
  EXPECT_EQ(complete(std::string(DGPUCTL_BIN) + " get team ''", 3), "default research vision\n");
  EXPECT_EQ(complete(std::string(DGPUCTL_BIN) + " team delete r", 3), "research\n");
  EXPECT_EQ(complete(std::string(DGPUCTL_BIN) + " submit --team v", 3), "vision\n");
  EXPECT_EQ(complete("dgpuctl snapshot --", 2), "--force --help\n");
  EXPECT_EQ(complete("dgpuctl --tok", 1), "--token\n");
  EXPECT_EQ(complete("dgpuctl --token secret --cacert ca.pem get ''", 6),
            "tasks task teams team gpus agents\n");
  EXPECT_EQ(complete("dgpuctl get tasks --a", 3), "--after\n");
  EXPECT_EQ(complete("dgpuctl -o json get tasks --status r", 6), "running\n");
  EXPECT_EQ(complete(std::string(DGPUCTL_BIN) + " cancel ''", 2), "task-4 task-3 task-2 task-1\n");
  EXPECT_EQ(complete(std::string(DGPUCTL_BIN) + " drain ''", 2), "node-a node-b\n");
  EXPECT_EQ(complete("dgpuctl drain node-a --", 3), "--evict --grace --help\n");
  EXPECT_EQ(complete("dgpuctl cordon node-a --", 3), "--help\n");
}

}  // namespace
