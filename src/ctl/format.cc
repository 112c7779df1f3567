#include "ctl/format.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

namespace dgpu::ctl {

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

std::vector<size_t> Table::Widths(bool with_header) const {
  std::vector<size_t> widths(header_.size(), 0);
  for (size_t i = 0; i < widths.size() && i < min_widths_.size(); ++i) widths[i] = min_widths_[i];
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  };
  if (with_header) measure(header_);
  for (const auto& row : rows_) measure(row);
  return widths;
}

std::string Table::Render(bool with_header) const {
  const std::vector<size_t> widths = Widths(with_header);

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
