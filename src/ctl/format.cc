#include "ctl/format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>

namespace dgpu::ctl {
namespace {

using std::chrono::milliseconds;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Reads an unsigned decimal number ("12", "1.5") at `pos`; returns false when none is there.
bool ReadNumber(std::string_view text, size_t& pos, double& value) {
  size_t start = pos;
  bool digits = false;
  bool dot = false;
  while (pos < text.size()) {
    char c = text[pos];
    if (IsDigit(c)) {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
    ++pos;
  }
  if (!digits || pos - start > 15) {
    pos = start;
    return false;
  }
  value = std::stod(std::string(text.substr(start, pos - start)));
  return true;
}

// Reads exactly `count` digits at `pos` into `value`.
bool ReadFixed(std::string_view text, size_t& pos, int count, int& value) {
  if (pos + count > text.size()) return false;
  value = 0;
  for (int i = 0; i < count; ++i) {
    char c = text[pos + i];
    if (!IsDigit(c)) return false;
    value = value * 10 + (c - '0');
  }
  pos += count;
  return true;
}

bool Expect(std::string_view text, size_t& pos, char wanted) {
  if (pos >= text.size() || std::tolower(static_cast<unsigned char>(text[pos])) != wanted) {
    return false;
  }
  ++pos;
  return true;
}

constexpr double kMaxMilliseconds = 1e15;

}  // namespace

std::optional<milliseconds> ParseDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t pos = 0;
  double value = 0;
  if (!ReadNumber(text, pos, value)) return std::nullopt;
  if (pos == text.size()) {
    double ms = value * 1000.0;
    if (ms > kMaxMilliseconds) return std::nullopt;
    return milliseconds(static_cast<int64_t>(std::llround(ms)));
  }
  pos = 0;
  double total_ms = 0;
  while (pos < text.size()) {
    if (!ReadNumber(text, pos, value)) return std::nullopt;
    size_t unit_start = pos;
    while (pos < text.size() && std::isalpha(static_cast<unsigned char>(text[pos]))) ++pos;
    std::string_view unit = text.substr(unit_start, pos - unit_start);
    double scale = 0;
    if (unit == "ms") {
      scale = 1;
    } else if (unit == "s") {
      scale = 1000;
    } else if (unit == "m") {
      scale = 60'000;
    } else if (unit == "h") {
      scale = 3'600'000;
    } else if (unit == "d") {
      scale = 86'400'000;
    } else {
      return std::nullopt;
    }
    total_ms += value * scale;
    if (total_ms > kMaxMilliseconds) return std::nullopt;
  }
  return milliseconds(static_cast<int64_t>(std::llround(total_ms)));
}

std::string FormatAge(std::chrono::seconds age) {
  int64_t s = std::max<int64_t>(age.count(), 0);
  if (s < 120) return std::to_string(s) + "s";
  int64_t m = s / 60;
  if (m < 120) return std::to_string(m) + "m";
  int64_t h = m / 60;
  if (h < 48) return std::to_string(h) + "h";
  int64_t d = h / 24;
  if (d < 730) return std::to_string(d) + "d";
  return std::to_string(d / 365) + "y";
}

std::string FormatDuration(milliseconds duration) {
  int64_t ms = std::max<int64_t>(duration.count(), 0);
  if (ms == 0) return "0s";
  std::string text;
  const std::pair<int64_t, const char*> units[] = {
      {86'400'000, "d"}, {3'600'000, "h"}, {60'000, "m"}, {1000, "s"}, {1, "ms"}};
  for (const auto& [scale, name] : units) {
    if (ms >= scale) {
      text += std::to_string(ms / scale) + name;
      ms %= scale;
    }
  }
  return text;
}

std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view text) {
  size_t pos = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!ReadFixed(text, pos, 4, year) || !Expect(text, pos, '-') ||
      !ReadFixed(text, pos, 2, month) || !Expect(text, pos, '-') || !ReadFixed(text, pos, 2, day)) {
    return std::nullopt;
  }
  if (pos >= text.size() || (text[pos] != 'T' && text[pos] != 't' && text[pos] != ' ')) {
    return std::nullopt;
  }
  ++pos;
  if (!ReadFixed(text, pos, 2, hour) || !Expect(text, pos, ':') ||
      !ReadFixed(text, pos, 2, minute) || !Expect(text, pos, ':') ||
      !ReadFixed(text, pos, 2, second)) {
    return std::nullopt;
  }
  int64_t nanos = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && IsDigit(text[pos])) {
      if (digits < 9) {
        nanos = nanos * 10 + (text[pos] - '0');
        ++digits;
      }
      ++pos;
    }
    if (digits == 0) return std::nullopt;
    for (; digits < 9; ++digits) nanos *= 10;
  }
  int offset_minutes = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int oh = 0, om = 0;
    if (!ReadFixed(text, pos, 2, oh) || !Expect(text, pos, ':') || !ReadFixed(text, pos, 2, om)) {
      return std::nullopt;
    }
    offset_minutes = sign * (oh * 60 + om);
  } else {
    return std::nullopt;
  }
  if (pos != text.size()) return std::nullopt;
  std::chrono::year_month_day date{std::chrono::year(year), std::chrono::month(month),
                                   std::chrono::day(day)};
  if (!date.ok() || hour > 23 || minute > 59 || second > 60) return std::nullopt;
  auto tp = std::chrono::sys_days(date) + std::chrono::hours(hour) +
            std::chrono::minutes(minute - offset_minutes) + std::chrono::seconds(second) +
            std::chrono::nanoseconds(nanos);
  return std::chrono::time_point_cast<std::chrono::system_clock::duration>(tp);
}

std::string ShellQuote(std::string_view word) {
  auto safe = [](unsigned char c) {
    return std::isalnum(c) ||
           std::string_view("_@%+=:,./-").find(static_cast<char>(c)) != std::string_view::npos;
  };
  if (!word.empty() && std::all_of(word.begin(), word.end(), safe)) return std::string(word);
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  quoted += "'";
  return quoted;
}

std::string JoinCommand(const std::vector<std::string>& words) {
  if (words.size() == 1) return words.front();
  std::string line;
  for (const std::string& word : words) {
    if (!line.empty()) line += ' ';
    line += ShellQuote(word);
  }
  return line;
}

std::string UrlEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string encoded;
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      encoded += ch;
    } else {
      encoded += '%';
      encoded += kHex[c >> 4];
      encoded += kHex[c & 0xF];
    }
  }
  return encoded;
}

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {
  for (std::string& name : header_) {
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  }
}

void Table::AddRow(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

std::string Table::Render(bool with_header) const {
  std::vector<size_t> widths(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  };
  if (with_header) measure(header_);
  for (const auto& row : rows_) measure(row);

  std::string text;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    text += line;
    text += '\n';
  };
  if (with_header) emit(header_);
  for (const auto& row : rows_) emit(row);
  return text;
}

}  // namespace dgpu::ctl
