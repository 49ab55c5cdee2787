// ACL streams. Each stream, a context's default stream included, has one worker thread that runs
// its tasks in submission order; a failing task becomes the stream's pending error, which the
// next synchronize returns.
#include <vector>

#include "runtime_internal.h"

namespace sim {

// ------------------------------------------------------------ the worker thread
void Stream::start() { th = std::thread([this] { worker(); }); }
void Stream::worker() {
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
void Stream::shutdown(bool discard) {
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
Stream::~Stream() { shutdown(true); }

std::shared_ptr<Stream> newStreamLocked(Context &c, void *ctxKey) {
  auto s = std::make_shared<Stream>();
  s->dev = c.dev;
  s->ctxKey = ctxKey;
  s->start();
  return s;
}
namespace {
std::shared_ptr<Stream> defaultStreamLocked(const std::shared_ptr<Context> &c, void *key) {
  if (!c->defaultStream) c->defaultStream = newStreamLocked(*c, key);
  return c->defaultStream;
}
}  // namespace
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

namespace {

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

// ------------------------------------------------------------ services for the model API (runtime.h)
std::shared_ptr<Stream> rtStream(aclrtStream s) {
  std::lock_guard<std::mutex> lk(g_mu);
  return lookupStreamLocked(s, true);
}
int rtStreamDevice(const Stream &s) { return s.dev; }
void rtEnqueue(const std::shared_ptr<Stream> &s, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lk(s->mu);
    if (s->stop.load()) fail(ACL_ERROR_INVALID_PARAM, "stream is being destroyed");
    s->q.push_back(std::move(task));
  }
  s->workCv.notify_one();
}

}  // namespace sim

using namespace sim;

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
