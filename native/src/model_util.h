// Small helpers shared by model_core.cc (load/unload) and model_exec.cc (the pipeline).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "acl_api.h"
#include "work.h"

namespace npufleet {

inline double MsBetween(Clock::time_point from, Clock::time_point to) {
  const double ms = std::chrono::duration<double, std::milli>(to - from).count();
  return ms > 0 ? ms : 0;
}

inline bool IsWaitTimeout(aclError rc) {
  return rc == ACL_ERROR_RT_EVENT_SYNC_TIMEOUT || rc == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT ||
         rc == 107019 /* ACL_ERROR_RT_WAIT_TIMEOUT */ || rc == 207020 /* ACL_ERROR_RT_TIMEOUT */;
}

// The call exists in the library but this SoC/driver does not support it. acl-api.md §1 names
// three such codes: ACL_ERROR_RT_FEATURE_NOT_SUPPORT (207000), ACL_ERROR_API_NOT_SUPPORT (200001),
// ACL_ERROR_FEATURE_UNSUPPORTED (200006).
inline bool IsNotSupported(aclError rc) {
  return rc == 207000 /* ACL_ERROR_RT_FEATURE_NOT_SUPPORT */ ||
         rc == 200001 /* ACL_ERROR_API_NOT_SUPPORT */ ||
         rc == 200006 /* ACL_ERROR_FEATURE_UNSUPPORTED */;
}

// dims × elemBytes in bytes (negative dims count as 0). False when the product does not fit in
// size_t: the dims come from JS (maxInputDims / maxOutputDims / gears) or from the library, and a
// wrapped product would size a buffer far smaller than the shape it is used for.
inline bool TensorBytes(const std::vector<int64_t> &dims, size_t elemBytes, size_t *bytes) {
  size_t n = elemBytes;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, static_cast<size_t>(d < 0 ? 0 : d), &n)) return false;
  }
  *bytes = n;
  return true;
}

// TensorBytes, saturated at SIZE_MAX: for comparisons against a buffer size ("larger than").
inline size_t TensorBytesOrMax(const std::vector<int64_t> &dims, size_t elemBytes) {
  size_t n = 0;
  return TensorBytes(dims, elemBytes, &n) ? n : SIZE_MAX;
}

inline std::string DimsText(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace npufleet
