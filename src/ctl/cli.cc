#include "ctl/cli.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "common/time_util.h"
#include "ctl/commands.h"
#include "ctl/format.h"

namespace dgpu::ctl {
namespace {

constexpr char kDescription[] =
    "dgpuctl: command-line client of the dgpu GPU scheduler.\n"
    "Exit codes: 0 ok; 1 waited-for task failed or was cancelled; 2 usage error; "
    "3 scheduler unreachable or API error; 4 wait timed out.";

std::string NormalizeServer(std::string server) {
  while (!server.empty() && server.back() == '/') server.pop_back();
  if (server.find("://") == std::string::npos) server = "http://" + server;
  return server;
}

// ~/.config/dgpu/config.yaml: defaults for --server, --token and --cacert.
struct FileConfig {
  std::string server;
  std::string token;
  std::string ca_file;
};

// The config file's path: $DGPU_CONFIG, else $XDG_CONFIG_HOME/dgpu/config.yaml, else
// $HOME/.config/dgpu/config.yaml. `required`: named explicitly, so it must exist.
std::string ConfigPath(const CliDeps& deps, bool* required) {
  *required = false;
  if (const char* p = deps.getenv("DGPU_CONFIG"); p != nullptr && p[0] != '\0') {
    *required = true;
    return p;
  }
  if (const char* x = deps.getenv("XDG_CONFIG_HOME"); x != nullptr && x[0] != '\0') {
    return std::string(x) + "/dgpu/config.yaml";
  }
  if (const char* h = deps.getenv("HOME"); h != nullptr && h[0] != '\0') {
    return std::string(h) + "/.config/dgpu/config.yaml";
  }
  return "";
}

// Reads the config file; false (with the error printed) when it is broken.
bool LoadFileConfig(const CliDeps& deps, FileConfig* out, std::ostream& err) {
  bool required = false;
  const std::string path = ConfigPath(deps, &required);
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) {
    if (required) err << "error: DGPU_CONFIG names " << path << ", which does not exist\n";
    return !required;
  }
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    err << "error: " << path << ": " << e.what() << "\n";
    return false;
  }
  if (doc.IsNull()) return true;
  if (!doc.IsMap()) {
    err << "error: " << path << ": must be a map of server, token and ca_file\n";
    return false;
  }
  for (const auto& kv : doc) {
    const std::string key = kv.first.Scalar();
    std::string* field = key == "server"    ? &out->server
                         : key == "token"   ? &out->token
                         : key == "ca_file" ? &out->ca_file
                                            : nullptr;
    if (field == nullptr) {
      err << "error: " << path << ": unknown key \"" << key
          << "\" (the file holds server, token and ca_file)\n";
      return false;
    }
    if (!kv.second.IsScalar()) {
      err << "error: " << path << ": " << key << " must be a string\n";
      return false;
    }
    *field = kv.second.Scalar();
  }
  if (!out->token.empty() && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    err << "warning: " << path << " holds a token and other users may read it (chmod 600 " << path
        << ")\n";
  }
  return true;
}

// Parses a duration flag; on error prints it and returns nullopt.
std::optional<std::chrono::milliseconds> DurationFlag(const std::string& flag,
                                                      const std::string& value, std::ostream& err) {
  auto duration = common::ParseDuration(value);
  if (!duration) {
    err << "error: " << flag << " expects seconds or a duration like 500ms, 30s, 5m, 2h; got '"
        << value << "'\n";
  }
  return duration;
}

}  // namespace

int RunCtl(int argc, const char* const* argv, const CliDeps& deps) {
  std::ostream& out = *deps.out;
  std::ostream& err = *deps.err;

  CLI::App app(kDescription, "dgpuctl");
  app.set_version_flag("--version", std::string("dgpuctl ") + DGPU_VERSION);
  app.require_subcommand(1);
  app.fallthrough();

  std::string server;
  std::string token;
  std::string ca_file;
  std::string output = "table";
  std::string request_timeout = "10s";
  bool no_headers = false;
  app.add_option("--server", server,
                 "Scheduler URL (default: $DGPU_SERVER, else " + std::string(kDefaultServer) + ")");
  app.add_option("--token", token,
                 "Bearer token (default: $DGPU_TOKEN, else the config file's token)");
  app.add_option("--cacert", ca_file,
                 "CA certificates (PEM) for an https:// server (default: the config file's "
                 "ca_file, else the system's)");
  app.add_option("-o,--output", output, "Output format")
      ->check(CLI::IsMember({"table", "json", "wide"}))
      ->capture_default_str();
  app.add_option("--timeout,--request-timeout", request_timeout,
                 "HTTP request timeout (after a subcommand that has its own --timeout, use "
                 "--request-timeout)")
      ->capture_default_str();
  app.add_flag("--no-headers", no_headers, "Print tables without their header and summary");

  // submit
  SubmitOptions submit;
  CLI::App* submit_cmd = app.add_subcommand(
      "submit", "Submit a task; prints its id (dgpuctl submit --gpus 1 --priority low -- CMD...)");
  submit_cmd->add_option("--gpus", submit.gpus,
                         "Number of GPUs (in all; required unless --gpus-per-node is given)");
  submit_cmd
      ->add_option("--nodes", submit.nodes,
                   "Run as a gang of N members, one per node, started together (each sees "
                   "DGPU_NODE_RANK, MASTER_ADDR, MASTER_PORT, ...)")
      ->check(CLI::Range(1, 1024));
  submit_cmd->add_option("--gpus-per-node", submit.gpus_per_node, "GPUs of each member")
      ->check(CLI::Range(1, 1024));
  submit_cmd->add_option(
      "--cpus", submit.cpus,
      "CPUs of each member, e.g. 4 or 1.5 (default: its GPUs' share of the node)");
  submit_cmd->add_option("--memory", submit.memory,
                         "Memory of each member: MiB, or with a unit, e.g. 16G, 512M (powers of "
                         "1024; default: its GPUs' share of the node)");
  submit_cmd->add_option("--priority", submit.priority, "high (online) or low (batch)")
      ->required()
      ->check(CLI::IsMember({"high", "low"}));
  submit_cmd->add_option("--model", submit.model, "GPU model, e.g. A100");
  submit_cmd->add_option("--name", submit.name, "Task name");
  submit_cmd->add_option("--env", submit.env, "Environment variable KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  submit_cmd
      ->add_option("--selector", submit.selector,
                   "Only nodes with the label KEY=VALUE (agent.labels) take it (repeatable)")
      ->allow_extra_args(false);
  submit_cmd->add_option("--time,--timeout", submit.timeout,
                         "Time limit: seconds or a duration like 30s, 90m, 2h, 7d (default: the "
                         "team's or the scheduler's default_time_limit)");
  const auto after = [&](const char* flag, std::vector<std::string>* ids, const char* what) {
    submit_cmd->add_option(flag, *ids, what)->allow_extra_args(false)->delimiter(',');
  };
  after("--after-ok", &submit.after_ok,
        "Start only once task ID has succeeded (afterok; repeatable; an array's id means every "
        "member)");
  after("--after-not-ok", &submit.after_not_ok,
        "Start only once task ID has failed or been cancelled (afternotok; repeatable)");
  after("--after-any", &submit.after_any,
        "Start only once task ID has ended (afterany; repeatable)");
  after("--after", &submit.after, "Start only once task ID has started (after; repeatable)");
  submit_cmd->add_option("--image", submit.image, "Container image (docker executor)");
  submit_cmd->add_option("--team", submit.team,
                         "Team whose guarantees the task uses (default: the server's \"default\")");
  CLI::Option* no_preempt_opt = submit_cmd->add_flag(
      "--no-preempt", submit.no_preempt, "The task may not be preempted (preemptible: false)");
  submit_cmd
      ->add_option("--preemption-grace", submit.preemption_grace,
                   "Seconds between SIGTERM and SIGKILL when the task is preempted (default: the "
                   "scheduler's)")
      ->check(CLI::Range(0, 86400))
      ->excludes(no_preempt_opt);
  submit_cmd
      ->add_option("--max-retries", submit.max_retries,
                   "Retry a failed run this many times (0-100; default 0)")
      ->check(CLI::Range(0, 100));
  submit_cmd
      ->add_option("--retry-backoff", submit.retry_backoff,
                   "Seconds before the first retry, doubling for each next one (default 10)")
      ->check(CLI::Range(1, 86400));
  submit_cmd
      ->add_option("--array", submit.array,
                   "Submit a job array of N tasks (each sees DGPU_ARRAY_INDEX 0..N-1); prints "
                   "every id")
      ->check(CLI::Range(1, 100000));
  submit_cmd->add_option("command", submit.command, "Command to run, after --");

  // get
  CLI::App* get_cmd =
      app.add_subcommand("get", "Show tasks, a task, teams, a team, GPUs, agents or autoscaling");
  get_cmd->require_subcommand(1);
  ListTasksOptions list;
  std::string list_id;
  CLI::App* get_tasks = get_cmd->add_subcommand("tasks", "List tasks, newest first");
  get_tasks->add_option("--status", list.status, "Only tasks with this status")
      ->check(CLI::IsMember({"pending", "running", "success", "failed", "cancelled"}));
  get_tasks->add_option("--priority", list.priority, "Only tasks with this priority")
      ->check(CLI::IsMember({"high", "low"}));
  get_tasks->add_option("--team", list.team, "Only tasks of this team");
  get_tasks->add_flag("-w,--watch", list.watch,
                      "After the list, print each change of a matching task as it happens");
  get_tasks->add_option("--limit", list.limit, "At most this many tasks (server default 50)")
      ->check(CLI::Range(1, 1000));
  CLI::Option* offset_opt = get_tasks->add_option("--offset", list.offset, "Skip this many tasks")
                                ->check(CLI::NonNegativeNumber);
  get_tasks
      ->add_option("--after", list.after,
                   "Only tasks older than this task id (the next page's start, as printed); the "
                   "same cost at any depth, unlike --offset")
      ->excludes(offset_opt);
  get_tasks->add_option("id", list_id, "Describe this task instead of listing");
  std::string task_id;
  CLI::App* get_task = get_cmd->add_subcommand("task", "Describe one task");
  get_task->add_option("id", task_id, "Task id")->required();
  std::string list_team;
  CLI::App* get_teams =
      get_cmd->add_subcommand("teams", "List teams: guarantees, use, cap, weight, pending tasks");
  get_teams->add_option("name", list_team, "Describe this team instead of listing");
  std::string team_name;
  CLI::App* get_team = get_cmd->add_subcommand("team", "Describe one team");
  get_team->add_option("name", team_name, "Team name")->required();
  CLI::App* get_gpus = get_cmd->add_subcommand("gpus", "List GPUs");
  CLI::App* get_agents = get_cmd->add_subcommand("agents", "List agents");
  CLI::App* get_autoscale =
      get_cmd->add_subcommand("autoscale", "Show the autoscaled node groups and their nodes");

  // quota
  CLI::App* quota_cmd = app.add_subcommand("quota", "Show or set the online/batch quota");
  quota_cmd->require_subcommand(0, 1);
  double online = 0;
  CLI::App* quota_set = quota_cmd->add_subcommand("set", "Set the online share (batch = 1 - it)");
  quota_set->add_option("--online", online, "Online (high priority) share of the GPUs, in [0,1]")
      ->required()
      ->check(CLI::Range(0.0, 1.0));

  // team
  CLI::App* team_cmd =
      app.add_subcommand("team", "Set or delete a team's guaranteed GPUs, cap and weight");
  team_cmd->require_subcommand(1);
  TeamOptions team_set_options;
  CLI::App* team_set = team_cmd->add_subcommand(
      "set", "Set a team's limits (options left out keep their value); prints the team");
  team_set->add_option("name", team_set_options.name, "Team name")->required();
  team_set
      ->add_option("--online", team_set_options.online,
                   "GPUs guaranteed to the team in the online (high priority) class")
      ->type_name("N");
  team_set
      ->add_option("--batch", team_set_options.batch,
                   "GPUs guaranteed to the team in the batch (low priority) class")
      ->type_name("N");
  team_set
      ->add_option("--max-gpus", team_set_options.max_gpus,
                   "At most this many GPUs for the team in all, or none (no cap)")
      ->type_name("N|none");
  team_set
      ->add_option("--weight", team_set_options.weight,
                   "Fair-share weight of the team (above 0; default 1)")
      ->type_name("W");
  team_set
      ->add_option("--time-limit", team_set_options.time_limit,
                   "Time limit of the team's tasks submitted without one (30m, 2h, 7d), or none "
                   "(the scheduler's default_time_limit)")
      ->type_name("D|none");
  std::string team_delete_name;
  CLI::App* team_delete = team_cmd->add_subcommand(
      "delete", "Delete a team's limits (refused while it has pending or running tasks)");
  team_delete->add_option("name", team_delete_name, "Team name")->required();

  // snapshot
  SnapshotOptions snapshot;
  CLI::App* snapshot_cmd = app.add_subcommand(
      "snapshot", "Save a consistent copy of the scheduler's database (a SQLite file)");
  snapshot_cmd->add_option("file", snapshot.path, "The file to write, e.g. dgpu-backup.db")
      ->required();
  snapshot_cmd->add_flag("--force", snapshot.force, "Replace the file if it exists");

  // cancel
  std::vector<std::string> cancel_ids;
  std::optional<int> cancel_grace;
  CLI::App* cancel_cmd = app.add_subcommand("cancel", "Cancel tasks");
  cancel_cmd->add_option("ids", cancel_ids, "Task ids")->required();
  cancel_cmd
      ->add_option("--grace", cancel_grace,
                   "Seconds a running task gets between SIGTERM and SIGKILL (default: the "
                   "agent's kill_grace_period)")
      ->check(CLI::Range(0, 86400));

  // cordon, uncordon, drain
  NodeModeOptions node_mode;
  CLI::App* cordon_cmd = app.add_subcommand("cordon", "Keep new tasks off a node");
  cordon_cmd->add_option("node", node_mode.node, "Agent id")->required();
  CLI::App* uncordon_cmd =
      app.add_subcommand("uncordon", "Let a cordoned or draining node take tasks again");
  uncordon_cmd->add_option("node", node_mode.node, "Agent id")->required();
  CLI::App* drain_cmd = app.add_subcommand(
      "drain", "Keep new tasks off a node and, with --evict, requeue its tasks elsewhere");
  drain_cmd->add_option("node", node_mode.node, "Agent id")->required();
  drain_cmd->add_flag("--evict", node_mode.evict,
                      "Stop the node's tasks now; they go back to their queues");
  drain_cmd
      ->add_option("--grace", node_mode.grace_seconds,
                   "Seconds an evicted task gets between SIGTERM and SIGKILL (default: its "
                   "preemption grace)")
      ->check(CLI::Range(0, 86400));

  // wait
  std::string wait_id;
  std::string wait_timeout;
  std::string wait_interval = "2s";
  CLI::App* wait_cmd = app.add_subcommand(
      "wait", "Wait until a task finishes (exit 0 success, 1 failed/cancelled, 4 timeout)");
  wait_cmd->add_option("id", wait_id, "Task id")->required();
  wait_cmd->add_option("--timeout", wait_timeout, "Give up after this long (default: never)");
  wait_cmd->add_option("--interval", wait_interval, "Polling interval")->capture_default_str();

  // events
  std::string events_id;
  CLI::App* events_cmd = app.add_subcommand("events", "Show what happened to a task, oldest first");
  events_cmd->add_option("id", events_id, "Task id")->required();

  // usage
  UsageOptions usage;
  CLI::App* usage_cmd = app.add_subcommand("usage", "Show GPU time by team or user");
  usage_cmd->add_option("--from", usage.from, "RFC 3339 start (default: 24 hours before --to)");
  usage_cmd->add_option("--to", usage.to, "RFC 3339 end (default: now)");
  usage_cmd->add_option("--by", usage.by, "Group by")
      ->check(CLI::IsMember({"team", "user"}))
      ->capture_default_str();

  // logs
  std::string logs_id;
  bool follow = false;
  std::optional<int> logs_tail;
  int logs_rank = 0;
  CLI::App* logs_cmd = app.add_subcommand("logs", "Print the output of a task");
  logs_cmd->add_option("id", logs_id, "Task id")->required();
  logs_cmd->add_flag("-f,--follow", follow, "Keep printing new output until the task finishes");
  logs_cmd->add_option("--tail", logs_tail, "Only the last N lines (0 with -f: only new output)")
      ->check(CLI::Range(0, 1000000));
  logs_cmd->add_option("--rank", logs_rank, "The member of a multi-node task")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();

  // top
  CLI::App* top_cmd = app.add_subcommand("top", "GPU use per node");

  // completion
  std::string shell;
  CLI::App* completion_cmd = app.add_subcommand("completion", "Print a shell completion script");
  completion_cmd->add_option("shell", shell, "Shell")->required()->check(CLI::IsMember({"bash"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help or --version
      app.exit(e, out, err);
      return kExitOk;
    }
    err << "error: " << e.what() << " (see dgpuctl --help)\n";
    return kExitUsage;
  }

  if (completion_cmd->parsed()) {
    out << BashCompletionScript();
    return kExitOk;
  }

  // Flags first, then the environment, then the config file, then the defaults.
  FileConfig file;
  if (!LoadFileConfig(deps, &file, err)) return kExitUsage;
  CtlContext ctx;
  if (server.empty()) {
    const char* env_server = deps.getenv("DGPU_SERVER");
    server = env_server != nullptr && env_server[0] != '\0' ? env_server
             : !file.server.empty()                         ? file.server
                                                            : kDefaultServer;
  }
  if (token.empty()) {
    const char* env_token = deps.getenv("DGPU_TOKEN");
    token = env_token != nullptr && env_token[0] != '\0' ? env_token : file.token;
  }
  if (ca_file.empty()) ca_file = file.ca_file;
  ctx.server = NormalizeServer(server);
  ctx.output = output == "json"   ? OutputFormat::kJson
               : output == "wide" ? OutputFormat::kWide
                                  : OutputFormat::kTable;
  ctx.no_headers = no_headers;
  ctx.out = &out;
  ctx.err = &err;
  ctx.now = deps.now;
  ctx.monotonic_now = deps.monotonic_now;
  ctx.sleep = deps.sleep;
  if (const char* fixed_now = deps.getenv("DGPUCTL_NOW"); fixed_now != nullptr) {
    auto when = common::ParseRfc3339TimePoint(fixed_now);
    if (!when) {
      err << "error: DGPUCTL_NOW must be an RFC 3339 time, got '" << fixed_now << "'\n";
      return kExitUsage;
    }
    ctx.now = [when] { return *when; };
  }

  auto timeout = DurationFlag("--timeout", request_timeout, err);
  if (!timeout) return kExitUsage;
  if (timeout->count() <= 0) {
    err << "error: --timeout must be positive\n";
    return kExitUsage;
  }
  std::unique_ptr<HttpClient> http = deps.make_http(*timeout);
  http->set_auth({token, ca_file});
  ctx.http = http.get();

  if (submit_cmd->parsed()) return Submit(ctx, submit);
  if (get_cmd->parsed()) {
    if (get_tasks->parsed()) return list_id.empty() ? GetTasks(ctx, list) : GetTask(ctx, list_id);
    if (get_task->parsed()) return GetTask(ctx, task_id);
    if (get_teams->parsed()) return list_team.empty() ? GetTeams(ctx) : GetTeam(ctx, list_team);
    if (get_team->parsed()) return GetTeam(ctx, team_name);
    if (get_gpus->parsed()) return GetGpus(ctx);
    if (get_agents->parsed()) return GetAgents(ctx);
    if (get_autoscale->parsed()) return GetAutoscale(ctx);
  }
  if (quota_cmd->parsed()) return quota_set->parsed() ? SetQuota(ctx, online) : ShowQuota(ctx);
  if (team_cmd->parsed()) {
    if (team_set->parsed()) return SetTeam(ctx, team_set_options);
    if (team_delete->parsed()) return DeleteTeam(ctx, team_delete_name);
  }
  if (snapshot_cmd->parsed()) return Snapshot(ctx, snapshot);
  if (cancel_cmd->parsed()) return Cancel(ctx, cancel_ids, cancel_grace);
  for (CLI::App* cmd : {cordon_cmd, uncordon_cmd, drain_cmd}) {
    if (!cmd->parsed()) continue;
    if (node_mode.grace_seconds && !node_mode.evict) {
      err << "error: --grace needs --evict (without it, the node's tasks run to their end)\n";
      return kExitUsage;
    }
    node_mode.verb = cmd->get_name();
    return SetNodeMode(ctx, node_mode);
  }
  if (wait_cmd->parsed()) {
    WaitOptions options;
    if (!wait_timeout.empty()) {
      options.timeout = DurationFlag("--timeout", wait_timeout, err);
      if (!options.timeout) return kExitUsage;
    }
    auto interval = DurationFlag("--interval", wait_interval, err);
    if (!interval) return kExitUsage;
    options.interval = std::max(*interval, std::chrono::milliseconds(10));
    return Wait(ctx, wait_id, options);
  }
  if (events_cmd->parsed()) return Events(ctx, events_id);
  if (top_cmd->parsed()) return Top(ctx);
  if (usage_cmd->parsed()) return Usage(ctx, usage);
  if (logs_cmd->parsed()) {
    return Logs(ctx, logs_id, {follow, logs_tail, logs_rank});
  }
  err << "error: no command given; run dgpuctl --help\n";
  return kExitUsage;
}

}  // namespace dgpu::ctl
