#include "agent/epoch_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>

#include "common/atomic_file.h"
#include "common/number.h"

namespace dgpu::agent {
namespace {

std::string EpochPath(const std::string& work_dir) { return work_dir + "/" + kEpochFileName; }

}  // namespace

StatusOr<uint64_t> LoadEpoch(const std::string& work_dir) {
  const std::string path = EpochPath(work_dir);
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return uint64_t{0};
    return Unavailable("cannot read epoch file " + path + ": " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  const std::string contents = text.str();
  std::string_view number = contents;
  if (!number.empty() && number.back() == '\n') number.remove_suffix(1);
  return common::ParseUint64(number, "epoch file " + path);
}

Status StoreEpoch(const std::string& work_dir, uint64_t epoch) {
  return common::WriteFileAtomically(EpochPath(work_dir), std::to_string(epoch) + "\n");
}

StatusOr<std::string> LoadOrCreateInstanceId(const std::string& work_dir) {
  const std::string path = work_dir + "/" + kInstanceFileName;
  std::ifstream in(path);
  if (in) {
    std::string id;
    std::getline(in, id);
    const bool hex =
        id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!hex) return InvalidArgument("instance file " + path + " does not hold 32 hex digits");
    return id;
  }
  if (errno != ENOENT) {
    return Unavailable("cannot read instance file " + path + ": " + std::strerror(errno));
  }
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char part[9];
    std::snprintf(part, sizeof(part), "%08x", static_cast<unsigned>(random()));
    id += part;
  }
  if (Status s = common::WriteFileAtomically(path, id + "\n"); !s.ok()) return s;
  return id;
}

}  // namespace dgpu::agent
