// ACL runtime subset: init/finalize, devices, contexts, streams (one worker thread each),
// events, callbacks, device memory with accounting, thread-local error messages.
#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "compute.h"
#include "runtime.h"

namespace sim {

// ------------------------------------------------------------ error messages
namespace {
thread_local std::string tl_err;
thread_local std::string tl_errOut;
bool g_logErrors = std::getenv("NPU_FLEET_SIM_LOG") != nullptr;
}  // namespace

aclError setError(aclError code, const std::string &msg) {
  tl_err = "[acl-sim] " + msg + " (aclError " + std::to_string(code) + ")";
  if (g_logErrors) std::fprintf(stderr, "%s\n", tl_err.c_str());
  return code;
}

#define API_BEGIN try {
#define API_END                                                          \
  }                                                                      \
  catch (const SimError &e) { return setError(e.code, e.msg); }          \
  catch (const std::bad_alloc &) { return setError(ACL_ERROR_BAD_ALLOC, "host out of memory"); }

// ------------------------------------------------------------ state
struct Stream {
  int dev = 0;
  void *ctxKey = nullptr;
  std::mutex mu;
  std::condition_variable workCv, idleCv;
  std::deque<std::function<void()>> q;
  bool running = false;
  std::atomic<bool> stop{false};
  int errCode = 0;
  std::string errMsg;
  bool stopOnFailure = false;
  bool subscribed = false;  // guarded by g_mu
  uint64_t tid = 0;         // guarded by g_mu
  std::thread th;

  void start() { th = std::thread([this] { worker(); }); }
  void worker() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      workCv.wait(lk, [&] { return stop.load() || !q.empty(); });
      if (stop.load() && q.empty()) return;
      std::function<void()> t = std::move(q.front());
      q.pop_front();
      running = true;
      lk.unlock();
      int code = 0;
      std::string msg;
      try {
        t();
      } catch (const SimError &e) {
        code = e.code;
        msg = e.msg;
      } catch (const std::bad_alloc &) {
        code = ACL_ERROR_RT_MEMORY_ALLOCATION;
        msg = "host out of memory in a stream task";
      }
      t = nullptr;  // drop captured resources before reporting idle
      lk.lock();
      running = false;
      if (code) {
        if (!errCode) {
          errCode = code;
          errMsg = msg;
        }
        if (stopOnFailure) q.clear();
      }
      if (q.empty()) idleCv.notify_all();
    }
  }
  void shutdown(bool discard) {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
      if (discard) q.clear();
    }
    workCv.notify_all();
    if (th.joinable()) {
      if (th.get_id() == std::this_thread::get_id()) th.detach();
      else th.join();
    }
    std::lock_guard<std::mutex> lk(mu);
    q.clear();
    running = false;
    idleCv.notify_all();
  }
  ~Stream() { shutdown(true); }
};

namespace {

struct Context {
  int dev = 0;
  bool isDefault = false;
  std::shared_ptr<Stream> defaultStream;
  std::set<void *> streams;
};

struct Event {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recSeq = 0, doneSeq = 0;
  Clock::time_point stamp;
  int dev = 0;
};

struct ReportDone {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  void set() {
    std::lock_guard<std::mutex> lk(mu);
    done = true;
    cv.notify_all();
  }
};
struct Report {
  aclrtCallback fn;
  void *ud;
  std::shared_ptr<ReportDone> done;
};
struct ReportQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Report> q;
  bool closed = false;
  int streams = 0;
  void close() {
    std::lock_guard<std::mutex> lk(mu);
    closed = true;
    for (Report &r : q) r.done->set();
    q.clear();
    cv.notify_all();
  }
};

struct DevAlloc {
  int dev;
  size_t size;
  size_t accounted;
};

struct Device {
  int refCount = 0;
  void *defaultCtx = nullptr;
  size_t used = 0;
  std::atomic<uint64_t> gen{0};
  std::atomic<uint64_t> execCount{0};
};

// Process-lifetime state lives on the heap and is never destroyed: a process that exits
// without aclFinalize must not run destructors that join (possibly hung) stream threads or
// destroy mutexes other threads still hold.
std::mutex &g_mu = *new std::mutex;
bool g_init = false;
bool g_everFinalized = false;
uint64_t g_epoch = 0;
SimConfig &g_cfg = *new SimConfig;
std::unique_ptr<Device[]> &g_dev = *new std::unique_ptr<Device[]>;
std::map<void *, std::shared_ptr<Context>> &g_ctx = *new std::map<void *, std::shared_ptr<Context>>;
std::map<void *, std::shared_ptr<Stream>> &g_streams = *new std::map<void *, std::shared_ptr<Stream>>;
std::map<void *, std::shared_ptr<Event>> &g_events = *new std::map<void *, std::shared_ptr<Event>>;
std::map<uintptr_t, DevAlloc> &g_devAllocs = *new std::map<uintptr_t, DevAlloc>;
std::map<uintptr_t, size_t> &g_hostAllocs = *new std::map<uintptr_t, size_t>;
std::map<uint64_t, std::shared_ptr<ReportQueue>> &g_reports = *new std::map<uint64_t, std::shared_ptr<ReportQueue>>;
std::mutex &g_sleepMu = *new std::mutex;
std::condition_variable &g_sleepCv = *new std::condition_variable;

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
std::shared_ptr<Stream> newStreamLocked(Context &c, void *ctxKey) {
  auto s = std::make_shared<Stream>();
  s->dev = c.dev;
  s->ctxKey = ctxKey;
  s->start();
  return s;
}
std::shared_ptr<Stream> defaultStreamLocked(const std::shared_ptr<Context> &c, void *key) {
  if (!c->defaultStream) c->defaultStream = newStreamLocked(*c, key);
  return c->defaultStream;
}
std::shared_ptr<Stream> lookupStreamLocked(aclrtStream s, bool sameDevice) {
  auto c = requireCtxLocked();
  if (!s) return defaultStreamLocked(c, tl_ctx);
  auto it = g_streams.find(s);
  if (it == g_streams.end()) fail(ACL_ERROR_INVALID_PARAM, "stream handle is invalid or destroyed");
  if (sameDevice && it->second->dev != c->dev) {
    fail(ACL_ERROR_RT_STREAM_CONTEXT, "stream belongs to device " + std::to_string(it->second->dev) +
                                          " but the current context is on device " + std::to_string(c->dev));
  }
  return it->second;
}
std::shared_ptr<Event> lookupEventLocked(aclrtEvent e) {
  requireInitLocked();
  auto it = g_events.find(e);
  if (it == g_events.end()) fail(ACL_ERROR_INVALID_PARAM, "event handle is invalid or destroyed");
  return it->second;
}
// The same under the registry lock, for calls that then lock only the event itself.
std::shared_ptr<Event> lookupEvent(aclrtEvent e) {
  std::lock_guard<std::mutex> lk(g_mu);
  return lookupEventLocked(e);
}

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

void bumpGeneration(int d) {
  {
    std::lock_guard<std::mutex> lk(g_sleepMu);
    ++g_dev[size_t(d)].gen;
  }
  g_sleepCv.notify_all();
}

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

// Waits on cv until pred, polling the stream's stop flag so teardown never deadlocks.
template <class Pred>
void waitUnlessStopped(std::unique_lock<std::mutex> &lk, std::condition_variable &cv, Stream *s, Pred pred) {
  while (!pred() && !s->stop.load()) cv.wait_for(lk, std::chrono::milliseconds(10));
}

aclError syncStream(const std::shared_ptr<Stream> &s, int32_t timeoutMs) {
  std::unique_lock<std::mutex> lk(s->mu);
  auto idle = [&] { return (s->q.empty() && !s->running) || s->stop.load(); };
  if (timeoutMs < 0) {
    s->idleCv.wait(lk, idle);
  } else if (!s->idleCv.wait_for(lk, std::chrono::milliseconds(timeoutMs), idle)) {
    return setError(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
                    "stream synchronize timed out after " + std::to_string(timeoutMs) + " ms; its tasks keep running");
  }
  if (s->errCode) {
    const int code = s->errCode;
    const std::string msg = s->errMsg;
    s->errCode = 0;
    s->errMsg.clear();
    return setError(code, msg);
  }
  return ACL_SUCCESS;
}

}  // namespace

// ------------------------------------------------------------ services for model_api.cc
void rtRequireInit() {
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
}
int rtCurrentDevice() {
  std::lock_guard<std::mutex> lk(g_mu);
  return requireCtxLocked()->dev;
}
const SimConfig &rtConfig() { return g_cfg; }
uint64_t rtEpoch() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_epoch;
}
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
std::shared_ptr<Stream> rtStream(aclrtStream s) {
  std::lock_guard<std::mutex> lk(g_mu);
  return lookupStreamLocked(s, true);
}
int rtStreamDevice(const Stream &s) { return s.dev; }
bool rtIsDeviceRange(const void *p, size_t n) {
  std::lock_guard<std::mutex> lk(g_mu);
  return devRangeLocked(p, n) != nullptr;
}
void rtEnqueue(const std::shared_ptr<Stream> &s, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lk(s->mu);
    if (s->stop.load()) fail(ACL_ERROR_INVALID_PARAM, "stream is being destroyed");
    s->q.push_back(std::move(task));
  }
  s->workCv.notify_one();
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

// ------------------------------------------------------------ init / finalize / errors
ACLSIM_API aclError aclInit(const char *configPath) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_init) return setError(ACL_ERROR_REPEAT_INITIALIZE, "aclInit was already called");
  if (configPath && *configPath) {
    struct stat st;
    if (stat(configPath, &st) != 0) return setError(ACL_ERROR_INVALID_FILE, std::string("config file not found: ") + configPath);
  }
  SimConfig cfg;
  std::string err;
  if (!loadConfigFromEnv(cfg, err)) return setError(ACL_ERROR_INVALID_PARAM, err);
  g_cfg = cfg;
  g_dev.reset(new Device[g_cfg.devices]);
  ++g_epoch;
  g_init = true;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclFinalize() {
  API_BEGIN
  uint32_t n;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_init) {
      return g_everFinalized ? setError(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize was already called")
                             : setError(ACL_ERROR_UNINITIALIZE, "aclInit has not been called");
    }
    n = g_cfg.devices;
  }
  for (uint32_t d = 0; d < n; ++d) teardownDevice(int(d));
  mdlReleaseAll();
  std::map<uint64_t, std::shared_ptr<ReportQueue>> reports;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    for (auto &h : g_hostAllocs) std::free(reinterpret_cast<void *>(h.first));
    g_hostAllocs.clear();
    reports.swap(g_reports);
    g_init = false;
    g_everFinalized = true;
  }
  for (auto &r : reports) r.second->close();
  shutdownPool();
  {
    std::lock_guard<std::mutex> lk(g_sleepMu);
    g_dev.reset();
  }
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclFinalizeReference(uint64_t *refCount) {
  if (refCount) *refCount = 0;
  return aclFinalize();
}

ACLSIM_API const char *aclGetRecentErrMsg() {
  if (tl_err.empty()) return nullptr;
  tl_errOut.swap(tl_err);
  tl_err.clear();
  return tl_errOut.c_str();
}

ACLSIM_API size_t aclDataTypeSize(aclDataType t) {
  switch (t) {
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_FLOAT16: case ACL_INT16: case ACL_UINT16: case ACL_BF16: return 2;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: case ACL_COMPLEX64: return 8;
    case ACL_COMPLEX128: return 16;
    case ACL_COMPLEX32: return 4;
    default: return 0;
  }
}

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

// ------------------------------------------------------------ streams
ACLSIM_API aclError aclrtCreateStream(aclrtStream *stream) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  auto c = requireCtxLocked();
  if (!stream) return setError(ACL_ERROR_INVALID_PARAM, "stream is null");
  auto s = newStreamLocked(*c, tl_ctx);
  g_streams[s.get()] = s;
  c->streams.insert(s.get());
  *stream = s.get();
  return ACL_SUCCESS;
  API_END
}

static aclError destroyStream(aclrtStream stream, bool force) {
  API_BEGIN
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto c = requireCtxLocked();
    auto it = g_streams.find(stream);
    if (!stream || it == g_streams.end()) return setError(ACL_ERROR_INVALID_PARAM, "stream handle is invalid or destroyed");
    if (it->second->dev != c->dev) {
      return setError(ACL_ERROR_RT_STREAM_CONTEXT, "the stream is not in the current context (device " +
                                                       std::to_string(it->second->dev) + ")");
    }
    s = it->second;
    g_streams.erase(it);
    auto ci = g_ctx.find(s->ctxKey);
    if (ci != g_ctx.end()) ci->second->streams.erase(stream);
  }
  s->shutdown(force);  // non-force: the worker drains the queue before it exits
  return ACL_SUCCESS;
  API_END
}
ACLSIM_API aclError aclrtDestroyStream(aclrtStream stream) { return destroyStream(stream, false); }
ACLSIM_API aclError aclrtDestroyStreamForce(aclrtStream stream) { return destroyStream(stream, true); }

ACLSIM_API aclError aclrtSynchronizeStream(aclrtStream stream) {
  API_BEGIN
  return syncStream(rtStream(stream), -1);
  API_END
}

ACLSIM_API aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout) {
  API_BEGIN
  if (timeout < -1) return setError(ACL_ERROR_RT_PARAM_INVALID, "timeout must be -1 or >= 0 ms");
  return syncStream(rtStream(stream), timeout);
  API_END
}

ACLSIM_API aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status) {
  API_BEGIN
  if (!status) return setError(ACL_ERROR_INVALID_PARAM, "status is null");
  auto s = rtStream(stream);
  std::lock_guard<std::mutex> lk(s->mu);
  *status = s->q.empty() && !s->running ? ACL_STREAM_STATUS_COMPLETE : ACL_STREAM_STATUS_NOT_READY;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode) {
  API_BEGIN
  if (mode > ACL_STOP_ON_FAILURE) return setError(ACL_ERROR_INVALID_PARAM, "mode must be ACL_CONTINUE_ON_FAILURE or ACL_STOP_ON_FAILURE");
  auto s = rtStream(stream);
  std::lock_guard<std::mutex> lk(s->mu);
  s->stopOnFailure = mode == ACL_STOP_ON_FAILURE;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtSynchronizeDevice() {
  API_BEGIN
  std::vector<std::shared_ptr<Stream>> all;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto c = requireCtxLocked();
    for (auto &cc : g_ctx) {
      if (cc.second->dev == c->dev && cc.second->defaultStream) all.push_back(cc.second->defaultStream);
    }
    for (auto &s : g_streams) {
      if (s.second->dev == c->dev) all.push_back(s.second);
    }
  }
  aclError first = ACL_SUCCESS;
  for (auto &s : all) {
    aclError e = syncStream(s, -1);
    if (e && !first) first = e;
  }
  return first;
  API_END
}

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

// ------------------------------------------------------------ events
ACLSIM_API aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  auto c = requireCtxLocked();
  if (!event) return setError(ACL_ERROR_INVALID_PARAM, "event is null");
  auto e = std::make_shared<Event>();
  e->dev = c->dev;
  g_events[e.get()] = e;
  *event = e.get();
  return ACL_SUCCESS;
  API_END
}
ACLSIM_API aclError aclrtCreateEvent(aclrtEvent *event) { return aclrtCreateEventWithFlag(event, ACL_EVENT_SYNC); }

ACLSIM_API aclError aclrtDestroyEvent(aclrtEvent event) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
  if (!g_events.erase(event)) return setError(ACL_ERROR_INVALID_PARAM, "event handle is invalid or destroyed");
  return ACL_SUCCESS;  // a pending record keeps the object alive until it completes
  API_END
}

ACLSIM_API aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  API_BEGIN
  std::shared_ptr<Stream> s;
  std::shared_ptr<Event> e;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    e = lookupEventLocked(event);
    s = lookupStreamLocked(stream, true);
  }
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lk(e->mu);
    seq = ++e->recSeq;
  }
  rtEnqueue(s, [e, seq] {
    std::lock_guard<std::mutex> lk(e->mu);
    e->doneSeq = std::max(e->doneSeq, seq);
    e->stamp = Clock::now();
    e->cv.notify_all();
  });
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtResetEvent(aclrtEvent event, aclrtStream) {
  API_BEGIN
  const std::shared_ptr<Event> e = lookupEvent(event);
  std::lock_guard<std::mutex> lk(e->mu);
  e->doneSeq = e->recSeq;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status) {
  API_BEGIN
  const std::shared_ptr<Event> e = lookupEvent(event);
  if (!status) return setError(ACL_ERROR_INVALID_PARAM, "status is null");
  std::lock_guard<std::mutex> lk(e->mu);
  *status = e->doneSeq >= e->recSeq ? ACL_EVENT_STATUS_COMPLETE : ACL_EVENT_STATUS_NOT_READY;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status) {
  API_BEGIN
  const std::shared_ptr<Event> e = lookupEvent(event);
  if (!status) return setError(ACL_ERROR_INVALID_PARAM, "status is null");
  std::lock_guard<std::mutex> lk(e->mu);
  *status = e->doneSeq >= e->recSeq ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return ACL_SUCCESS;
  API_END
}

// The NPU_FLEET_SIM_FAULTS item `[devN:]nosyncwait` that covers device `dev`, if any. Caller holds g_mu.
static const Fault *noSyncWaitFaultLocked(int dev) {
  for (const Fault &f : g_cfg.faults) {
    if (f.kind == Fault::NOSYNCWAIT && (f.device < 0 || f.device == dev)) return &f;
  }
  return nullptr;
}

static aclError syncEvent(aclrtEvent event, int32_t timeout, bool timed) {
  API_BEGIN
  if (timeout < -1) return setError(ACL_ERROR_RT_PARAM_INVALID, "timeout must be -1 or >= 0 ms");
  std::shared_ptr<Event> e;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    e = lookupEventLocked(event);
    // Injected: the symbol exists but this SoC/driver does not support the timed wait.
    if (const Fault *f = timed ? noSyncWaitFaultLocked(e->dev) : nullptr) {
      return setError(ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                      "injected fault '" + f->text + "': aclrtSynchronizeEventWithTimeout is not supported on device " +
                          std::to_string(e->dev));
    }
  }
  std::unique_lock<std::mutex> lk(e->mu);
  const uint64_t target = e->recSeq;
  auto done = [&] { return e->doneSeq >= target; };
  if (timeout < 0) {
    e->cv.wait(lk, done);
  } else if (!e->cv.wait_for(lk, std::chrono::milliseconds(timeout), done)) {
    return setError(ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, "event synchronize timed out after " + std::to_string(timeout) + " ms");
  }
  return ACL_SUCCESS;
  API_END
}
ACLSIM_API aclError aclrtSynchronizeEvent(aclrtEvent event) { return syncEvent(event, -1, false); }
ACLSIM_API aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout) {
  return syncEvent(event, timeout, true);
}

ACLSIM_API aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
  API_BEGIN
  std::shared_ptr<Stream> s;
  std::shared_ptr<Event> e;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    e = lookupEventLocked(event);
    s = lookupStreamLocked(stream, true);
  }
  uint64_t target;
  {
    std::lock_guard<std::mutex> lk(e->mu);
    target = e->recSeq;
  }
  Stream *raw = s.get();
  rtEnqueue(s, [e, target, raw] {
    std::unique_lock<std::mutex> lk(e->mu);
    waitUnlessStopped(lk, e->cv, raw, [&] { return e->doneSeq >= target; });
  });
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent) {
  API_BEGIN
  if (!ms) return setError(ACL_ERROR_INVALID_PARAM, "ms is null");
  std::shared_ptr<Event> a, b;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    a = lookupEventLocked(startEvent);
    b = lookupEventLocked(endEvent);
  }
  Clock::time_point ta, tb;
  {
    std::lock_guard<std::mutex> lk(a->mu);
    if (a->recSeq == 0 || a->doneSeq < a->recSeq) return setError(ACL_ERROR_INVALID_PARAM, "start event is not recorded or not complete");
    ta = a->stamp;
  }
  {
    std::lock_guard<std::mutex> lk(b->mu);
    if (b->recSeq == 0 || b->doneSeq < b->recSeq) return setError(ACL_ERROR_INVALID_PARAM, "end event is not recorded or not complete");
    tb = b->stamp;
  }
  *ms = float(std::chrono::duration<double, std::milli>(tb - ta).count());
  return ACL_SUCCESS;
  API_END
}

// ------------------------------------------------------------ callbacks
ACLSIM_API aclError aclrtSubscribeReport(uint64_t threadId, aclrtStream stream) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  auto s = lookupStreamLocked(stream, true);
  if (s->subscribed) {
    return setError(ACL_ERROR_RT_STREAM_SUBSCRIBE, "the stream already has a subscribed report thread");
  }
  auto &q = g_reports[threadId];
  if (!q) q = std::make_shared<ReportQueue>();
  ++q->streams;
  s->subscribed = true;
  s->tid = threadId;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtUnSubscribeReport(uint64_t threadId, aclrtStream stream) {
  API_BEGIN
  std::shared_ptr<ReportQueue> closeMe;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    auto s = lookupStreamLocked(stream, true);
    if (!s->subscribed || s->tid != threadId) {
      return setError(ACL_ERROR_RT_STREAM_SUBSCRIBE, "the stream is not subscribed by that thread");
    }
    s->subscribed = false;
    auto it = g_reports.find(threadId);
    if (it != g_reports.end() && --it->second->streams == 0) {
      closeMe = it->second;
      g_reports.erase(it);
    }
  }
  if (closeMe) closeMe->close();
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtLaunchCallback(aclrtCallback fn, void *userData, aclrtCallbackBlockType blockType,
                                        aclrtStream stream) {
  API_BEGIN
  if (!fn) return setError(ACL_ERROR_INVALID_PARAM, "fn is null");
  if (blockType != ACL_CALLBACK_BLOCK && blockType != ACL_CALLBACK_NO_BLOCK) {
    return setError(ACL_ERROR_INVALID_PARAM, "invalid blockType");
  }
  std::shared_ptr<Stream> s;
  std::shared_ptr<ReportQueue> q;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    s = lookupStreamLocked(stream, true);
    if (!s->subscribed) {
      return setError(ACL_ERROR_RT_STREAM_NO_CB_REG, "no report thread is subscribed to this stream (aclrtSubscribeReport)");
    }
    q = g_reports[s->tid];
  }
  const bool block = blockType == ACL_CALLBACK_BLOCK;
  Stream *raw = s.get();
  rtEnqueue(s, [q, fn, userData, block, raw] {
    auto done = std::make_shared<ReportDone>();
    {
      std::lock_guard<std::mutex> lk(q->mu);
      if (q->closed) return;
      q->q.push_back(Report{fn, userData, done});
      q->cv.notify_all();
    }
    if (block) {
      std::unique_lock<std::mutex> lk(done->mu);
      waitUnlessStopped(lk, done->cv, raw, [&] { return done->done; });
    }
  });
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtProcessReport(int32_t timeout) {
  API_BEGIN
  if (timeout == 0 || timeout < -1) return setError(ACL_ERROR_INVALID_PARAM, "timeout must be -1 or > 0 ms");
  std::shared_ptr<ReportQueue> q;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    requireInitLocked();
    auto it = g_reports.find(uint64_t(pthread_self()));
    if (it == g_reports.end()) {
      return setError(ACL_ERROR_RT_THREAD_SUBSCRIBE, "this thread is not subscribed to any stream (aclrtSubscribeReport)");
    }
    q = it->second;
  }
  Report r;
  {
    std::unique_lock<std::mutex> lk(q->mu);
    auto ready = [&] { return !q->q.empty() || q->closed; };
    if (timeout < 0) {
      q->cv.wait(lk, ready);
    } else if (!q->cv.wait_for(lk, std::chrono::milliseconds(timeout), ready)) {
      return setError(ACL_ERROR_RT_REPORT_TIMEOUT, "no callback arrived within " + std::to_string(timeout) + " ms");
    }
    if (q->q.empty()) return setError(ACL_ERROR_RT_THREAD_SUBSCRIBE, "the report subscription was removed");
    r = q->q.front();
    q->q.pop_front();
  }
  r.fn(r.ud);
  r.done->set();
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void *args) {
  API_BEGIN
  if (!fn) return setError(ACL_ERROR_INVALID_PARAM, "fn is null");
  auto s = rtStream(stream);
  rtEnqueue(s, [fn, args] { fn(args); });
  return ACL_SUCCESS;
  API_END
}

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
