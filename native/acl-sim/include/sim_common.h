// Shared internals of the simulator: error recording, aligned buffers, clock helpers.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "acl_sim.h"

#pragma GCC visibility push(hidden)
namespace sim {

// Thrown inside the simulator; converted to an aclError + recent-error message at the API edge.
struct SimError {
  int code;
  std::string msg;
};

[[noreturn]] inline void fail(int code, std::string msg) { throw SimError{code, std::move(msg)}; }

// Records the message for aclGetRecentErrMsg on the calling thread and returns code.
aclError setError(aclError code, const std::string &msg);

// Bracket an exported function's body: the API edge where a SimError (or host bad_alloc) becomes
// the returned aclError and the thread's recent error message.
#define API_BEGIN try {
#define API_END                                                          \
  }                                                                      \
  catch (const SimError &e) { return setError(e.code, e.msg); }          \
  catch (const std::bad_alloc &) { return setError(ACL_ERROR_BAD_ALLOC, "host out of memory"); }

using Clock = std::chrono::steady_clock;
inline double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// 64-byte aligned growable byte buffer: capacity is kept across runs so steady-state
// executions allocate nothing.
class AlignedBuf {
 public:
  AlignedBuf() = default;
  AlignedBuf(const AlignedBuf &) = delete;
  AlignedBuf &operator=(const AlignedBuf &) = delete;
  AlignedBuf(AlignedBuf &&o) noexcept : p_(o.p_), cap_(o.cap_) { o.p_ = nullptr; o.cap_ = 0; }
  AlignedBuf &operator=(AlignedBuf &&o) noexcept {
    if (this != &o) { std::free(p_); p_ = o.p_; cap_ = o.cap_; o.p_ = nullptr; o.cap_ = 0; }
    return *this;
  }
  ~AlignedBuf() { std::free(p_); }
  void *ensure(size_t bytes) {
    if (bytes > cap_) {
      size_t c = (bytes + 63) & ~size_t(63);
      void *n = std::aligned_alloc(64, c ? c : 64);
      if (!n) fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "host allocation of " + std::to_string(bytes) + " bytes failed");
      std::free(p_);
      p_ = n;
      cap_ = c;
    }
    return p_;
  }
  void *data() const { return p_; }
  size_t capacity() const { return cap_; }

 private:
  void *p_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace sim
#pragma GCC visibility pop
