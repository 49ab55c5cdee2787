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

inline size_t ElementCount(const std::vector<int64_t> &dims) {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d < 0 ? 0 : d);
  return n;
}

inline std::string DimsText(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace npufleet
