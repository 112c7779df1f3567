/* dgpu-task-shim: the parent of one task (task_shim.h), started by dgpu-agent. */
#include "agent/shim_runtime.h"

int main(int argc, char** argv) { return dgpu_task_shim_run(argc, argv); }
