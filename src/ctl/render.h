// How dgpuctl shows what the API answers: JSON values as table cells and text, ages and times,
// and the task fields that read differently from their JSON (timeouts, grace, outcomes).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dgpu::ctl {

using json = nlohmann::json;
using Clock = std::chrono::system_clock;

std::string DumpJson(const json& value);

// Renders any JSON value as plain text: strings as themselves, null as "", arrays joined by ",".
std::string Text(const json& value);

std::string Field(const json& object, const char* key);

std::string OrDash(const std::string& text);

// Table cells must stay on one line.
std::string Cell(const std::string& text);

std::string AgeOf(const json& object, const char* key, Clock::time_point now);

bool IsFinished(const std::string& status);

// "yes" or "no" for a boolean field; empty when it is absent or not a boolean.
std::string YesNo(const json& object, const char* key);

// A number without needless digits: "1", "0.5", "1234.5" (at most three decimals).
std::string FormatDecimal(double value);

// A numeric field as FormatDecimal writes it; any other value as Field does.
std::string DecimalField(const json& object, const char* key);

// "30s", "7200s (2h)".
std::string SecondsText(int64_t seconds);

// Aligns "Label:  value" lines on the longest label (and at least `width`); an empty value is
// shown as "-".
size_t LabelWidth(const std::vector<std::pair<std::string, std::string>>& lines, size_t width);

std::string RenderFields(const std::vector<std::pair<std::string, std::string>>& lines,
                         size_t width);

std::string FirstLine(std::string_view text);

std::string FormatPercent(long basis_points);

std::string TimeoutText(const json& task);

// The SIGTERM-to-SIGKILL time of a preemption: -1 is the scheduler's default.
std::string PreemptionGraceText(const json& task);

std::string BorrowedText(const json& task);

std::string ErrorText(const json& task);

std::string TimeText(const json& task, const char* key, Clock::time_point now);

std::string ExitCodeText(const json& task);

// "failed (exit code 2): out of memory", "success", "cancelled".
std::string OutcomeText(const json& task);

}  // namespace dgpu::ctl
