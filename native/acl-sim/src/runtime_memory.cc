// ACL memory: device allocations counted against the device's budget as ACL counts them, pinned
// host allocations, and checked synchronous and stream copies and memsets.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime_internal.h"

namespace sim {
namespace {

// Byte range [p, p+n) inside one device allocation?
const DevAlloc *devRangeLocked(const void *p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_devAllocs.upper_bound(a);
  if (it == g_devAllocs.begin()) return nullptr;
  --it;
  if (a >= it->first && a - it->first <= it->second.size && n <= it->second.size - (a - it->first)) return &it->second;
  return nullptr;
}
bool hostRangeLocked(const void *p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_hostAllocs.upper_bound(a);
  if (it == g_hostAllocs.begin()) return false;
  --it;
  return a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first);
}

}  // namespace

// ------------------------------------------------------------ services for the model API (runtime.h)
void rtReserve(int dev, size_t bytes, int code, const std::string &what) {
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  checkDevice(dev);
  Device &d = g_dev[size_t(dev)];
  if (bytes > g_cfg.memoryBytes - d.used) {
    fail(code, what + ": device " + std::to_string(dev) + " is out of memory (requested " + std::to_string(bytes) +
                   " bytes, free " + std::to_string(g_cfg.memoryBytes - d.used) + " of " +
                   std::to_string(g_cfg.memoryBytes) + ")");
  }
  d.used += bytes;
}
void rtRelease(int dev, size_t bytes, uint64_t epoch) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_init || epoch != g_epoch || dev < 0 || uint32_t(dev) >= g_cfg.devices) return;
  Device &d = g_dev[size_t(dev)];
  d.used -= std::min(d.used, bytes);
}
bool rtIsDeviceRange(const void *p, size_t n) {
  std::lock_guard<std::mutex> lk(g_mu);
  return devRangeLocked(p, n) != nullptr;
}

}  // namespace sim

using namespace sim;

// ------------------------------------------------------------ memory
ACLSIM_API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy) {
  API_BEGIN
  if (!devPtr) return setError(ACL_ERROR_INVALID_PARAM, "devPtr is null");
  if (size == 0) return setError(ACL_ERROR_INVALID_PARAM, "size must be > 0");
  int dev;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    dev = requireCtxLocked()->dev;
  }
  if (size > (size_t(1) << 48)) {
    return setError(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc of " + std::to_string(size) + " bytes exceeds any device");
  }
  // ACL rounds each allocation up to 32 bytes and adds 32 (acl-api.md §3).
  const size_t accounted = ((size + 31) & ~size_t(31)) + 32;
  rtReserve(dev, accounted, ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc(" + std::to_string(size) + ")");
  void *p = std::aligned_alloc(64, (size + 63) & ~size_t(63));
  std::lock_guard<std::mutex> lk(g_mu);
  if (!p) {
    g_dev[size_t(dev)].used -= accounted;
    return setError(ACL_ERROR_RT_MEMORY_ALLOCATION, "host memory backing the simulated device is exhausted");
  }
  g_devAllocs[reinterpret_cast<uintptr_t>(p)] = DevAlloc{dev, size, accounted};
  *devPtr = p;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtFree(void *devPtr) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  if (!devPtr) return setError(ACL_ERROR_INVALID_PARAM, "devPtr is null");
  auto it = g_devAllocs.find(reinterpret_cast<uintptr_t>(devPtr));
  if (it == g_devAllocs.end()) {
    return setError(ACL_ERROR_INVALID_PARAM, "aclrtFree: pointer was not returned by aclrtMalloc or was already freed");
  }
  Device &d = g_dev[size_t(it->second.dev)];
  d.used -= std::min(d.used, it->second.accounted);
  std::free(devPtr);
  g_devAllocs.erase(it);
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtMallocHost(void **hostPtr, size_t size) {
  API_BEGIN
  if (!hostPtr) return setError(ACL_ERROR_INVALID_PARAM, "hostPtr is null");
  if (size == 0) return setError(ACL_ERROR_INVALID_PARAM, "size must be > 0");
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  if (size > (size_t(1) << 48)) return setError(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMallocHost size is too large");
  void *p = std::aligned_alloc(64, (size + 63) & ~size_t(63));
  if (!p) return setError(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMallocHost(" + std::to_string(size) + ") failed");
  g_hostAllocs[reinterpret_cast<uintptr_t>(p)] = size;
  *hostPtr = p;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtFreeHost(void *hostPtr) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  if (!hostPtr) return setError(ACL_ERROR_INVALID_PARAM, "hostPtr is null");
  auto it = g_hostAllocs.find(reinterpret_cast<uintptr_t>(hostPtr));
  if (it == g_hostAllocs.end()) {
    return setError(ACL_ERROR_INVALID_PARAM, "aclrtFreeHost: pointer was not returned by aclrtMallocHost or was already freed");
  }
  std::free(hostPtr);
  g_hostAllocs.erase(it);
  return ACL_SUCCESS;
  API_END
}

namespace {
// Validates a copy and resolves ACL_MEMCPY_DEFAULT. Caller holds g_mu.
void checkCopyLocked(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind &kind, bool async) {
  if (!dst || !src) fail(ACL_ERROR_INVALID_PARAM, "memcpy: null pointer");
  if (count > destMax) {
    fail(ACL_ERROR_INVALID_PARAM, "memcpy: count " + std::to_string(count) + " exceeds destMax " + std::to_string(destMax));
  }
  const bool dDev = devRangeLocked(dst, count) != nullptr, sDev = devRangeLocked(src, count) != nullptr;
  if (kind == ACL_MEMCPY_DEFAULT) {
    kind = dDev ? (sDev ? ACL_MEMCPY_DEVICE_TO_DEVICE : ACL_MEMCPY_HOST_TO_DEVICE)
                : (sDev ? ACL_MEMCPY_DEVICE_TO_HOST : ACL_MEMCPY_HOST_TO_HOST);
  }
  const char *names[] = {"HOST_TO_HOST", "HOST_TO_DEVICE", "DEVICE_TO_HOST", "DEVICE_TO_DEVICE"};
  if (kind < ACL_MEMCPY_HOST_TO_HOST || kind > ACL_MEMCPY_DEVICE_TO_DEVICE) fail(ACL_ERROR_INVALID_PARAM, "memcpy: invalid kind");
  const bool wantDst = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  const bool wantSrc = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  const std::string k = std::string("memcpy ") + names[kind] + " of " + std::to_string(count) + " bytes: ";
  if (wantDst && !dDev) fail(ACL_ERROR_INVALID_PARAM, k + "dst is not inside a device allocation (aclrtMalloc)");
  if (wantSrc && !sDev) fail(ACL_ERROR_INVALID_PARAM, k + "src is not inside a device allocation (aclrtMalloc)");
  if (async) {
    if (kind == ACL_MEMCPY_HOST_TO_HOST) fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "aclrtMemcpyAsync does not support HOST_TO_HOST");
    if (g_cfg.strictPinned) {
      if (kind == ACL_MEMCPY_HOST_TO_DEVICE && !hostRangeLocked(src, count)) {
        fail(ACL_ERROR_INVALID_PARAM, k + "async src must be pinned memory from aclrtMallocHost (NPU_FLEET_SIM_STRICT_PINNED=0 relaxes this)");
      }
      if (kind == ACL_MEMCPY_DEVICE_TO_HOST && !hostRangeLocked(dst, count)) {
        fail(ACL_ERROR_INVALID_PARAM, k + "async dst must be pinned memory from aclrtMallocHost (NPU_FLEET_SIM_STRICT_PINNED=0 relaxes this)");
      }
    }
  }
}
}  // namespace

ACLSIM_API aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
  API_BEGIN
  {
    std::lock_guard<std::mutex> lk(g_mu);
    requireCtxLocked();
    checkCopyLocked(dst, destMax, src, count, kind, false);
  }
  if (count) std::memmove(dst, src, count);
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                                     aclrtStream stream) {
  API_BEGIN
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    s = lookupStreamLocked(stream, true);
    checkCopyLocked(dst, destMax, src, count, kind, true);
  }
  rtEnqueue(s, [dst, src, count] {
    if (count) std::memmove(dst, src, count);
  });
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireCtxLocked();
  if (!devPtr || count > maxCount) return setError(ACL_ERROR_INVALID_PARAM, "memset: null pointer or count > maxCount");
  if (!devRangeLocked(devPtr, count)) return setError(ACL_ERROR_INVALID_PARAM, "memset: range is not inside a device allocation");
  std::memset(devPtr, value, count);
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream) {
  API_BEGIN
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    s = lookupStreamLocked(stream, true);
    if (!devPtr || count > maxCount) return setError(ACL_ERROR_INVALID_PARAM, "memset: null pointer or count > maxCount");
    if (!devRangeLocked(devPtr, count)) return setError(ACL_ERROR_INVALID_PARAM, "memset: range is not inside a device allocation");
  }
  rtEnqueue(s, [devPtr, value, count] { std::memset(devPtr, value, count); });
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  auto c = requireCtxLocked();
  if (!free || !total) return setError(ACL_ERROR_INVALID_PARAM, "free/total is null");
  if (int(attr) < 0 || int(attr) > ACL_HBM_MEM_NORMAL) return setError(ACL_ERROR_INVALID_PARAM, "invalid memory attribute");
  *total = g_cfg.memoryBytes;
  *free = g_cfg.memoryBytes - g_dev[size_t(c->dev)].used;
  return ACL_SUCCESS;
  API_END
}
