// Process-wide settings of the gRPC runtime, applied first thing in main() by every program that
// speaks gRPC (the scheduler, the agent, the fleet load generator).
#pragma once

#include <absl/synchronization/mutex.h>

namespace dgpu::common {

// Turns off abseil's lock-order (deadlock) tracking. Debian builds abseil without NDEBUG, so
// every absl::Mutex that gRPC locks records its lock order in a process-wide graph: measured with
// 10,000 agent connections, that bookkeeping (GraphCycles::GetId) took 10% of the scheduler's
// CPU and 30% of the load generator's. Release builds of abseil ship with it off; dgpu's own
// code does not use absl::Mutex.
inline void ConfigureGrpcRuntime() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace dgpu::common
