#include "agent/run_as.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dgpu::agent {

StatusOr<RunAsUser> LookUpRunAsUser(const std::string& name, bool allow_root) {
  if (name.empty()) {
    return InvalidArgument(
        "unknown_user: the task names no user, and executor.run_as: submitter runs tasks as "
        "their submitter");
  }
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd pw{};
  passwd* found = nullptr;
  int rc = 0;
  while ((rc = getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE) {
    buf.resize(buf.size() * 2);
  }
  if (found == nullptr) {
    return NotFound("unknown_user: no user \"" + name + "\" on this node" +
                    (rc != 0 ? std::string(" (") + std::strerror(rc) + ")" : std::string()));
  }
  RunAsUser user;
  user.name = name;
  user.uid = pw.pw_uid;
  user.gid = pw.pw_gid;
  user.home = pw.pw_dir != nullptr ? pw.pw_dir : "/";
  if (user.uid == 0 && !allow_root) {
    return PermissionDenied("root_not_allowed: user \"" + name +
                            "\" has uid 0, and executor.allow_root is false on this node");
  }
  int count = 32;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  while (getgrouplist(name.c_str(), user.gid, groups.data(), &count) < 0) {
    groups.resize(static_cast<size_t>(count) + 32);
    count = static_cast<int>(groups.size());
  }
  groups.resize(static_cast<size_t>(count));
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  user.groups = std::move(groups);
  return user;
}

std::vector<std::string> SetprivPrefix(const RunAsUser& user, const std::string& setpriv) {
  std::vector<std::string> argv = {setpriv, "--reuid=" + std::to_string(user.uid),
                                   "--regid=" + std::to_string(user.gid)};
  if (user.groups.empty()) {
    argv.emplace_back("--clear-groups");
  } else {
    std::string list;
    for (gid_t g : user.groups) list += (list.empty() ? "" : ",") + std::to_string(g);
    argv.push_back("--groups=" + list);
  }
  argv.emplace_back("--");
  return argv;
}

}  // namespace dgpu::agent
