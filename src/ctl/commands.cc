#include "ctl/commands.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <utility>

#include "common/atomic_file.h"
#include "common/number.h"
#include "common/time_util.h"
#include "ctl/format.h"
#include "ctl/sse.h"

namespace dgpu::ctl {
namespace {

using nlohmann::json;
using Clock = std::chrono::system_clock;

constexpr char kApiPrefix[] = "/api/v1";

std::string DumpJson(const json& value) {
  return value.dump(2, ' ', false, json::error_handler_t::replace);
}

// Renders any JSON value as plain text: strings as themselves, null as "", arrays joined by ",".
std::string Text(const json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string joined;
    for (const json& item : value) {
      if (!joined.empty()) joined += ',';
      joined += Text(item);
    }
    return joined;
  }
  if (value.is_object()) return value.dump(-1, ' ', false, json::error_handler_t::replace);
  return value.dump();
}

std::string Field(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it == object.end() ? "" : Text(*it);
}

std::string OrDash(const std::string& text) { return text.empty() ? "-" : text; }

// Table cells must stay on one line.
std::string Cell(const std::string& text) {
  std::string clean;
  for (char c : text) {
    if (c == '\n') {
      clean += "\\n";
    } else if (c == '\t' || c == '\r') {
      clean += ' ';
    } else {
      clean += c;
    }
  }
  return OrDash(clean);
}

std::string AgeOf(const json& object, const char* key, Clock::time_point now) {
  auto when = common::ParseRfc3339TimePoint(Field(object, key));
  if (!when) return "-";
  return FormatAge(std::chrono::duration_cast<std::chrono::seconds>(now - *when));
}

bool IsFinished(const std::string& status) {
  return status == "success" || status == "failed" || status == "cancelled";
}

std::string TaskPath(const std::string& id) { return "/tasks/" + UrlEncode(id); }

std::string TeamPath(const std::string& name) { return "/teams/" + UrlEncode(name); }

// "yes" or "no" for a boolean field; empty when it is absent or not a boolean.
std::string YesNo(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  if (it == object.end() || !it->is_boolean()) return "";
  return it->get<bool>() ? "yes" : "no";
}

// A number without needless digits: "1", "0.5", "1234.5" (at most three decimals).
std::string FormatDecimal(double value) {
  char buffer[512];
  std::snprintf(buffer, sizeof(buffer), "%.3f", value);
  std::string text = buffer;
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  if (text == "-0") text = "0";
  return text;
}

// A numeric field as FormatDecimal writes it; any other value as Field does.
std::string DecimalField(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  if (it != object.end() && it->is_number()) return FormatDecimal(it->get<double>());
  return Field(object, key);
}

// "30s", "7200s (2h)".
std::string SecondsText(int64_t seconds) {
  std::string text = std::to_string(seconds) + "s";
  if (seconds >= 60) {
    text += " (" + common::FormatCompoundDuration(std::chrono::seconds(seconds)) + ")";
  }
  return text;
}

// Aligns "Label:  value" lines on the longest label (and at least `width`); an empty value is
// shown as "-".
size_t LabelWidth(const std::vector<std::pair<std::string, std::string>>& lines, size_t width) {
  for (const auto& line : lines) width = std::max(width, line.first.size());
  return width;
}

std::string RenderFields(const std::vector<std::pair<std::string, std::string>>& lines,
                         size_t width) {
  std::string text;
  for (const auto& [label, value] : lines) {
    text += label + ":" + std::string(width - label.size() + 2, ' ') + OrDash(value) + "\n";
  }
  return text;
}

std::string FirstLine(std::string_view text) {
  size_t end = text.find_first_of("\r\n");
  std::string line(text.substr(0, end));
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return line;
}

int Fail(const CtlContext& ctx, const ApiFailure& failure) {
  *ctx.err << "error: " << DescribeFailure(failure, ctx.server) << "\n";
  return kExitApiError;
}

int BadResponse(const CtlContext& ctx, const std::string& what) {
  ApiFailure failure;
  failure.status = 200;
  failure.detail = what;
  return Fail(ctx, failure);
}

HttpResult SendRaw(const CtlContext& ctx, HttpMethod method, const std::string& path,
                   const std::string& body) {
  return ctx.http->Send(method, ctx.server + kApiPrefix + path, body);
}

// Fills `failure` from a non-2xx response.
void FailureFromResponse(const HttpResponse& response, ApiFailure* failure) {
  failure->status = response.status;
  failure->leader = response.Header("X-Leader");
  json body = json::parse(response.body, nullptr, false);
  if (!body.is_discarded() && body.is_object() && body.contains("error") &&
      body["error"].is_object()) {
    failure->code = Field(body["error"], "code");
    failure->message = Field(body["error"], "message");
  }
  if (failure->code.empty() && failure->message.empty()) {
    failure->detail = FirstLine(response.body);
  }
}

std::string FormatPercent(long basis_points) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f", static_cast<double>(basis_points) / 100.0);
  std::string text = buffer;
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text + "%";
}

std::string TimeoutText(const json& task) {
  auto it = task.find("timeout_seconds");
  if (it == task.end() || !it->is_number() || it->get<double>() <= 0) return "-";
  return SecondsText(it->get<int64_t>());
}

// The SIGTERM-to-SIGKILL time of a preemption: -1 is the scheduler's default.
std::string PreemptionGraceText(const json& task) {
  auto it = task.find("preemption_grace_seconds");
  if (it == task.end() || !it->is_number_integer()) return "";
  auto seconds = it->get<int64_t>();
  if (seconds < 0) return "the scheduler's default";
  return SecondsText(seconds);
}

std::string BorrowedText(const json& task) {
  std::string borrowed = YesNo(task, "borrowed");
  if (borrowed == "yes") return "yes (on GPUs beyond its team's guarantee; may be preempted)";
  return borrowed;
}

std::string ErrorText(const json& task) {
  std::string error = Field(task, "error");
  if (error == "preempted") return "preempted (its GPUs were taken back and it was requeued)";
  return error;
}

std::string TimeText(const json& task, const char* key, Clock::time_point now) {
  std::string raw = Field(task, key);
  if (raw.empty()) return "-";
  auto when = common::ParseRfc3339TimePoint(raw);
  if (!when) return raw;
  // A time still to come (a retry's) reads "in", the others "ago".
  if (*when > now) {
    return raw + " (in " + FormatAge(std::chrono::ceil<std::chrono::seconds>(*when - now)) + ")";
  }
  return raw + " (" + FormatAge(std::chrono::duration_cast<std::chrono::seconds>(now - *when)) +
         " ago)";
}

std::string ExitCodeText(const json& task) {
  auto it = task.find("exit_code");
  if (it == task.end() || it->is_null()) return "";
  return Text(*it);
}

// "failed (exit code 2): out of memory", "success", "cancelled".
std::string OutcomeText(const json& task) {
  std::string text = Field(task, "status");
  std::string exit_code = ExitCodeText(task);
  if (!exit_code.empty() && text != "success") text += " (exit code " + exit_code + ")";
  std::string error = Field(task, "error");
  if (!error.empty()) text += ": " + error;
  return text;
}

}  // namespace

std::string DescribeFailure(const ApiFailure& failure, const std::string& server) {
  if (failure.transport) {
    return "cannot reach the scheduler at " + server + ": " + failure.detail;
  }
  if (failure.status == 503 && !failure.leader.empty()) {
    return "this scheduler is a standby; the leader is at " + failure.leader;
  }
  if (!failure.code.empty() || !failure.message.empty()) {
    std::string text = OrDash(failure.message) + " (" + OrDash(failure.code) + ", HTTP " +
                       std::to_string(failure.status) + ")";
    if (failure.status == 401) {
      text += "; give a token with --token, $DGPU_TOKEN or the config file's token";
    }
    return text;
  }
  if (failure.status >= 200 && failure.status < 300) {
    return "invalid response from the scheduler: " + failure.detail;
  }
  std::string text = "unexpected HTTP " + std::to_string(failure.status) + " from the scheduler";
  if (!failure.detail.empty()) text += ": " + failure.detail;
  return text;
}

std::optional<json> CallApi(const CtlContext& ctx, HttpMethod method, const std::string& path,
                            const json* body, ApiFailure* failure) {
  HttpResult result = SendRaw(ctx, method, path, body ? body->dump() : std::string());
  if (!result.has_response()) {
    failure->transport = true;
    failure->detail = result.transport_error;
    return std::nullopt;
  }
  const HttpResponse& response = *result.response;
  if (response.status < 200 || response.status >= 300) {
    FailureFromResponse(response, failure);
    return std::nullopt;
  }
  if (response.body.empty()) return json();
  json parsed = json::parse(response.body, nullptr, false);
  if (parsed.is_discarded()) {
    failure->status = response.status;
    failure->detail = "the body of " + std::string(HttpMethodName(method)) + " " + kApiPrefix +
                      path + " is not JSON";
    return std::nullopt;
  }
  return parsed;
}

std::optional<json> BuildSubmitBody(const SubmitOptions& options, std::string* error) {
  if (options.command.empty()) {
    *error =
        "a command is required after --, e.g. dgpuctl submit --gpus 1 --priority low -- "
        "python train.py";
    return std::nullopt;
  }
  json body = json::object();
  body["priority"] = options.priority;
  body["gpu_count"] = options.gpus;
  body["command"] = JoinCommand(options.command);
  if (!options.model.empty()) body["gpu_model"] = options.model;
  if (!options.name.empty()) body["name"] = options.name;
  if (!options.image.empty()) body["image"] = options.image;
  if (!options.env.empty()) {
    json env = json::object();
    for (const std::string& pair : options.env) {
      size_t eq = pair.find('=');
      if (eq == std::string::npos || eq == 0) {
        *error = "--env expects KEY=VALUE, got '" + pair + "'";
        return std::nullopt;
      }
      env[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    body["env"] = std::move(env);
  }
  if (!options.timeout.empty()) {
    auto timeout = common::ParseDuration(options.timeout);
    if (!timeout || timeout->count() <= 0 || timeout->count() % 1000 != 0) {
      *error =
          "--timeout expects a positive whole number of seconds or a duration like 30s, 5m, "
          "2h; got '" +
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

// `get tasks --watch`: after the list, one line per change of a matching task, in the list's
// columns (-o json: the task object, one per line), until interrupted. A broken stream is
// resumed where it stopped; a reset (events lost) lists again.
int WatchTasks(const CtlContext& ctx, const ListTasksOptions& options, std::vector<size_t> widths) {
  const bool wide = ctx.output == OutputFormat::kWide;
  std::optional<uint64_t> since;
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
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, path, nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    if (options.watch) {
      *ctx.out << std::flush;
      return WatchTasks(ctx, options, {});
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
    return WatchTasks(ctx, options, table.Widths(!ctx.no_headers));
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
  if (!Field(task, "array_size").empty()) {
    lines.emplace(lines.begin() + 2, "Array Index",
                  Field(task, "array_index") + " of " + Field(task, "array_size"));
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

int Usage(const CtlContext& ctx, const UsageOptions& options) {
  std::string path = "/usage?group_by=" + UrlEncode(options.by);
  if (!options.from.empty()) path += "&from=" + UrlEncode(options.from);
  if (!options.to.empty()) path += "&to=" + UrlEncode(options.to);
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, path, nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("groups") || !(*reply)["groups"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/usage did not return a groups array");
  }
  Table table({options.by, "gpu-hours", "gpu-seconds", "tasks"});
  for (const json& g : (*reply)["groups"]) {
    const auto seconds = g.find("gpu_seconds");
    char hours[32] = "-";
    char secs[32] = "-";
    if (seconds != g.end() && seconds->is_number()) {
      std::snprintf(hours, sizeof(hours), "%.2f", seconds->get<double>() / 3600.0);
      std::snprintf(secs, sizeof(secs), "%.1f", seconds->get<double>());
    }
    const std::string name = Field(g, "name");
    table.AddRow({name.empty() ? "(none)" : name, hours, secs, Cell(Field(g, "tasks"))});
  }
  if (!ctx.no_headers) {
    *ctx.out << "GPU time from " << Field(*reply, "from") << " to " << Field(*reply, "to") << "\n";
  }
  if (table.size() == 0) {
    *ctx.err << "no GPU time in this range\n";
    return kExitOk;
  }
  *ctx.out << table.Render(!ctx.no_headers);
  return kExitOk;
}

int GetGpus(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/gpus", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("gpus") || !(*reply)["gpus"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/gpus did not return a gpus array");
  }
  // The health column only when a GPU is unhealthy: the usual table stays as it was.
  bool any_reason = false;
  for (const json& gpu : (*reply)["gpus"])
    any_reason = any_reason || !Field(gpu, "health_reason").empty();
  std::vector<std::string> columns = {"id", "node", "index", "model", "memory", "status", "task"};
  if (any_reason) columns.push_back("health");
  Table table(columns);
  for (const json& gpu : (*reply)["gpus"]) {
    std::string memory = Field(gpu, "memory_mb");
    std::vector<std::string> row = {Cell(Field(gpu, "id")),
                                    Cell(Field(gpu, "node_id")),
                                    Cell(Field(gpu, "index")),
                                    Cell(Field(gpu, "model")),
                                    memory.empty() ? "-" : memory + "MB",
                                    Cell(Field(gpu, "status")),
                                    Cell(Field(gpu, "current_task"))};
    if (any_reason) row.push_back(Cell(Field(gpu, "health_reason")));
    table.AddRow(std::move(row));
  }
  if (table.size() == 0) {
    *ctx.err << "no GPUs found\n";
    return kExitOk;
  }
  *ctx.out << table.Render(!ctx.no_headers);
  if (!ctx.no_headers) {
    *ctx.out << "\n"
             << OrDash(Field(*reply, "total")) << " GPUs: " << OrDash(Field(*reply, "idle"))
             << " idle, " << OrDash(Field(*reply, "busy")) << " busy, "
             << OrDash(Field(*reply, "offline")) << " offline";
    const std::string unhealthy = Field(*reply, "unhealthy");
    if (!unhealthy.empty() && unhealthy != "0") *ctx.out << ", " << unhealthy << " unhealthy";
    *ctx.out << "\n";
  }
  return kExitOk;
}

namespace {

// One node's line of `top`, from its GPUs in GET /gpus.
struct NodeUse {
  int gpus = 0, busy = 0, idle = 0, offline = 0, unhealthy = 0;
  int reporting = 0;       // GPUs with a utilization
  double utilization = 0;  // Their sum
  std::string map;         // One character per GPU, by index: # busy . idle x offline ! unhealthy
};

std::string Percent(double ratio) { return std::to_string(std::lround(ratio * 100)) + "%"; }

// "a2" before "a10": names compared with their digit runs as numbers.
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      const std::string da = a.substr(i, ei - i), db = b.substr(j, ej - j);
      if (da.size() != db.size()) return da.size() < db.size();
      if (da != db) return da < db;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

int Top(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/gpus", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (!reply->is_object() || !reply->contains("gpus") || !(*reply)["gpus"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/gpus did not return a gpus array");
  }
  std::map<std::string, NodeUse> nodes;
  std::map<std::string, std::map<int, char>> maps;
  NodeUse all;
  for (const json& gpu : (*reply)["gpus"]) {
    const std::string node = Field(gpu, "node_id");
    const std::string status = Field(gpu, "status");
    NodeUse& n = nodes[node];
    char mark = '.';
    for (NodeUse* u : {&n, &all}) {
      u->gpus++;
      if (status == "busy") {
        u->busy++;
        mark = '#';
      } else if (status == "offline") {
        u->offline++;
        mark = 'x';
      } else if (status == "unhealthy") {
        u->unhealthy++;
        mark = '!';
      } else {
        u->idle++;
      }
      auto util = gpu.find("utilization");
      if (util != gpu.end() && util->is_number() && status != "offline") {
        u->reporting++;
        u->utilization += util->get<double>();
      }
    }
    maps[node][gpu.value("index", 0)] = mark;
  }
  std::vector<std::string> order;
  for (auto& [name, use] : nodes) {
    for (const auto& [index, mark] : maps[name]) use.map += mark;
    order.push_back(name);
  }
  std::sort(order.begin(), order.end(), NaturalLess);
  const auto util_of = [](const NodeUse& u) {
    return u.reporting == 0 ? json(nullptr) : json(u.utilization / u.reporting);
  };
  if (ctx.output == OutputFormat::kJson) {
    json out = json::array();
    for (const auto& name : order) {
      const NodeUse& u = nodes[name];
      out.push_back({{"node_id", name},
                     {"gpus", u.gpus},
                     {"busy", u.busy},
                     {"idle", u.idle},
                     {"offline", u.offline},
                     {"unhealthy", u.unhealthy},
                     {"utilization", util_of(u)}});
    }
    *ctx.out << DumpJson(json{{"nodes", out}}) << "\n";
    return kExitOk;
  }
  if (order.empty()) {
    *ctx.err << "no GPUs found\n";
    return kExitOk;
  }
  Table table({"node", "gpus", "busy", "idle", "down", "util", "gpu use"});
  for (const auto& name : order) {
    const NodeUse& u = nodes[name];
    table.AddRow({name, std::to_string(u.gpus), std::to_string(u.busy), std::to_string(u.idle),
                  std::to_string(u.offline + u.unhealthy),
                  u.reporting == 0 ? "-" : Percent(u.utilization / u.reporting), u.map});
  }
  *ctx.out << table.Render(!ctx.no_headers);
  if (!ctx.no_headers) {
    *ctx.out << "\n"
             << all.gpus << " GPUs: " << all.busy << " busy ("
             << Percent(static_cast<double>(all.busy) / all.gpus) << "), " << all.idle << " idle, "
             << all.offline << " offline";
    if (all.unhealthy > 0) *ctx.out << ", " << all.unhealthy << " unhealthy";
    if (all.reporting > 0) {
      *ctx.out << "; utilization " << Percent(all.utilization / all.reporting) << " on "
               << all.reporting << " reporting GPUs";
    }
    *ctx.out << "\n(gpu use: # busy, . idle, x offline, ! unhealthy)\n";
  }
  return kExitOk;
}

int GetAgents(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/agents", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("agents") || !(*reply)["agents"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/agents did not return an agents array");
  }
  Table table({"id", "address", "status", "gpus", "free", "tasks", "last heartbeat"});
  const Clock::time_point now = ctx.now();
  for (const json& agent : (*reply)["agents"]) {
    std::string gpus;
    auto it = agent.find("gpus");
    if (it != agent.end() && it->is_array()) {
      gpus = std::to_string(it->size());
    } else {
      gpus = Field(agent, "gpus");
    }
    std::string heartbeat = AgeOf(agent, "last_heartbeat", now);
    table.AddRow({Cell(Field(agent, "id")), Cell(Field(agent, "address")),
                  Cell(Field(agent, "status")), Cell(gpus), Cell(Field(agent, "free_gpus")),
                  Cell(Field(agent, "tasks")), heartbeat == "-" ? "-" : heartbeat + " ago"});
  }
  if (table.size() == 0) {
    *ctx.err << "no agents found\n";
    return kExitOk;
  }
  *ctx.out << table.Render(!ctx.no_headers);
  return kExitOk;
}

int GetAutoscale(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/autoscale", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("groups") || !(*reply)["groups"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/autoscale did not return a groups array");
  }
  if (!reply->value("enabled", false)) {
    *ctx.err << "autoscaling is off (autoscale.enabled in the scheduler's configuration)\n";
    return kExitOk;
  }
  Table table({"group", "model", "gpus/node", "nodes", "online", "idle", "booting", "releasing",
               "waiting", "last error"});
  for (const json& g : (*reply)["groups"]) {
    const int booting = g.value("booting", 0) + g.value("requested", 0);
    const std::string error = Field(g, "last_error");
    table.AddRow({Cell(Field(g, "name")), Cell(Field(g, "model")), Cell(Field(g, "gpus_per_node")),
                  Field(g, "min_nodes") + ".." + Field(g, "max_nodes"), Cell(Field(g, "online")),
                  Cell(Field(g, "idle")), std::to_string(booting), Cell(Field(g, "releasing")),
                  Cell(Field(g, "waiting_tasks")), error.empty() ? "-" : error});
  }
  *ctx.out << table.Render(!ctx.no_headers);
  return kExitOk;
}

int ShowQuota(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/quota", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object()) return BadResponse(ctx, "GET /api/v1/quota did not return an object");
  Table table({"class", "quota", "used", "available", "borrowed", "lent"});
  for (const char* name : {"online", "batch"}) {
    json klass = reply->value(name, json::object());
    table.AddRow({name, Cell(Field(klass, "quota")), Cell(Field(klass, "used")),
                  Cell(Field(klass, "available")), Cell(Field(klass, "borrowed")),
                  Cell(Field(klass, "lent"))});
  }
  *ctx.out << table.Render(!ctx.no_headers);
  if (ctx.no_headers) return kExitOk;
  *ctx.out << "\ntotal GPUs: " << OrDash(Field(*reply, "total_gpus")) << "\n";
  // The teams holding a guarantee or GPUs in each class (a scheduler with teams sends them).
  Table teams({"team", "class", "guaranteed", "used", "borrowed"});
  for (const char* name : {"online", "batch"}) {
    json klass = reply->value(name, json::object());
    auto it = klass.find("teams");
    if (it == klass.end() || !it->is_object()) continue;
    for (const auto& [team, use] : it->items()) {
      teams.AddRow({Cell(team), name, Cell(Field(use, "guaranteed")), Cell(Field(use, "used")),
                    Cell(Field(use, "borrowed"))});
    }
  }
  if (teams.size() > 0) *ctx.out << "\n" << teams.Render(true);
  return kExitOk;
}

int SetQuota(const CtlContext& ctx, double online_percent) {
  if (!(online_percent >= 0.0 && online_percent <= 1.0)) {
    *ctx.err << "error: --online must be a fraction between 0 and 1, e.g. 0.7\n";
    return kExitUsage;
  }
  json body = {{"online_percent", online_percent}};
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kPut, "/quota", &body, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  long online_bp = std::lround(online_percent * 10000);
  *ctx.out << "quota updated: online " << FormatPercent(online_bp) << ", batch "
           << FormatPercent(10000 - online_bp) << "\n";
  return kExitOk;
}

namespace {

// "16/4/0": the GPUs guaranteed to the team in a class, those it uses, and those of them beyond
// its guarantee.
std::string TeamClassCell(const json& team, const char* name) {
  auto it = team.find(name);
  if (it == team.end() || !it->is_object()) return "-";
  return OrDash(Field(*it, "guaranteed")) + "/" + OrDash(Field(*it, "used")) + "/" +
         OrDash(Field(*it, "borrowed"));
}

// "16 guaranteed, 4 used, 0 borrowed".
std::string TeamClassText(const json& team, const char* name) {
  auto it = team.find(name);
  if (it == team.end() || !it->is_object()) return "";
  return OrDash(Field(*it, "guaranteed")) + " guaranteed, " + OrDash(Field(*it, "used")) +
         " used, " + OrDash(Field(*it, "borrowed")) + " borrowed";
}

// max_gpus: null is no cap.
std::string MaxGpusText(const json& team) {
  auto it = team.find("max_gpus");
  if (it == team.end()) return "";
  return it->is_null() ? "none" : Text(*it);
}

// Whole GPUs from an option's text: 0 or more.
std::optional<int64_t> ParseGpus(const std::string& text) {
  StatusOr<int64_t> value = common::ParseInt64(text, "");
  if (!value.ok() || *value < 0) return std::nullopt;
  return *value;
}

}  // namespace

std::string DescribeTeam(const json& team) {
  std::string max_gpus = MaxGpusText(team);
  if (max_gpus == "none") max_gpus = "none (no cap)";
  std::string usage = DecimalField(team, "usage_gpu_seconds");
  if (!usage.empty()) usage += " GPU-seconds";
  std::vector<std::pair<std::string, std::string>> lines = {
      {"Team", Field(team, "name")},
      {"Configured", YesNo(team, "configured")},
      {"Online", TeamClassText(team, "online")},
      {"Batch", TeamClassText(team, "batch")},
      {"Max GPUs", max_gpus},
      {"Weight", DecimalField(team, "weight")},
      {"Pending", Field(team, "pending")},
      {"Usage", usage},
  };
  return RenderFields(lines, LabelWidth(lines, 0));
}

int GetTeams(const CtlContext& ctx) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, "/teams", nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("teams") || !(*reply)["teams"].is_array()) {
    return BadResponse(ctx, "GET /api/v1/teams did not return a teams array");
  }
  const bool wide = ctx.output == OutputFormat::kWide;
  std::vector<std::string> header = {"team", "online", "batch", "max gpus", "weight", "pending"};
  if (wide) header.insert(header.end(), {"configured", "usage (gpu-s)"});
  Table table(header);
  for (const json& team : (*reply)["teams"]) {
    std::vector<std::string> row = {
        Cell(Field(team, "name")),          TeamClassCell(team, "online"),
        TeamClassCell(team, "batch"),       Cell(MaxGpusText(team)),
        Cell(DecimalField(team, "weight")), Cell(Field(team, "pending"))};
    if (wide) {
      row.insert(row.end(),
                 {Cell(YesNo(team, "configured")), Cell(DecimalField(team, "usage_gpu_seconds"))});
    }
    table.AddRow(std::move(row));
  }
  if (table.size() == 0) {
    *ctx.err << "no teams found\n";
    return kExitOk;
  }
  *ctx.out << table.Render(!ctx.no_headers);
  if (!ctx.no_headers) {
    *ctx.out << "\nONLINE, BATCH: guaranteed/used/borrowed GPUs (borrowed: used beyond the "
                "guarantee)\n";
  }
  return kExitOk;
}

int GetTeam(const CtlContext& ctx, const std::string& name) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kGet, TeamPath(name), nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object()) return BadResponse(ctx, "the team is not a JSON object");
  *ctx.out << DescribeTeam(*reply);
  return kExitOk;
}

std::optional<json> BuildTeamBody(const TeamOptions& options, std::string* error) {
  if (!options.online && !options.batch && !options.max_gpus && !options.weight) {
    *error = "team set needs at least one of --online, --batch, --max-gpus, --weight";
    return std::nullopt;
  }
  json body = json::object();
  for (const auto& [flag, key, value] : {std::tuple{"--online", "online", &options.online},
                                         std::tuple{"--batch", "batch", &options.batch}}) {
    if (!value->has_value()) continue;
    auto gpus = ParseGpus(**value);
    if (!gpus) {
      *error =
          std::string(flag) + " expects a whole number of GPUs, 0 or more; got '" + **value + "'";
      return std::nullopt;
    }
    body[key] = *gpus;
  }
  if (options.max_gpus) {
    if (*options.max_gpus == "none") {
      body["max_gpus"] = nullptr;
    } else {
      auto gpus = ParseGpus(*options.max_gpus);
      if (!gpus) {
        *error = "--max-gpus expects a whole number of GPUs, 0 or more, or none (no cap); got '" +
                 *options.max_gpus + "'";
        return std::nullopt;
      }
      body["max_gpus"] = *gpus;
    }
  }
  if (options.weight) {
    StatusOr<double> weight = common::ParseDouble(*options.weight, "--weight");
    if (!weight.ok() || !(*weight > 0)) {
      *error = "--weight expects a number above 0, e.g. 1 or 2.5; got '" + *options.weight + "'";
      return std::nullopt;
    }
    body["weight"] = *weight;
  }
  return body;
}

int SetTeam(const CtlContext& ctx, const TeamOptions& options) {
  std::string error;
  auto body = BuildTeamBody(options, &error);
  if (!body) {
    *ctx.err << "error: " << error << "\n";
    return kExitUsage;
  }
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kPut, TeamPath(options.name), &*body, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object()) return BadResponse(ctx, "the team is not a JSON object");
  *ctx.out << DescribeTeam(*reply);
  return kExitOk;
}

int DeleteTeam(const CtlContext& ctx, const std::string& name) {
  ApiFailure failure;
  auto reply = CallApi(ctx, HttpMethod::kDelete, TeamPath(name), nullptr, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  *ctx.out << "team " << name << " deleted\n";
  return kExitOk;
}

int SetNodeMode(const CtlContext& ctx, const NodeModeOptions& options) {
  ApiFailure failure;
  json body = json::object();
  if (options.verb == "drain") {
    if (options.evict) body["evict"] = true;
    if (options.grace_seconds) body["grace_seconds"] = *options.grace_seconds;
  }
  auto reply = CallApi(ctx, HttpMethod::kPost,
                       "/agents/" + UrlEncode(options.node) + "/" + options.verb, &body, &failure);
  if (!reply) return Fail(ctx, failure);
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson(*reply) << "\n";
    return kExitOk;
  }
  if (!reply->is_object() || !reply->contains("agent") || !(*reply)["agent"].is_object()) {
    return BadResponse(ctx, "the answer has no agent object");
  }
  const json& agent = (*reply)["agent"];
  *ctx.out << "node " << options.node << " is " << Field(agent, "status");
  if (options.verb == "drain") {
    const std::string tasks = Field(agent, "tasks");
    if (options.evict) {
      *ctx.out << "; " << Field(*reply, "evicted") << " task(s) evicted (requeued)";
    } else if (!tasks.empty() && tasks != "0") {
      *ctx.out << "; its " << tasks << " task(s) run to their end";
    }
  }
  *ctx.out << "\n";
  return kExitOk;
}

namespace {

// "12.0 KiB", "312.4 MiB".
std::string FormatBytes(int64_t bytes) {
  static const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return std::to_string(bytes) + " bytes";
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

// The header every SQLite database file starts with.
bool IsSqliteFile(const std::string& path) {
  static constexpr char kMagic[] = "SQLite format 3";  // With its NUL: 16 bytes.
  char head[sizeof(kMagic)] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(head, sizeof(head));
  return in.gcount() == sizeof(head) && std::equal(head, head + sizeof(head), kMagic);
}

}  // namespace

int Snapshot(const CtlContext& ctx, const SnapshotOptions& options) {
  std::error_code ec;
  if (std::filesystem::exists(options.path, ec) && !options.force) {
    *ctx.err << "error: " << options.path << " exists; give --force to replace it\n";
    return kExitUsage;
  }
  if (std::filesystem::is_directory(options.path, ec)) {
    *ctx.err << "error: " << options.path << " is a directory; give the file to write\n";
    return kExitUsage;
  }
  const std::string part = options.path + ".part";
  const std::string url = ctx.server + kApiPrefix + "/snapshot";
  HttpResult result = ctx.http->Download(url, part);
  ApiFailure failure;
  if (!result.has_response()) {
    failure.transport = true;
    failure.detail = result.transport_error;
    return Fail(ctx, failure);
  }
  const HttpResponse& response = *result.response;
  if (response.status < 200 || response.status >= 300) {
    FailureFromResponse(response, &failure);
    return Fail(ctx, failure);
  }
  if (!IsSqliteFile(part)) {
    std::filesystem::remove(part, ec);
    return BadResponse(ctx, "the snapshot is not a SQLite database");
  }
  const int64_t bytes = static_cast<int64_t>(std::filesystem::file_size(part, ec));
  if (Status s = common::ReplaceFileAtomically(part, options.path); !s.ok()) {
    std::filesystem::remove(part, ec);
    *ctx.err << "error: cannot save the snapshot: " << s.message() << "\n";
    return kExitApiError;
  }
  auto number = [&](const char* header) -> json {
    StatusOr<int64_t> value = common::ParseInt64(response.Header(header), header);
    return value.ok() ? json(*value) : json(nullptr);
  };
  const json tasks = number("X-Dgpu-Snapshot-Tasks");
  const json seq = number("X-Dgpu-Snapshot-Seq");
  const json epoch = number("X-Dgpu-Snapshot-Epoch");
  if (ctx.output == OutputFormat::kJson) {
    *ctx.out << DumpJson({{"path", options.path},
                          {"bytes", bytes},
                          {"tasks", tasks},
                          {"last_applied_seq", seq},
                          {"epoch", epoch}})
             << "\n";
    return kExitOk;
  }
  *ctx.out << "saved a snapshot";
  if (!tasks.is_null()) *ctx.out << " of " << tasks.get<int64_t>() << " tasks";
  if (!seq.is_null()) *ctx.out << " (journal seq " << seq.get<int64_t>();
  if (!seq.is_null() && !epoch.is_null()) *ctx.out << ", epoch " << epoch.get<int64_t>();
  if (!seq.is_null()) *ctx.out << ")";
  *ctx.out << " to " << options.path << ", " << FormatBytes(bytes) << "\n";
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
