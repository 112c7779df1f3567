#include "agent/epoch_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
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

}  // namespace dgpu::agent
