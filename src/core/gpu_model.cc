#include "core/gpu_model.h"

#include <algorithm>
#include <cctype>

namespace dgpu::core {
namespace {

bool SameLetterIgnoringCase(char x, char y) {
  return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), SameLetterIgnoringCase);
}

bool ContainsIgnoreCase(std::string_view hay, std::string_view needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end(),
                     SameLetterIgnoringCase) != hay.end();
}

template <typename Predicate>
std::vector<int> IndicesWhere(std::span<const std::string> models, Predicate matches) {
  std::vector<int> out;
  for (size_t m = 0; m < models.size(); ++m) {
    if (matches(models[m])) out.push_back(static_cast<int>(m));
  }
  return out;
}

}  // namespace

std::vector<int> MatchGpuModels(std::string_view wanted, std::span<const std::string> models) {
  if (wanted.empty()) return IndicesWhere(models, [](const std::string&) { return true; });
  std::vector<int> exact =
      IndicesWhere(models, [wanted](const std::string& m) { return EqualsIgnoreCase(m, wanted); });
  if (!exact.empty()) return exact;
  return IndicesWhere(models,
                      [wanted](const std::string& m) { return ContainsIgnoreCase(m, wanted); });
}

}  // namespace dgpu::core
