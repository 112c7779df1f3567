// The highest scheduler epoch an agent has followed, kept in `<work_dir>/.dgpu-epoch` (one
// decimal number and a newline) so that a restarted agent still ignores orders from a deposed
// leader.
//
// StoreEpoch replaces the file atomically and durably (common/atomic_file.h); an agent follows a
// new epoch only once it is stored, so a failure leaves it following the old one.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dgpu::agent {

inline constexpr char kEpochFileName[] = ".dgpu-epoch";

// The stored epoch; 0 when the file does not exist. An unreadable or malformed file is an error
// naming the file (kUnavailable or kInvalidArgument), never a silent 0.
StatusOr<uint64_t> LoadEpoch(const std::string& work_dir);

// Stores `epoch`; errors name the file and the step that failed.
Status StoreEpoch(const std::string& work_dir, uint64_t epoch);

inline constexpr char kInstanceFileName[] = ".dgpu-instance";

// This agent's instance id, kept in `<work_dir>/.dgpu-instance`: 32 hex digits made at the first
// start and read back at every later one, so that the scheduler tells the same agent coming back
// from another agent started with the same agent.id. Errors name the file.
StatusOr<std::string> LoadOrCreateInstanceId(const std::string& work_dir);

}  // namespace dgpu::agent
