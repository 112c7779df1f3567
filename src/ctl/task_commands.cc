// dgpuctl's task commands: submit, get tasks / task, events, cancel, wait and logs.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <tuple>
#include <utility>

#include "common/cpu_list.h"
#include "common/number.h"
#include "common/time_util.h"
#include "ctl/api_call.h"
#include "ctl/commands.h"
#include "ctl/format.h"
#include "ctl/render.h"
#include "ctl/sse.h"

namespace dgpu::ctl {

using nlohmann::json;

std::optional<int64_t> ParseMemoryMb(std::string_view text) {
  // A whole number of MiB, or a number with a unit K, M, G or T (powers of 1024, as Slurm's
  // --mem), optionally followed by "i", "B" or "iB": 16G, 512MiB, 1.5T.
  size_t end = 0;
  while (end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) {
    ++end;
  }
  auto number = common::ParseDouble(text.substr(0, end), "--memory");
  if (end == 0 || !number.ok()) return std::nullopt;
  std::string unit(text.substr(end));
  for (const char* suffix : {"iB", "i", "B"}) {
    if (unit.size() > 1 && unit.ends_with(suffix)) {
      unit.resize(unit.size() - std::string_view(suffix).size());
      break;
    }
  }
  double mb = *number;
  if (unit == "K" || unit == "k") {
    mb /= 1024;
  } else if (unit == "G" || unit == "g") {
    mb *= 1024;
  } else if (unit == "T" || unit == "t") {
    mb *= 1024 * 1024;
  } else if (!unit.empty() && unit != "M" && unit != "m") {
    return std::nullopt;
  }
  if (!(mb >= 1) || mb > 1e12 || mb != std::floor(mb)) return std::nullopt;
  return static_cast<int64_t>(mb);
}

std::optional<json> BuildSubmitBody(const SubmitOptions& options, std::string* error) {
  if (options.command.empty()) {
    *error =
        "a command is required after --, e.g. dgpuctl submit --gpus 1 --priority low -- "
        "python train.py";
    return std::nullopt;
  }
  if (!options.gpus && !options.gpus_per_node) {
    *error = "--gpus is required (or --nodes with --gpus-per-node)";
    return std::nullopt;
  }
  json body = json::object();
  body["priority"] = options.priority;
  if (options.gpus) body["gpu_count"] = *options.gpus;
  if (options.nodes) body["nodes"] = *options.nodes;
  if (options.gpus_per_node) body["gpus_per_node"] = *options.gpus_per_node;
  if (!options.cpus.empty()) {
    auto cpus = common::ParseDouble(options.cpus, "--cpus");
    if (!cpus.ok() || !(*cpus > 0)) {
      *error = "--cpus expects a number of CPUs above 0, e.g. 4 or 1.5; got '" + options.cpus + "'";
      return std::nullopt;
    }
    body["cpus"] = *cpus;  // The scheduler says if it has more than 3 decimals.
  }
  if (!options.memory.empty()) {
    auto mb = ParseMemoryMb(options.memory);
    if (!mb) {
      *error =
          "--memory expects MiB or a size with a unit (K, M, G, T: powers of 1024), e.g. "
          "16G or 512M, of at least 1 MiB; got '" +
          options.memory + "'";
      return std::nullopt;
    }
    body["memory_mb"] = *mb;
  }
  body["command"] = JoinCommand(options.command);
  if (!options.model.empty()) body["gpu_model"] = options.model;
  if (!options.name.empty()) body["name"] = options.name;
  if (!options.image.empty()) body["image"] = options.image;
  // KEY=VALUE flags into an object (the scheduler checks the keys and values).
  const auto pairs = [&](const std::vector<std::string>& flags, const std::string& what,
                         const char* key) {
    if (flags.empty()) return true;
    json object = json::object();
    for (const std::string& pair : flags) {
      size_t eq = pair.find('=');
      if (eq == std::string::npos || eq == 0) {
        *error = what + ", got '" + pair + "'";
        return false;
      }
      object[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    body[key] = std::move(object);
    return true;
  };
  if (!pairs(options.env, "--env expects KEY=VALUE", "env") ||
      !pairs(options.selector, "--selector expects KEY=VALUE (a node label)", "node_selector")) {
    return std::nullopt;
  }
  if (!options.timeout.empty()) {
    auto timeout = common::ParseDuration(options.timeout);
    if (!timeout || timeout->count() <= 0 || timeout->count() % 1000 != 0) {
      *error =
          "--time expects a positive whole number of seconds or a duration like 30s, 90m, 2h, "
          "7d; got '" +
          options.timeout + "'";
      return std::nullopt;
    }
    body["timeout_seconds"] = timeout->count() / 1000;
  }
  if (!options.team.empty()) body["team"] = options.team;
  if (options.no_preempt) body["preemptible"] = false;
  if (options.preemption_grace) body["preemption_grace_seconds"] = *options.preemption_grace;
  if (options.array) body["array"] = *options.array;
  if (options.max_retries) body["max_retries"] = *options.max_retries;
  if (options.retry_backoff) body["retry_backoff_seconds"] = *options.retry_backoff;
  json depends_on = json::array();
  for (const auto& [ids, condition, flag] :
       {std::tuple{&options.after_ok, "afterok", "--after-ok"},
        {&options.after_not_ok, "afternotok", "--after-not-ok"},
        {&options.after_any, "afterany", "--after-any"},
        {&options.after, "after", "--after"}}) {
    for (const std::string& id : *ids) {
      // "task-7", or its number alone.
      const bool number = !id.empty() && std::all_of(id.begin(), id.end(), [](unsigned char c) {
        return std::isdigit(c) != 0;
      });
      if (!number && !id.starts_with("task-")) {
        *error = std::string(flag) + " expects a task id such as task-7; got '" + id + "'";
        return std::nullopt;
      }
      depends_on.push_back({{"task_id", number ? "task-" + id : id}, {"condition", condition}});
    }
  }
  if (!depends_on.empty()) body["depends_on"] = std::move(depends_on);
  return body;
}

int Submit(const CtlContext& ctx, const SubmitOptions& options) {
  std::string error;
  auto body = BuildSubmitBody(options, &error);
  if (!body) {
    *ctx.err << "error: " << error << "\n";
    return kExitUsage;
  }
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kPost, "/tasks", &*body, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  std::string id = Field(*reply, "task_id");
  if (id.empty()) return BadResponse(ctx, "the submit response has no task_id");
  if (options.array) {
    // One id per line, by index.
    auto ids = reply->find("task_ids");
    if (ids == reply->end() || !ids->is_array()) {
      return BadResponse(ctx, "the submit response of an array has no task_ids");
    }
    std::string text;
    for (const json& t : *ids) text += (t.is_string() ? t.get<std::string>() : "-") + "\n";
    *ctx.out << text;
    return kExitOk;
  }
  *ctx.out << id << "\n";
  return kExitOk;
}

std::vector<std::string> TaskTableHeader(bool wide) {
  std::vector<std::string> header = {"id",     "name", "team", "priority", "gpus",
                                     "status", "node", "age",  "reason"};
  if (wide) header.insert(header.end(), {"allocated", "attempts", "exit", "command"});
  return header;
}

std::vector<std::string> TaskTableRow(const json& task, Clock::time_point now, bool wide) {
  std::string status = Field(task, "status");
  std::string reason;
  if (status == "pending") {
    reason = Field(task, "pending_reason");
  } else if (status == "failed") {
    reason = Field(task, "error");
    if (reason.empty() && !ExitCodeText(task).empty()) reason = "exit code " + ExitCodeText(task);
  }
  std::vector<std::string> row = {
      Cell(Field(task, "task_id")),  Cell(Field(task, "name")),      Cell(Field(task, "team")),
      Cell(Field(task, "priority")), Cell(Field(task, "gpu_count")), Cell(status),
      Cell(Field(task, "node_id")),  AgeOf(task, "created_at", now), Cell(reason)};
  if (wide) {
    row.insert(row.end(), {Cell(Field(task, "allocated_gpus")), Cell(Field(task, "attempts")),
                           Cell(ExitCodeText(task)), Cell(Field(task, "command"))});
  }
  return row;
}

// Whether a task of the watch stream passes the list's filters.
bool MatchesListFilters(const json& task, const ListTasksOptions& options) {
  return (options.status.empty() || Field(task, "status") == options.status) &&
         (options.priority.empty() || Field(task, "priority") == options.priority) &&
         (options.team.empty() || Field(task, "team") == options.team);
}

// The watch feed's sequence now (the id of the `sync` or `reset` it begins with), read before a
// list so that the watch after the list resumes from it and misses no change made in between;
// nullopt when not known (the watch then begins live).
std::optional<uint64_t> WatchSequence(const CtlContext& ctx) {
  std::optional<uint64_t> seq;
  SseParser parser;
  ctx.http->Stream(ctx.server + kApiPrefix + "/watch", {"Accept: text/event-stream"},
                   [&](std::string_view bytes) {
                     return parser.Feed(bytes, [&](const SseEvent& e) {
                       if (e.event != "sync" && e.event != "reset") return true;
                       seq = e.id;
                       return false;
                     });
                   });
  return seq;
}

// `get tasks --watch`: after the list, one line per change of a matching task since `since`
// (the feed's sequence before the list), in the list's columns (-o json: the task object, one
// per line), until interrupted. A broken stream is resumed where it stopped; a reset (events
// lost) lists again.
int WatchTasks(const CtlContext& ctx, const ListTasksOptions& options, std::vector<size_t> widths,
               std::optional<uint64_t> since) {
  const bool wide = ctx.output == OutputFormat::kWide;
  bool connected = false;
  int failures = 0;
  while (true) {
    SseParser parser;
    bool relist = false;
    std::string bad;
    const std::string url = ctx.server + kApiPrefix + "/watch" +
                            (since ? "?since=" + std::to_string(*since) : std::string());
    HttpResult result =
        ctx.http->Stream(url, {"Accept: text/event-stream"}, [&](std::string_view bytes) {
          return parser.Feed(bytes, [&](const SseEvent& e) {
            connected = true;
            failures = 0;
            if (e.id) since = e.id;
            if (e.event == "reset") {
              relist = true;
              return false;
            }
            if (e.event != "task") return true;
            json task = json::parse(e.data, nullptr, false);
            if (task.is_discarded() || !task.is_object()) {
              bad = "a task event that is not a JSON object";
              return false;
            }
            if (!MatchesListFilters(task, options)) return true;
            if (ctx.output == OutputFormat::kJson) {
              *ctx.out << task.dump() << std::endl;
              return true;
            }
            Table row(TaskTableHeader(wide));
            row.set_min_widths(widths);
            row.AddRow(TaskTableRow(task, ctx.now(), wide));
            *ctx.out << row.Render(false) << std::flush;
            return true;
          });
        });
    if (!bad.empty()) return BadResponse(ctx, bad);
    if (result.has_response() &&
        (result.response->status < 200 || result.response->status >= 300)) {
      ApiFailure failure;
      FailureFromResponse(*result.response, &failure);
      return Fail(ctx, failure);
    }
    if (relist) {
      // Events were lost: what the list shows now is the truth again.
      *ctx.err << "the watch was reset; listing again\n";
      ListTasksOptions again = options;
      again.watch = false;
      if (int rc = GetTasks(ctx, again); rc != kExitOk) return rc;
      continue;
    }
    // The stream ended or broke: resume after the last event, a few times in a row at most.
    if (!connected || ++failures > 5) {
      ApiFailure failure;
      failure.transport = true;
      failure.detail = result.has_response() ? "the watch stream ended" : result.transport_error;
      return Fail(ctx, failure);
    }
    ctx.sleep(std::chrono::milliseconds(1000));
  }
}

int GetTasks(const CtlContext& ctx, const ListTasksOptions& options) {
  std::vector<std::pair<std::string, std::string>> query;
  if (!options.status.empty()) query.emplace_back("status", options.status);
  if (!options.priority.empty()) query.emplace_back("priority", options.priority);
  if (!options.team.empty()) query.emplace_back("team", options.team);
  if (options.limit) query.emplace_back("limit", std::to_string(*options.limit));
  if (options.offset) query.emplace_back("offset", std::to_string(*options.offset));
  if (!options.after.empty()) query.emplace_back("after", options.after);
  std::string path = "/tasks";
  for (size_t i = 0; i < query.size(); ++i) {
    path += (i == 0 ? '?' : '&') + query[i].first + "=" + UrlEncode(query[i].second);
  }
  // A watch resumes from the feed's sequence before the list (as an informer does): a change
  // made between the list and the watch is shown, not lost.
  const std::optional<uint64_t> since = options.watch ? WatchSequence(ctx) : std::nullopt;
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, path, nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    if (options.watch) {
      *ctx.out << std::flush;
      return WatchTasks(ctx, options, {}, since);
    }
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("tasks") || !(*reply)["tasks"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/tasks did not return a tasks array");
  }
  const json& tasks = (*reply)["tasks"];
  const bool wide = ctx.output == OutputFormat::kWide;
  Table table(TaskTableHeader(wide));
  const Clock::time_point now = ctx.now();
  for (const json& task : tasks) table.AddRow(TaskTableRow(task, now, wide));
  if (table.size() == 0) {
    if (!options.watch) *ctx.err << "no tasks found\n";
  } else {
    *ctx.out << table.Render(!ctx.no_headers);
  }
  if (options.watch) {
    *ctx.out << std::flush;
    return WatchTasks(ctx, options, table.Widths(!ctx.no_headers), since);
  }
  auto total_it = reply->find("total");
  auto next_it = reply->find("next");
  const int64_t shown = static_cast<int64_t>(tasks.size());
  if (total_it != reply->end() && total_it->is_number_integer() && shown > 0) {
    const int64_t total = total_it->get<int64_t>();
    const bool more = next_it != reply->end() && next_it->is_string();
    if (!options.after.empty()) {
      // Where a keyset page sits in the list is not known, only what follows it.
      if (more) {
        *ctx.err << "showing " << shown << " of " << total << " tasks; the next page: --after "
                 << next_it->get<std::string>() << "\n";
      }
    } else {
      const int64_t first = options.offset.value_or(0);
      if (more) {
        *ctx.err << "showing tasks " << first + 1 << "-" << first + shown << " of " << total
                 << "; the next page: --after " << next_it->get<std::string>() << "\n";
      } else if (next_it == reply->end() && first + shown < total) {
        // A scheduler that does not page by keyset.
        *ctx.err << "showing tasks " << first + 1 << "-" << first + shown << " of " << total
                 << "; use --limit and --offset to see more\n";
      }
    }
  }
  return kExitOk;
}

std::string DescribeTask(const json& task, Clock::time_point now) {
  std::vector<std::pair<std::string, std::string>> lines = {
      {"ID", Field(task, "task_id")},
      {"Name", Field(task, "name")},
      {"Team", Field(task, "team")},
      {"User", Field(task, "user")},
      {"Priority", Field(task, "priority")},
      {"Status", Field(task, "status")},
      {"Pending Reason", Field(task, "pending_reason")},
      {"GPUs", Field(task, "gpu_count")},
      {"GPU Model", Field(task, "gpu_model")},
      {"Node", Field(task, "node_id")},
      {"Allocated GPUs", Field(task, "allocated_gpus")},
      {"Attempts", Field(task, "attempts")},
      {"Preemptible", YesNo(task, "preemptible")},
      {"Preemption Grace", PreemptionGraceText(task)},
      {"Borrowed", BorrowedText(task)},
      {"Preemptions", Field(task, "preemptions")},
      {"Exit Code", ExitCodeText(task)},
      {"Error", ErrorText(task)},
      {"Command", Field(task, "command")},
      {"Image", Field(task, "image")},
      {"Timeout", TimeoutText(task)},
      {"Created", TimeText(task, "created_at", now)},
      {"Started", TimeText(task, "started_at", now)},
      {"Finished", TimeText(task, "finished_at", now)},
  };
  // Only for the tasks they concern: the description of every other task stays as it was.
  const std::string max_retries = Field(task, "max_retries");
  if (!max_retries.empty() && max_retries != "0") {
    std::string text = Field(task, "retries") + " of " + max_retries + " (backoff " +
                       Field(task, "retry_backoff_seconds") + " s, doubling)";
    if (!Field(task, "retry_at").empty()) {
      text += "; queued again " + TimeText(task, "retry_at", now);
    }
    lines.emplace(lines.begin() + 12, "Retries", text);
  }
  const std::string cpus = Field(task, "cpus");
  const std::string memory = Field(task, "memory_mb");
  if (!cpus.empty() || !memory.empty()) {
    // Each member's, when asked for or given on a node that reports them.
    std::string text =
        (cpus.empty() ? "-" : cpus) + " / " + (memory.empty() ? "-" : memory + " MiB");
    if (task.contains("cpu_set") && task["cpu_set"].is_array()) {
      // The CPUs rank 0 is bound to (executor.cpu_binding: cpuset).
      text +=
          " (bound to CPUs " + common::FormatCpuList(task["cpu_set"].get<std::vector<int>>()) + ")";
    }
    lines.emplace(lines.begin() + 8, "CPUs / Memory", text);
  }
  if (task.contains("usage") && task["usage"].is_object()) {
    // What it used, measured in its cgroups.
    const json& u = task["usage"];
    char text[96];
    std::snprintf(text, sizeof(text), "%.1f CPU seconds, peak memory %lld MiB",
                  u.value("cpu_seconds", 0.0),
                  static_cast<long long>(u.value("max_memory_mb", int64_t{0})));
    lines.emplace(lines.begin() + 8, "Usage", text);
  }
  if (const std::string nodes = Field(task, "nodes"); !nodes.empty() && nodes != "1") {
    // A gang: every member, in rank order, and where they meet.
    std::string members;
    const json& allocation = task.contains("allocation") ? task["allocation"] : json::array();
    for (size_t rank = 0; rank < allocation.size(); ++rank) {
      const json& m = allocation[rank];
      std::string gpus;
      for (const json& i : m.value("gpu_indices", json::array())) {
        gpus += (gpus.empty() ? "" : ",") + i.dump();
      }
      members += (members.empty() ? "" : "; ") + std::to_string(rank) + ": " +
                 m.value("node_id", std::string()) + " [" + gpus + "]";
    }
    lines.emplace(lines.begin() + 8, "Gang",
                  nodes + " nodes x " + Field(task, "gpus_per_node") + " GPUs" +
                      (Field(task, "master_port").empty()
                           ? std::string()
                           : ", rendezvous port " + Field(task, "master_port")));
    if (!members.empty()) lines.emplace(lines.begin() + 9, "Members", members);
  }
  if (!Field(task, "array_size").empty()) {
    lines.emplace(lines.begin() + 2, "Array Index",
                  Field(task, "array_index") + " of " + Field(task, "array_size"));
  }
  if (auto deps = task.find("depends_on");
      deps != task.end() && deps->is_array() && !deps->empty()) {
    // "task-3 (afterok, satisfied), task-4 (after, waiting)", after its pending reason.
    std::string text;
    for (const json& d : *deps) {
      text += (text.empty() ? "" : ", ") + Field(d, "task_id") + " (" + Field(d, "condition") +
              ", " + Field(d, "state") + ")";
    }
    auto reason = std::find_if(lines.begin(), lines.end(),
                               [](const auto& line) { return line.first == "Pending Reason"; });
    lines.emplace(reason == lines.end() ? reason : reason + 1, "Depends On", text);
  }
  if (const std::string detail = Field(task, "pending_detail"); !detail.empty()) {
    // A pending task: which nodes could take it, and why the others cannot.
    auto reason = std::find_if(lines.begin(), lines.end(),
                               [](const auto& line) { return line.first == "Pending Reason"; });
    lines.emplace(reason == lines.end() ? reason : reason + 1, "Placement", detail);
  }
  auto started = common::ParseRfc3339TimePoint(Field(task, "started_at"));
  if (started) {
    auto finished = common::ParseRfc3339TimePoint(Field(task, "finished_at"));
    auto end = finished ? *finished : now;
    lines.emplace_back("Run Time",
                       FormatAge(std::chrono::duration_cast<std::chrono::seconds>(end - *started)));
  }
  std::string env_text;
  auto env = task.find("env");
  if (env != task.end() && env->is_object()) {
    for (const auto& [key, value] : env->items()) env_text += "  " + key + "=" + Text(value) + "\n";
  }
  const size_t width = LabelWidth(lines, std::string("Env").size());
  std::string text = RenderFields(lines, width);
  if (env_text.empty()) {
    text += "Env:" + std::string(width - 3 + 2, ' ') + "-\n";
  } else {
    text += "Env:\n" + env_text;
  }
  return text;
}

int GetTask(const CtlContext& ctx, const std::string& id) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, TaskPath(id), nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object()) return BadResponse(ctx, "the task is not a JSON object");
  *ctx.out << DescribeTask(*reply, ctx.now());
  return kExitOk;
}

int Events(const CtlContext& ctx, const std::string& id) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, TaskPath(id) + "/events", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("events") || !(*reply)["events"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/tasks/{id}/events did not return an events array");
  }
  Table table({"time", "type", "node", "message"});
  for (const json& e : (*reply)["events"]) {
    table.AddRow({Cell(Field(e, "time")), Cell(Field(e, "type")), Cell(Field(e, "node_id")),
                  Cell(Field(e, "message"))});
  }
  *ctx.out << table.Render(!ctx.no_headers);
  return kExitOk;
}

int Cancel(const CtlContext& ctx, const std::vector<std::string>& ids,
           std::optional<int> grace_seconds) {
  const std::string query =
      grace_seconds.has_value() ? "?grace_seconds=" + std::to_string(*grace_seconds) : "";
  int exit_code = kExitOk;
  for (const std::string& id : ids) {
    ApiFailure failure;
    auto reply = CallApi(ctx, HttpMethod::kDelete, TaskPath(id) + query, nullptr, &failure);
    if (!reply) {
      *ctx.err << "error: " << id << ": " << DescribeFailure(failure, ctx.server) << "\n";
      exit_code = kExitApiError;
      continue;
    }
    *ctx.out << id << " cancelled\n";
  }
  return exit_code;
}

int Wait(const CtlContext& ctx, const std::string& id, const WaitOptions& options) {
  const auto start = ctx.monotonic_now();
  while (true) {
    ApiFailure failure;
    auto task = CallApi(ctx, HttpMethod::kGet, TaskPath(id), nullptr, &failure);
    if (!task) return Fail(ctx, failure);
    if (!task->is_object()) return BadResponse(ctx, "the task is not a JSON object");
    std::string status = Field(*task, "status");
    if (IsFinished(status)) {
      if (ctx.output == OutputFormat::kJson) {
        *ctx.out << DumpJson(*task) << "\n";
      } else {
        *ctx.out << id << " " << OutcomeText(*task) << "\n";
      }
      return status == "success" ? kExitOk : kExitTaskFailed;
    }
    auto pause = options.interval;
    if (options.timeout) {
      auto elapsed =
          std::chrono::duration_cast<std::chrono::milliseconds>(ctx.monotonic_now() - start);
      if (elapsed >= *options.timeout) {
        *ctx.err << "error: timed out after " << common::FormatCompoundDuration(*options.timeout)
                 << " waiting for " << id << " (status: " << OrDash(status) << ")\n";
        return kExitWaitTimeout;
      }
      pause = std::min(pause, *options.timeout - elapsed);
    }
    ctx.sleep(pause);
  }
}

int Logs(const CtlContext& ctx, const std::string& id, const LogsOptions& options) {
  const std::string logs_path = TaskPath(id) + "/logs";
  std::string query;
  if (options.tail) query += "&tail=" + std::to_string(*options.tail);
  if (options.follow) query += "&follow=true";
  if (options.rank > 0) query += "&rank=" + std::to_string(options.rank);
  if (!query.empty()) query[0] = '?';
  // The scheduler streams the log from the task's agent; with -f it ends when the task does.
  HttpResult result = ctx.http->Stream(ctx.server + kApiPrefix + logs_path + query, {},
                                       [&](std::string_view bytes) {
                                         *ctx.out << bytes << std::flush;
                                         return true;
                                       });
  if (!result.has_response()) {
    ApiFailure failure;
    failure.transport = true;
    failure.detail = result.transport_error;
    return Fail(ctx, failure);
  }
  const HttpResponse& response = *result.response;
  if (response.status >= 200 && response.status < 300) return kExitOk;
  ApiFailure failure;
  FailureFromResponse(response, &failure);
  if ((response.status == 404 && failure.code != "log_unavailable") || response.status == 405) {
    // Either the task is unknown or this scheduler does not serve logs: ask about the task.
    ApiFailure lookup;
    auto task = CallApi(ctx, HttpMethod::kGet, TaskPath(id), nullptr, &lookup);
    if (!task) return Fail(ctx, lookup);
    std::string node = Field(*task, "node_id");
    *ctx.err << "error: this scheduler does not serve task logs (HTTP " << response.status << " on "
             << kApiPrefix << logs_path << ")\n";
    if (node.empty()) {
      *ctx.err << id
               << " has not been placed on a node yet (status: " << OrDash(Field(*task, "status"))
               << ")\n";
    } else {
      *ctx.err << "the log of " << id << " is <work_dir>/" << id << ".log on node " << node
               << " (work_dir is executor.work_dir in the agent config, default "
               << kDefaultAgentWorkDir << ")\n";
    }
    return kExitApiError;
  }
  return Fail(ctx, failure);
}

}  // namespace dgpu::ctl
