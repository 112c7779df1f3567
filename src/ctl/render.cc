#include "ctl/render.h"

#include <algorithm>
#include <cstdio>

#include "common/time_util.h"
#include "ctl/format.h"

namespace dgpu::ctl {

using nlohmann::json;

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

}  // namespace dgpu::ctl
