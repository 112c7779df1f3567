/* The task shim's process: see task_shim.h for what it does and why, shim_runtime.h for why C. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "agent/shim_runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHIM_PROTOCOL 1
/* The start's arguments and requests: 2 added the task's cgroups. */
#define SHIM_START_PROTOCOL 2
#define DRAIN_MILLIS 2000 /* Pipe drain after the last process ended. */

/* Writes all of it; an error (a full disk, a closed pipe) drops the rest. */
static void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data += w;
    n -= (size_t)w;
  }
}

static void write_text(int fd, const char* text) { write_all(fd, text, strlen(text)); }

/* A whole non-negative decimal number that fits in int64_t; 0 when not. */
static int parse_count(const char* s, int64_t* out) {
  int64_t value = 0;
  if (*s == '\0') return 0;
  for (; *s != '\0'; ++s) {
    if (*s < '0' || *s > '9') return 0;
    const int digit = *s - '0';
    if (value > (INT64_MAX - digit) / 10) return 0;
    value = value * 10 + digit;
  }
  *out = value;
  return 1;
}

/* snprintf's length, cut to what fits in the buffer. */
static size_t fitted(int n, size_t size) {
  if (n < 0 || size == 0) return 0;
  return (size_t)n < size ? (size_t)n : size - 1;
}

size_t dgpu_format_pids_record(char* buffer, size_t size, int shim, unsigned long long shim_start,
                               int leader, unsigned long long leader_start) {
  return fitted(snprintf(buffer, size, "%d %d %llu %d %llu\n", SHIM_PROTOCOL, shim, shim_start,
                         leader, leader_start),
                size);
}

size_t dgpu_format_exit_record(char* buffer, size_t size, int wait_status, int64_t unix_micros) {
  return fitted(
      snprintf(buffer, size, "%d %d %lld\n", SHIM_PROTOCOL, wait_status, (long long)unix_micros),
      size);
}

static int64_t now_micros(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Field 22 of /proc/<pid>/stat (clock ticks after boot): with the pid, names the process. 0 when
 * it cannot be read. */
static unsigned long long start_time(pid_t pid) {
  char path[64];
  char text[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  /* The command name (field 2) may hold spaces and parentheses: fields 3.. follow the last ')'. */
  const char* p = strrchr(text, ')');
  if (p == NULL) return 0;
  ++p;
  for (int field = 3; field < 22; ++field) { /* Past fields 3 to 21. */
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
    if (*p == '\0') return 0;
  }
  unsigned long long value = 0;
  while (*p == ' ') ++p;
  for (; *p >= '0' && *p <= '9'; ++p) value = value * 10 + (unsigned long long)(*p - '0');
  return value;
}

/* The record, one line in one write to a new file. A reader that finds the file empty or
 * without its final newline has not found the record yet (the agent reads only complete lines of
 * a known version): a shim killed between the open and the write leaves what no record leaves.
 * 0 (with errno) on a failure. Not synced: it has to outlive the agent process, which reads it
 * and keeps the finish in its own synced outbox, not the machine (a task does not outlive its
 * machine either). */
static int write_record(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return 0;
  const size_t length = strlen(text);
  const int written = write(fd, text, length) == (ssize_t)length;
  const int saved = errno;
  close(fd);
  if (!written) {
    errno = saved;
    return 0;
  }
  return 1;
}

/* The handshake's error answer; the shim's exit code then. */
static int refuse(int hello_fd, const char* what, const char* detail) {
  char line[4096];
  snprintf(line, sizeof(line), "%d error %s%s%s\n", SHIM_PROTOCOL, what, detail ? ": " : "",
           detail ? detail : "");
  write_text(hello_fd, line);
  return 1;
}

/* Starts the leader (argv[0] a path) with posix_spawn: the C library starts it without copying
 * the shim's memory (clone with CLONE_VM | CLONE_VFORK), in a new session, with `envp`, in `cwd`
 * (NULL: the shim's), stdin /dev/null, output on `out`, the dispositions and mask a program
 * expects. 0 with *leader set, or the
 * errno of the failure (of the exec too: the C library reports it and reaps the child). */
static int spawn_leader(char** argv, char** envp, const char* cwd, int out, pid_t* leader) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  int err = posix_spawn_file_actions_init(&actions);
  if (err != 0) return err;
  err = posix_spawnattr_init(&attr);
  if (err != 0) {
    posix_spawn_file_actions_destroy(&actions);
    return err;
  }
  sigset_t defaults;
  sigemptyset(&defaults);
  const int reset[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD};
  for (size_t i = 0; i < sizeof(reset) / sizeof(reset[0]); ++i) sigaddset(&defaults, reset[i]);
  sigset_t none;
  sigemptyset(&none);
  if ((err = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)) == 0 &&
      (err = posix_spawn_file_actions_adddup2(&actions, out, 1)) == 0 &&
      (err = posix_spawn_file_actions_adddup2(&actions, out, 2)) == 0 &&
      (cwd == NULL || (err = posix_spawn_file_actions_addchdir_np(&actions, cwd)) == 0) &&
      (err = posix_spawnattr_setsigdefault(&attr, &defaults)) == 0 &&
      (err = posix_spawnattr_setsigmask(&attr, &none)) == 0 &&
      (err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF |
                                                 POSIX_SPAWN_SETSIGMASK)) == 0) {
    err = posix_spawn(leader, argv[0], &actions, &attr, argv, envp);
  }
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  return err;
}

/* clone3's arguments (linux/sched.h, which musl's headers lack), up to `cgroup` (kernel 5.7). */
struct clone_into_cgroup_args {
  uint64_t flags;
  uint64_t pidfd;
  uint64_t child_tid;
  uint64_t parent_tid;
  uint64_t exit_signal;
  uint64_t stack;
  uint64_t stack_size;
  uint64_t tls;
  uint64_t set_tid;
  uint64_t set_tid_size;
  uint64_t cgroup;
};
#define CLONE_INTO_CGROUP_FLAG 0x200000000ULL

/* Makes `fd` the descriptor `target` of this process, without close-on-exec. */
static int put_fd(int fd, int target) {
  if (fd == target) return fcntl(fd, F_SETFD, 0);
  return dup2(fd, target) < 0 ? -1 : 0;
}

/* As spawn_leader, but the leader starts in the cgroup v2 directory `cgroup_fd` (clone3 with
 * CLONE_INTO_CGROUP): no process moves between cgroups, which would cost a kernel RCU grace
 * period (milliseconds) whenever no other move happened just before. The child is a copy of the
 * shim (small) that sets itself up with system calls only and execs; an exec that fails reports
 * its errno through a close-on-exec pipe. */
static int spawn_leader_in(char** argv, char** envp, const char* cwd, int out, int cgroup_fd,
                           pid_t* leader) {
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return errno;
  struct clone_into_cgroup_args args;
  memset(&args, 0, sizeof(args));
  args.flags = CLONE_INTO_CGROUP_FLAG;
  args.exit_signal = SIGCHLD;
  args.cgroup = (uint64_t)cgroup_fd;
  const long pid = syscall(SYS_clone3, &args, sizeof(args));
  if (pid < 0) {
    const int saved = errno;
    close(report[0]);
    close(report[1]);
    return saved;
  }
  if (pid == 0) {
    int err = 0;
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0 || setsid() < 0 || put_fd(null_fd, 0) != 0 || put_fd(out, 1) != 0 ||
        put_fd(out, 2) != 0 || (cwd != NULL && chdir(cwd) != 0)) {
      err = errno;
    } else {
      const int reset[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD};
      for (size_t i = 0; i < sizeof(reset) / sizeof(reset[0]); ++i) signal(reset[i], SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, NULL);
      execve(argv[0], argv, envp);
      err = errno;
    }
    (void)!write(report[1], &err, sizeof(err));
    _exit(127);
  }
  close(report[1]);
  int err = 0;
  ssize_t n;
  do {
    n = read(report[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n == (ssize_t)sizeof(err)) { /* It did not exec: reaped here, as posix_spawn does. */
    waitpid((pid_t)pid, NULL, 0);
    return err != 0 ? err : EIO;
  }
  *leader = (pid_t)pid;
  return 0;
}

size_t dgpu_log_cut_line(int64_t max_bytes, char* buffer, size_t size) {
  return fitted(snprintf(buffer, size,
                         "dgpu: log cut at %lld bytes (executor.max_log_bytes); further output "
                         "is discarded\n",
                         (long long)max_bytes),
                size);
}

void dgpu_log_copier_init(struct dgpu_log_copier* c, int out, int64_t max_bytes) {
  struct stat st;
  c->out = out;
  c->max_bytes = max_bytes;
  c->size = fstat(out, &st) == 0 ? (int64_t)st.st_size : 0;
  c->cut = 0;
  c->last = '\n';
}

void dgpu_log_copier_write(struct dgpu_log_copier* c, const char* data, size_t n) {
  if (c->cut || n == 0) return;
  int64_t room = c->max_bytes - c->size;
  if (room < 0) room = 0;
  const size_t take = (uint64_t)room < n ? (size_t)room : n;
  if (take > 0) {
    write_all(c->out, data, take);
    c->size += (int64_t)take;
    c->last = data[take - 1];
  }
  if (take < n) {
    char marker[160];
    const size_t newline = c->last != '\n';
    marker[0] = '\n';
    c->cut = 1;
    write_all(c->out, marker,
              newline + dgpu_log_cut_line(c->max_bytes, marker + newline, sizeof(marker) - 1));
  }
}

/* One task to run: from the arguments (--task-shim) or a request (--task-shim-server). */
struct shim_task {
  const char* records; /* Path prefix of RECORDS.pids and RECORDS.exit. */
  int64_t max_log_bytes;
  char** argv;
  char** envp;
  const char* cwd; /* NULL: the shim's own. */
  int log_fd;
  int answer_fd; /* The handshake line goes there. */
  /* cgroups[2 * i]: a task cgroup's cgroup.procs, cgroups[2 * i + 1]: the shim's own in that
   * hierarchy (v1). One pair with an empty second: the task's cgroup v2 directory, where the
   * leader starts directly. */
  int ncgroups;
  char** cgroups;
};

/* Writes the shim's pid to a cgroup.procs file: the shim moves there. 0 (errno set) on a
 * failure. */
static int move_to(const char* procs) {
  char pid[32];
  const int n = snprintf(pid, sizeof(pid), "%d", (int)getpid());
  const int fd = open(procs, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const int ok = write(fd, pid, (size_t)n) == n;
  const int saved = errno;
  close(fd);
  errno = saved;
  return ok;
}

/* Back to the shim's own cgroups (those of the first `joined` hierarchies); 0 when one move
 * failed. */
static int leave_cgroups(const struct shim_task* t, int joined) {
  int ok = 1;
  for (int i = 0; i < joined; ++i) ok &= move_to(t->cgroups[2 * i + 1]);
  return ok;
}

/* A resident shim (--task-shim-server 2 --resident) lives in its tasks' cgroups (the agent's
 * slots, cgroup.h): out of their out-of-memory killer's reach (oom_score_adj -1000) but while it
 * spawns a task's leader, which inherits the value it had at its start. */
static int resident = 0;
static char resident_adj[32];

/* Writes `value` to /proc/self/oom_score_adj; best effort (a shim that cannot lower it is still
 * the smallest process of its cgroup). */
static void set_oom_score_adj(const char* value) {
  const int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t ignored = write(fd, value, strlen(value));
  (void)ignored;
  close(fd);
}

static void become_resident(void) {
  resident = 1;
  snprintf(resident_adj, sizeof(resident_adj), "0");
  const int fd = open("/proc/self/oom_score_adj", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char value[32];
    const ssize_t n = read(fd, value, sizeof(value) - 1);
    close(fd);
    if (n > 0) {
      value[n] = '\0';
      value[strcspn(value, "\n")] = '\0';
      snprintf(resident_adj, sizeof(resident_adj), "%s", value);
    }
  }
  set_oom_score_adj("-1000");
}

/* The process's part, once: a child subreaper that no signal of the agent's ends, SIGCHLD read
 * from a signalfd. The signalfd, or -1 (errno set). */
static int prepare_process(void) {
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  sigprocmask(SIG_BLOCK, &child, NULL); /* Before any spawn: no exit goes unseen. */
  return signalfd(-1, &child, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Runs one task to its end (every process of it reaped, its output copied): answers on
 * t->answer_fd, writes the records. 0 when the task ran, 1 when it could not start (answered
 * with the error). */
static int run_task(const struct shim_task* t, int sfd) {
  char exit_path[4096];
  char pids_path[4096];
  if (snprintf(exit_path, sizeof(exit_path), "%s.exit", t->records) >= (int)sizeof(exit_path) ||
      snprintf(pids_path, sizeof(pids_path), "%s.pids", t->records) >= (int)sizeof(pids_path)) {
    return refuse(t->answer_fd, "the records' path is too long", NULL);
  }
  { /* Exits of an earlier task's processes that were read before their SIGCHLD. */
    struct signalfd_siginfo info;
    while (read(sfd, &info, sizeof(info)) == (ssize_t)sizeof(info)) {
    }
  }
  int log_pipe[2] = {-1, -1};
  if (t->max_log_bytes > 0 && pipe2(log_pipe, O_CLOEXEC) != 0) {
    return refuse(t->answer_fd, "cannot make the log pipe", strerror(errno));
  }
  /* The leader starts inside the task's cgroups. v2 (one directory, no HOME): started there
   * directly. v1: a child starts in its parent's, so the shim joins them for the spawn and
   * leaves them at once. Either way the shim stays out, so that the cgroup's kill and its
   * out-of-memory killer reach the task alone. */
  const int clone_into = t->ncgroups == 1 && t->cgroups[1][0] == '\0';
  int cgroup_fd = -1;
  if (clone_into) {
    cgroup_fd = open(t->cgroups[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cgroup_fd < 0) {
      const int saved = errno;
      if (log_pipe[0] >= 0) close(log_pipe[0]);
      if (log_pipe[1] >= 0) close(log_pipe[1]);
      char why[4200];
      snprintf(why, sizeof(why), "cannot open the task's cgroup %s", t->cgroups[0]);
      return refuse(t->answer_fd, why, strerror(saved));
    }
  }
  for (int i = 0; !clone_into && i < t->ncgroups; ++i) {
    if (!move_to(t->cgroups[2 * i])) {
      const int saved = errno;
      leave_cgroups(t, i);
      if (log_pipe[0] >= 0) close(log_pipe[0]);
      if (log_pipe[1] >= 0) close(log_pipe[1]);
      char why[4200];
      snprintf(why, sizeof(why), "cannot join the task's cgroup %s", t->cgroups[2 * i]);
      return refuse(t->answer_fd, why, strerror(saved));
    }
  }
  pid_t leader = 0;
  const int out = log_pipe[1] >= 0 ? log_pipe[1] : t->log_fd;
  if (resident) set_oom_score_adj(resident_adj);
  const int spawn_error = clone_into
                              ? spawn_leader_in(t->argv, t->envp, t->cwd, out, cgroup_fd, &leader)
                              : spawn_leader(t->argv, t->envp, t->cwd, out, &leader);
  if (resident) set_oom_score_adj("-1000");
  if (cgroup_fd >= 0) close(cgroup_fd);
  if (!clone_into && t->ncgroups > 0 && !leave_cgroups(t, t->ncgroups)) {
    char line[4300];
    snprintf(line, sizeof(line), "dgpu: the task's shim (pid %d) cannot leave its cgroup: %s\n",
             (int)getpid(), strerror(errno));
    write_text(t->log_fd, line);
  }
  if (log_pipe[1] >= 0) close(log_pipe[1]);
  if (spawn_error != 0) {
    if (log_pipe[0] >= 0) close(log_pipe[0]);
    char why[4200];
    snprintf(why, sizeof(why), "cannot run %s", t->argv[0]);
    return refuse(t->answer_fd, why, strerror(spawn_error));
  }
  /* Unreaped, the leader keeps its pid (a zombie's stat can be read): its start time names it
   * for whoever adopts it later. */
  const unsigned long long leader_start = start_time(leader);
  static unsigned long long self_start = 0; /* The shim's own: read once, for all its tasks. */
  if (self_start == 0) self_start = start_time(getpid());
  char text[256];
  dgpu_format_pids_record(text, sizeof(text), (int)getpid(), self_start, (int)leader,
                          leader_start);
  if (!write_record(pids_path, text)) {
    /* Nobody could adopt the task: it does not run. */
    char why[4200];
    snprintf(why, sizeof(why), "cannot write %s", pids_path);
    const int saved = errno;
    kill(-leader, SIGKILL);
    kill(leader, SIGKILL);
    waitpid(leader, NULL, 0);
    if (log_pipe[0] >= 0) close(log_pipe[0]);
    return refuse(t->answer_fd, why, strerror(saved));
  }
  snprintf(text, sizeof(text), "%d ok %d %llu\n", SHIM_PROTOCOL, (int)leader, leader_start);
  write_text(t->answer_fd, text);

  struct dgpu_log_copier copier;
  dgpu_log_copier_init(&copier, t->log_fd, t->max_log_bytes);
  static char buffer[64 << 10];
  int pipe_fd = log_pipe[0];
  int children_left = 1;
  int64_t drain_until = 0;
  while (children_left || pipe_fd >= 0) {
    struct pollfd fds[2] = {{sfd, POLLIN, 0}, {pipe_fd, POLLIN, 0}};
    int timeout = -1;
    if (!children_left) {
      const int64_t left = (drain_until - now_micros()) / 1000;
      if (left <= 0) break; /* Something outside the task holds the pipe. */
      timeout = (int)left + 1;
    }
    const int n = poll(fds, pipe_fd >= 0 ? 2 : 1, timeout);
    if (n < 0 && errno != EINTR) break;
    if (pipe_fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t r = read(pipe_fd, buffer, sizeof(buffer));
      if (r > 0) {
        dgpu_log_copier_write(&copier, buffer, (size_t)r);
      } else if (r == 0 || errno != EINTR) {
        close(pipe_fd);
        pipe_fd = -1;
      }
    }
    if ((fds[0].revents & POLLIN) != 0 || n == 0) {
      struct signalfd_siginfo info;
      while (read(sfd, &info, sizeof(info)) == (ssize_t)sizeof(info)) {
      }
    }
    while (children_left) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid == 0) break;
      if (pid < 0) {
        if (errno == EINTR) continue;
        children_left = 0; /* ECHILD: every process of the task has ended. */
        drain_until = now_micros() + (int64_t)DRAIN_MILLIS * 1000;
        break;
      }
      if (pid == leader) {
        dgpu_format_exit_record(text, sizeof(text), status, now_micros());
        if (!write_record(exit_path, text)) {
          char line[4300];
          snprintf(line, sizeof(line), "dgpu: cannot record the task's exit in %s: %s\n", exit_path,
                   strerror(errno));
          write_text(t->log_fd, line);
        }
      }
    }
  }
  if (pipe_fd >= 0) close(pipe_fd);
  return 0;
}

/* dgpu-task-shim --task-shim 2 RECORDS MAX_LOG_BYTES NCGROUPS [JOIN HOME]... -- ARGV... */
static int run_one(int argc, char** argv) {
  extern char** environ;
  int64_t version = 0;
  int64_t max_log_bytes = 0;
  int64_t ncgroups = 0;
  if (argc < 8 || !parse_count(argv[2], &version) || version != SHIM_START_PROTOCOL ||
      !parse_count(argv[4], &max_log_bytes) || !parse_count(argv[5], &ncgroups) ||
      ncgroups > (argc - 8) / 2 || strcmp(argv[6 + 2 * ncgroups], "--") != 0) {
    write_text(2,
               "usage: dgpu-task-shim --task-shim 2 RECORDS MAX_LOG_BYTES NCGROUPS [JOIN HOME]... "
               "-- ARGV... (started by dgpu-agent)\n");
    return 2;
  }
  const int sfd = prepare_process();
  if (sfd < 0) return refuse(0, "signalfd", strerror(errno));
  const struct shim_task t = {argv[3], max_log_bytes, argv + 7 + 2 * ncgroups, environ, NULL, 1,
                              0,       (int)ncgroups, argv + 6};
  return run_task(&t, sfd);
}

/* The largest request a server shim takes; the agent starts a one-shot shim for a larger one. */
#define MAX_REQUEST (256 << 10)

/* A request: NUL-terminated fields "2", RECORDS, MAX_LOG_BYTES, CWD, NCGROUPS, 2 x NCGROUPS
 * cgroup.procs paths (JOIN HOME), ARGC, ARGC arguments, then the environment's entries to the
 * end; the log as the one descriptor passed with it. Fills t (pointing into `data`; t->argv,
 * t->envp and t->cgroups allocated, one block); 0 when malformed. */
static int parse_request(char* data, size_t size, struct shim_task* t) {
  if (size == 0 || data[size - 1] != '\0') return 0;
  size_t n = 0;
  for (size_t i = 0; i < size; ++i) n += data[i] == '\0';
  char** fields = malloc(n * sizeof(char*));
  if (fields == NULL) return 0;
  size_t k = 0;
  for (char* p = data; p < data + size; p += strlen(p) + 1) fields[k++] = p;
  int64_t version = 0;
  int64_t argc = 0;
  int64_t ncgroups = 0;
  if (n < 7 || !parse_count(fields[0], &version) || version != SHIM_START_PROTOCOL ||
      !parse_count(fields[2], &t->max_log_bytes) || !parse_count(fields[4], &ncgroups) ||
      (size_t)ncgroups > (n - 7) / 2 || !parse_count(fields[5 + 2 * ncgroups], &argc) ||
      argc < 1 || (size_t)argc > n - 6 - 2 * (size_t)ncgroups) {
    free(fields);
    return 0;
  }
  /* One block, freed through t->argv: the arguments and the environment, each NULL-terminated,
   * then the cgroup paths. */
  const size_t head = 6 + 2 * (size_t)ncgroups; /* Fields before the arguments. */
  const size_t envc = n - head - (size_t)argc;
  char** block = malloc((n - 4) * sizeof(char*));
  if (block == NULL) {
    free(fields);
    return 0;
  }
  memcpy(block, fields + head, (size_t)argc * sizeof(char*));
  block[argc] = NULL;
  memcpy(block + argc + 1, fields + head + argc, envc * sizeof(char*));
  block[argc + 1 + envc] = NULL;
  memcpy(block + argc + 2 + envc, fields + 5, 2 * (size_t)ncgroups * sizeof(char*));
  t->records = fields[1];
  t->cwd = fields[3][0] != '\0' ? fields[3] : NULL;
  t->argv = block;
  t->envp = block + argc + 1;
  t->ncgroups = (int)ncgroups;
  t->cgroups = block + argc + 2 + envc;
  free(fields);
  return 1;
}

/* dgpu-task-shim --task-shim-server 2 [--resident]: fd 0 a SOCK_SEQPACKET socket to the agent.
 * Runs the tasks it is sent, one after the other (task_shim.h). */
static int serve(int argc, char** argv) {
  int64_t version = 0;
  if ((argc != 3 && (argc != 4 || strcmp(argv[3], "--resident") != 0)) ||
      !parse_count(argv[2], &version) || version != SHIM_START_PROTOCOL) {
    write_text(2,
               "usage: dgpu-task-shim --task-shim-server 2 [--resident] (started by dgpu-agent)\n");
    return 2;
  }
  const int control = 0;
  const int sfd = prepare_process();
  if (sfd < 0) return 1;
  if (argc == 4) become_resident();
  static char request[MAX_REQUEST];
  for (;;) {
    union {
      struct cmsghdr header;
      char space[CMSG_SPACE(sizeof(int))];
    } control_data;
    struct iovec iov = {request, sizeof(request)};
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control_data.space;
    msg.msg_controllen = sizeof(control_data.space);
    const ssize_t got = recvmsg(control, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return 0; /* The agent is gone: nothing more to run. */
    int log_fd = -1;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(sizeof(int))) {
        memcpy(&log_fd, CMSG_DATA(c), sizeof(int));
      }
    }
    struct shim_task t;
    memset(&t, 0, sizeof(t));
    t.answer_fd = control;
    if (log_fd < 0 || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
        !parse_request(request, (size_t)got, &t)) {
      refuse(control, "malformed request", NULL);
    } else {
      t.log_fd = log_fd;
      if (run_task(&t, sfd) == 0) {
        char done[32];
        snprintf(done, sizeof(done), "%d done\n", SHIM_PROTOCOL);
        write_text(control, done);
      }
      free(t.argv);
    }
    if (log_fd >= 0) close(log_fd);
  }
}

int dgpu_task_shim_run(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "--task-shim-server") == 0) return serve(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "--task-shim") == 0) return run_one(argc, argv);
  write_text(2, "usage: dgpu-task-shim --task-shim 2 RECORDS MAX_LOG_BYTES NCGROUPS [JOIN HOME]... "
                "-- ARGV... | --task-shim-server 2 [--resident] (started by dgpu-agent)\n");
  return 2;
}
