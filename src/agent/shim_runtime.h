/* The task shim's process (task_shim.h has the protocol), in C: dgpu-task-shim is linked
 * statically against musl where musl-gcc is installed, because every process start with glibc
 * pays for its start-up (on a virtual machine mostly its CPUID reads, each a trap to the
 * hypervisor: 0.49 ms of CPU for a static no-op against 0.17 with musl), and a shim starts with
 * every task. The agent links the same code (with glibc) to run as a shim itself when no
 * dgpu-task-shim is installed beside it. */
#ifndef DGPU_AGENT_SHIM_RUNTIME_H_
#define DGPU_AGENT_SHIM_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the shim: argv as task_shim.h describes, argv[1] "--task-shim". Returns the process's
 * exit code: 0 when the task ran (whatever its own exit), 1 when it could not start, 2 for bad
 * arguments. */
int dgpu_task_shim_run(int argc, char** argv);

/* The log cut of executor.max_log_bytes (log_writer.h): copies what it is given to `out` until
 * the file holds max_bytes, then writes one marker line and drops the rest. */
struct dgpu_log_copier {
  int out;
  int64_t max_bytes;
  int64_t size; /* Bytes in the file: an earlier run's output counts. */
  int cut;
  char last;
};
void dgpu_log_copier_init(struct dgpu_log_copier* c, int out, int64_t max_bytes);
void dgpu_log_copier_write(struct dgpu_log_copier* c, const char* data, size_t n);

/* The records (task_shim.h), with their newline, into buffer (NUL-terminated, cut to size); their
 * length. The shim writes them, the agent's C++ side formats them with these too. */
size_t dgpu_format_pids_record(char* buffer, size_t size, int shim, unsigned long long shim_start,
                               int leader, unsigned long long leader_start);
size_t dgpu_format_exit_record(char* buffer, size_t size, int wait_status, int64_t unix_micros);

/* The marker line, with its newline, into buffer (NUL-terminated, cut to size); its length. */
size_t dgpu_log_cut_line(int64_t max_bytes, char* buffer, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* DGPU_AGENT_SHIM_RUNTIME_H_ */
