// Happens-before edges that a library guarantees but ThreadSanitizer cannot see.
//
// Debian builds gRPC without ThreadSanitizer, so the ordering that gRPC promises (a reactor's
// callback runs after the operation it completes was started, and the callbacks of one reactor
// run one after the other) happens inside code that TSan does not observe. Release() where the
// ordering starts (before StartRead, StartWrite, Finish) and Acquire() where it ends (at the top of
// each callback) tell TSan about it; both compile to nothing in every other build.
#pragma once

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace dgpu::happens_before {

// What the calling thread did so far happens before the next Acquire(object) on any thread.
inline void Release([[maybe_unused]] const void* object) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(object));
#endif
}

// The calling thread sees what every earlier Release(object) saw.
inline void Acquire([[maybe_unused]] const void* object) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(object));
#endif
}

}  // namespace dgpu::happens_before
