// Text helpers for dgpuctl: ages, shell quoting and aligned tables. Durations and timestamps are
// read and written by common/time_util.h, as everywhere in dgpu.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace dgpu::ctl {

// Formats an age compactly for humans, in one unit: seconds under 2 minutes ("45s"), minutes
// under 2 hours ("90m"), hours under 2 days ("36h"), days under 2 years ("12d"), else years.
// Negative ages are shown as "0s".
std::string FormatAge(std::chrono::seconds age);

// Quotes one word for a POSIX shell: words made only of safe characters are returned unchanged;
// others are wrapped in single quotes, with each embedded quote written as '\''.
std::string ShellQuote(std::string_view word);

// Joins command words into one shell command line that yields the same argv. A single word is
// taken as a complete command line and returned unchanged (so `-- "a | b"` keeps its pipe).
std::string JoinCommand(const std::vector<std::string>& words);

// Percent-encodes everything but RFC 3986 unreserved characters.
std::string UrlEncode(std::string_view text);

// An aligned text table: column widths come from the content, columns are separated by two
// spaces, the header is upper-cased and lines carry no trailing blanks.
class Table {
 public:
  explicit Table(std::vector<std::string> header);

  // Rows shorter than the header are padded with empty cells; extra cells are dropped.
  void AddRow(std::vector<std::string> row);
  size_t size() const { return rows_.size(); }

  std::string Render(bool with_header = true) const;
  // The width of each column as Render lays it out.
  std::vector<size_t> Widths(bool with_header = true) const;
  // Columns at least this wide (rows that follow a table already printed line up with it).
  void set_min_widths(std::vector<size_t> widths) { min_widths_ = std::move(widths); }

 private:
  std::vector<size_t> min_widths_;
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace dgpu::ctl
