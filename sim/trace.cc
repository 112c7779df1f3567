#include "sim/trace.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <unordered_map>

namespace dgpu::sim {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Splits on commas; fields are trimmed. No quoting: neither format needs it.
void SplitFields(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(Trim(line.substr(start)));
      return;
    }
    out.push_back(Trim(line.substr(start, comma - start)));
    start = comma + 1;
  }
}

std::string NormalizeHeader(std::string_view line) {
  std::vector<std::string_view> fields;
  SplitFields(line, fields);
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) out += ',';
    for (char c : fields[i]) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

bool ParseDigits(std::string_view s, int& out) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool IsLeap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

class Interner {
 public:
  explicit Interner(std::vector<std::string>& names) : names_(names) {
    for (size_t i = 0; i < names_.size(); ++i) ids_.emplace(names_[i], static_cast<uint32_t>(i));
  }
  uint32_t Intern(std::string_view s) {
    auto it = ids_.find(std::string(s));
    if (it != ids_.end()) return it->second;
    auto id = static_cast<uint32_t>(names_.size());
    names_.emplace_back(s);
    ids_.emplace(names_.back(), id);
    return id;
  }

 private:
  std::vector<std::string>& names_;
  std::unordered_map<std::string, uint32_t> ids_;
};

}  // namespace

std::string_view ToString(TraceFormat f) {
  return f == TraceFormat::kPhilly ? "philly" : "generic";
}

std::optional<TraceFormat> ParseTraceFormat(std::string_view s) {
  if (s == "philly") return TraceFormat::kPhilly;
  if (s == "generic") return TraceFormat::kGeneric;
  return std::nullopt;
}

std::optional<int64_t> ParseUtcTimestamp(std::string_view s) {
  // Exactly "YYYY-MM-DD HH:MM:SS" (a 'T' separator is accepted too).
  if (s.size() != 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
      s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  int year, month, day, hour, minute, second;
  if (!ParseDigits(s.substr(0, 4), year) || !ParseDigits(s.substr(5, 2), month) ||
      !ParseDigits(s.substr(8, 2), day) || !ParseDigits(s.substr(11, 2), hour) ||
      !ParseDigits(s.substr(14, 2), minute) || !ParseDigits(s.substr(17, 2), second)) {
    return std::nullopt;
  }
  static constexpr int kDaysIn[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (month < 1 || month > 12) return std::nullopt;
  int max_day = kDaysIn[month - 1] + (month == 2 && IsLeap(year) ? 1 : 0);
  if (day < 1 || day > max_day || hour > 23 || minute > 59 || second > 59) return std::nullopt;
  return DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day)) * 86400 +
         int64_t{hour} * 3600 + int64_t{minute} * 60 + second;
}

std::optional<core::TimeMicros> ParseSeconds(std::string_view s) {
  if (s.empty() || s.front() == '+' || s.front() == '-') return std::nullopt;
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::fixed);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v) || v < 0 || v > 1e12) {
    return std::nullopt;
  }
  return static_cast<core::TimeMicros>(std::llround(v * 1e6));
}

StatusOr<Trace> ParseTrace(std::istream& in, std::string name, std::optional<TraceFormat> format) {
  Trace trace;
  trace.name = std::move(name);
  trace.models.emplace_back();
  Interner models(trace.models);
  Interner teams(trace.teams);
  auto error = [&](int line, std::string_view field, const std::string& what) {
    std::string msg = trace.name + ":" + std::to_string(line) + ": ";
    if (!field.empty()) msg += "field '" + std::string(field) + "': ";
    return InvalidArgument(msg + what);
  };

  std::string line;
  int line_no = 0;
  bool have_header = false;
  std::vector<std::string_view> f;
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view view = line;
    if (line_no == 1 && view.substr(0, 3) == "\xEF\xBB\xBF") view.remove_prefix(3);  // BOM.
    if (Trim(view).empty()) continue;
    if (!have_header) {
      std::string header = NormalizeHeader(view);
      std::optional<TraceFormat> detected;
      if (header == kPhillyHeader) detected = TraceFormat::kPhilly;
      if (header == kGenericHeader) detected = TraceFormat::kGeneric;
      if (!detected) {
        return error(line_no, "",
                     "unrecognized header '" + std::string(Trim(view)) + "'; expected '" +
                         std::string(kPhillyHeader) + "' or '" + std::string(kGenericHeader) + "'");
      }
      if (format && *format != *detected) {
        return error(line_no, "",
                     "header is the " + std::string(ToString(*detected)) +
                         " format, but --format is " + std::string(ToString(*format)));
      }
      trace.format = *detected;
      have_header = true;
      continue;
    }
    SplitFields(view, f);
    TraceJob job;
    job.line = line_no;
    if (trace.format == TraceFormat::kPhilly) {
      if (f.size() != 5) {
        return error(line_no, "", "expected 5 fields, found " + std::to_string(f.size()));
      }
      auto ts = ParseUtcTimestamp(f[0]);
      if (!ts) {
        return error(line_no, "timestamp",
                     "expected 'YYYY-MM-DD HH:MM:SS', found '" + std::string(f[0]) + "'");
      }
      job.submit = *ts * core::kMicrosPerSecond;
      auto duration = ParseSeconds(f[1]);
      if (!duration) {
        return error(line_no, "duration",
                     "expected non-negative seconds, found '" + std::string(f[1]) + "'");
      }
      job.duration = *duration;
      if (!ParseDigits(f[2], job.gpus) || job.gpus < 1) {
        return error(line_no, "num_gpus",
                     "expected a positive integer, found '" + std::string(f[2]) + "'");
      }
      if (!ParseSeconds(f[3])) {
        return error(line_no, "gpu_time",
                     "expected a non-negative number, found '" + std::string(f[3]) + "'");
      }
      if (f[4].empty()) return error(line_no, "cluster", "must not be empty");
      job.team = teams.Intern(f[4]);
    } else {
      if (f.size() != 6) {
        return error(line_no, "", "expected 6 fields, found " + std::to_string(f.size()));
      }
      auto submit = ParseSeconds(f[0]);
      if (!submit) {
        return error(line_no, "submit_time",
                     "expected non-negative seconds, found '" + std::string(f[0]) + "'");
      }
      job.submit = *submit;
      auto duration = ParseSeconds(f[1]);
      if (!duration) {
        return error(line_no, "duration",
                     "expected non-negative seconds, found '" + std::string(f[1]) + "'");
      }
      job.duration = *duration;
      if (!ParseDigits(f[2], job.gpus) || job.gpus < 1) {
        return error(line_no, "gpu_count",
                     "expected a positive integer, found '" + std::string(f[2]) + "'");
      }
      if (!f[3].empty()) {
        job.priority = core::ParsePriority(f[3]);
        if (!job.priority) {
          return error(line_no, "priority",
                       "expected 'high', 'low' or empty, found '" + std::string(f[3]) + "'");
        }
      }
      job.model = models.Intern(f[4]);
      job.team = teams.Intern(f[5]);
    }
    trace.jobs.push_back(job);
  }
  if (in.bad()) return error(line_no, "", "read error");
  if (!have_header) return error(line_no, "", "empty trace: no header");
  std::stable_sort(trace.jobs.begin(), trace.jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; });
  return trace;
}

StatusOr<Trace> LoadTrace(const std::string& path, std::optional<TraceFormat> format) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open trace file " + path);
  return ParseTrace(in, path, format);
}

}  // namespace dgpu::sim
