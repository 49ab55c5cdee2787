// ACL devices and contexts: reference-counted device open / reset, the teardown of everything a
// device owns, the per-device execution count and the simulated-time sleep teardown interrupts.
#include <cstdlib>
#include <vector>

#include "runtime_internal.h"

namespace sim {

thread_local void *tl_ctx = nullptr;

void requireInitLocked() {
  if (!g_init) fail(ACL_ERROR_UNINITIALIZE, "aclInit has not been called");
}
void checkDevice(int32_t d) {
  if (d < 0 || uint32_t(d) >= g_cfg.devices) {
    fail(ACL_ERROR_RT_INVALID_DEVICEID, "device id " + std::to_string(d) + " is invalid; the simulator has " +
                                            std::to_string(g_cfg.devices) + " devices (NPU_FLEET_SIM_DEVICES)");
  }
}
std::shared_ptr<Context> currentCtxLocked() {
  if (!tl_ctx) return nullptr;
  auto it = g_ctx.find(tl_ctx);
  return it == g_ctx.end() ? nullptr : it->second;
}
std::shared_ptr<Context> requireCtxLocked() {
  requireInitLocked();
  auto c = currentCtxLocked();
  if (!c) fail(ACL_ERROR_RT_CONTEXT_NULL, "no current context on this thread: call aclrtSetDevice or aclrtSetCurrentContext first");
  return c;
}

namespace {
void bumpGeneration(int d) {
  {
    std::lock_guard<std::mutex> lk(g_sleepMu);
    ++g_dev[size_t(d)].gen;
  }
  g_sleepCv.notify_all();
}
}  // namespace

// Releases everything a device owns. Called without g_mu held.
void teardownDevice(int d) {
  std::vector<std::shared_ptr<Stream>> streams;
  std::vector<std::shared_ptr<Event>> events;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    for (auto it = g_ctx.begin(); it != g_ctx.end();) {
      if (it->second->dev != d) {
        ++it;
        continue;
      }
      if (it->second->defaultStream) streams.push_back(it->second->defaultStream);
      for (void *s : it->second->streams) {
        auto si = g_streams.find(s);
        if (si != g_streams.end()) {
          streams.push_back(si->second);
          g_streams.erase(si);
        }
      }
      it = g_ctx.erase(it);
    }
    for (auto it = g_events.begin(); it != g_events.end();) {
      if (it->second->dev == d) {
        events.push_back(it->second);
        it = g_events.erase(it);
      } else {
        ++it;
      }
    }
    g_dev[size_t(d)].refCount = 0;
    g_dev[size_t(d)].defaultCtx = nullptr;
  }
  bumpGeneration(d);  // wakes simulated-time sleeps and hangs on this device
  for (auto &s : streams) s->shutdown(true);
  for (auto &e : events) {
    std::lock_guard<std::mutex> lk(e->mu);
    e->doneSeq = e->recSeq;
    e->cv.notify_all();
  }
  mdlReleaseDevice(d);
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto it = g_devAllocs.begin(); it != g_devAllocs.end();) {
    if (it->second.dev == d) {
      std::free(reinterpret_cast<void *>(it->first));
      it = g_devAllocs.erase(it);
    } else {
      ++it;
    }
  }
  g_dev[size_t(d)].used = 0;
}

// ------------------------------------------------------------ services for the model API (runtime.h)
int rtCurrentDevice() {
  std::lock_guard<std::mutex> lk(g_mu);
  return requireCtxLocked()->dev;
}
uint64_t rtNextExecution(int dev) {
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  checkDevice(dev);
  return ++g_dev[size_t(dev)].execCount;
}
bool rtDeviceSleep(int dev, double ms) {
  if (ms == 0) return true;
  std::unique_lock<std::mutex> lk(g_sleepMu);
  if (!g_dev || dev < 0 || uint32_t(dev) >= g_cfg.devices) return false;
  Device &d = g_dev[size_t(dev)];
  const uint64_t gen = d.gen.load();
  auto changed = [&] { return d.gen.load() != gen; };
  if (ms < 0) {
    g_sleepCv.wait(lk, changed);
    return false;
  }
  return !g_sleepCv.wait_for(lk, std::chrono::duration<double, std::milli>(ms), changed);
}

}  // namespace sim

using namespace sim;

// ------------------------------------------------------------ devices / contexts
ACLSIM_API aclError aclrtGetDeviceCount(uint32_t *count) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  if (!count) return setError(ACL_ERROR_INVALID_PARAM, "count is null");
  *count = g_cfg.devices;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtSetDevice(int32_t deviceId) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  checkDevice(deviceId);
  Device &d = g_dev[size_t(deviceId)];
  if (!d.defaultCtx) {
    auto c = std::make_shared<Context>();
    c->dev = deviceId;
    c->isDefault = true;
    d.defaultCtx = c.get();
    g_ctx[c.get()] = c;
  }
  ++d.refCount;
  tl_ctx = d.defaultCtx;
  return ACL_SUCCESS;
  API_END
}

static aclError resetDevice(int32_t deviceId, bool force) {
  API_BEGIN
  {
    std::lock_guard<std::mutex> lk(g_mu);
    requireInitLocked();
    checkDevice(deviceId);
    Device &d = g_dev[size_t(deviceId)];
    if (d.refCount == 0) return ACL_SUCCESS;
    if (!force && --d.refCount > 0) return ACL_SUCCESS;
  }
  teardownDevice(deviceId);
  return ACL_SUCCESS;
  API_END
}
ACLSIM_API aclError aclrtResetDevice(int32_t deviceId) { return resetDevice(deviceId, false); }
ACLSIM_API aclError aclrtResetDeviceForce(int32_t deviceId) { return resetDevice(deviceId, true); }

ACLSIM_API aclError aclrtGetDevice(int32_t *deviceId) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  auto c = requireCtxLocked();
  if (!deviceId) return setError(ACL_ERROR_INVALID_PARAM, "deviceId is null");
  *deviceId = c->dev;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtGetRunMode(aclrtRunMode *runMode) {
  if (!runMode) return setError(ACL_ERROR_INVALID_PARAM, "runMode is null");
  *runMode = ACL_HOST;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  if (!context) return setError(ACL_ERROR_INVALID_PARAM, "context is null");
  checkDevice(deviceId);
  Device &d = g_dev[size_t(deviceId)];
  if (!d.defaultCtx) {  // an explicit context opens the device like aclrtSetDevice
    auto dc = std::make_shared<Context>();
    dc->dev = deviceId;
    dc->isDefault = true;
    d.defaultCtx = dc.get();
    g_ctx[dc.get()] = dc;
  }
  ++d.refCount;
  auto c = std::make_shared<Context>();
  c->dev = deviceId;
  g_ctx[c.get()] = c;
  tl_ctx = c.get();
  *context = c.get();
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtDestroyContext(aclrtContext context) {
  API_BEGIN
  std::vector<std::shared_ptr<Stream>> streams;
  int dev;
  bool last = false;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    requireInitLocked();
    auto it = g_ctx.find(context);
    if (!context || it == g_ctx.end()) return setError(ACL_ERROR_INVALID_PARAM, "context handle is invalid or destroyed");
    if (it->second->isDefault) return setError(ACL_ERROR_INVALID_PARAM, "the default context cannot be destroyed (use aclrtResetDevice)");
    auto c = it->second;
    dev = c->dev;
    if (c->defaultStream) streams.push_back(c->defaultStream);
    for (void *s : c->streams) {
      auto si = g_streams.find(s);
      if (si != g_streams.end()) {
        streams.push_back(si->second);
        g_streams.erase(si);
      }
    }
    g_ctx.erase(it);
    if (tl_ctx == context) tl_ctx = nullptr;
    Device &d = g_dev[size_t(dev)];
    if (d.refCount > 0 && --d.refCount == 0) last = true;
  }
  for (auto &s : streams) s->shutdown(false);
  if (last) teardownDevice(dev);
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtSetCurrentContext(aclrtContext context) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  if (!context || !g_ctx.count(context)) return setError(ACL_ERROR_INVALID_PARAM, "context handle is invalid or destroyed");
  tl_ctx = context;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtGetCurrentContext(aclrtContext *context) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireCtxLocked();
  if (!context) return setError(ACL_ERROR_INVALID_PARAM, "context is null");
  *context = tl_ctx;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion) {
  if (!majorVersion || !minorVersion || !patchVersion) return setError(ACL_ERROR_INVALID_PARAM, "null version pointer");
  *majorVersion = 1;
  *minorVersion = 10;
  *patchVersion = 0;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclrtSetOpExecuteTimeOut(uint32_t) { return ACL_SUCCESS; }

ACLSIM_API aclError aclsimGetExecutionCount(int32_t deviceId, uint64_t *count) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  checkDevice(deviceId);
  if (!count) return setError(ACL_ERROR_INVALID_PARAM, "count is null");
  *count = g_dev[size_t(deviceId)].execCount.load();
  return ACL_SUCCESS;
  API_END
}
