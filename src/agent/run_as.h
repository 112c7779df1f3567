// Tasks that run as their submitter (executor.run_as: submitter): the account a task's `user`
// names on this node, and the command prefix that switches to it.
//
// The switch is util-linux's setpriv(1) between the agent and the task's shell: it sets the
// supplementary groups, the gid and the uid (real, effective and saved) and then execs, so the
// task keeps the pid the agent spawned (its process group and stop signals work as before) and
// no code runs between fork and exec in the agent's own (multi-threaded) process.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace dgpu::agent {

struct RunAsUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // Supplementary groups (from the group database), gid included.
  std::string home;
};

// The account called `name` on this node. The error is the task's error, starting with its
// word: "unknown_user: ..." (empty name, or no such account) or "root_not_allowed: ..." (uid 0
// while `allow_root` is false).
StatusOr<RunAsUser> LookUpRunAsUser(const std::string& name, bool allow_root);

// {setpriv, --reuid=U, --regid=G, --groups=G1,G2 (or --clear-groups), --}: put before a
// command's argv.
std::vector<std::string> SetprivPrefix(const RunAsUser& user, const std::string& setpriv);

}  // namespace dgpu::agent
