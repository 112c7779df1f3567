// dgpu-task-shim: the parent of one task (task_shim.h), started by dgpu-agent.
#include "agent/task_shim.h"

int main(int argc, char** argv) { return dgpu::agent::RunTaskShim(argc, argv); }
