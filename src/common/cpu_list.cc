#include "common/cpu_list.h"

#include <cctype>
#include <charconv>
#include <set>

namespace dgpu::common {

namespace {

std::optional<int> ParseCpuId(std::string_view s) {
  int value = 0;
  if (s.empty() || s.size() > 6) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::vector<int>> ParseCpuList(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  std::set<int> cpus;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (comma != std::string_view::npos && text.empty()) return std::nullopt;  // "0,"
    const size_t dash = item.find('-');
    const std::optional<int> first = ParseCpuId(item.substr(0, dash));
    const std::optional<int> last =
        dash == std::string_view::npos ? first : ParseCpuId(item.substr(dash + 1));
    // A range of more than 65,536 CPUs is no machine's.
    if (!first || !last || *last < *first || *last - *first > 65535) return std::nullopt;
    for (int c = *first; c <= *last; ++c) cpus.insert(c);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace dgpu::common
