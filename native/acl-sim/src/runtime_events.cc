// ACL events: records queued on streams, host and stream waits, elapsed time, and the injected
// `nosyncwait` fault on the timed host wait.
#include <algorithm>

#include "runtime_internal.h"

namespace sim {
namespace {

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
// An event and the (same-device) stream a call queues it on, both under one registry lock, so
// neither can be destroyed between the two lookups.
std::pair<std::shared_ptr<Event>, std::shared_ptr<Stream>> lookupEventOnStream(aclrtEvent event, aclrtStream stream) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto e = lookupEventLocked(event);
  return {e, lookupStreamLocked(stream, true)};
}

}  // namespace
}  // namespace sim

using namespace sim;

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
  // Named variables, not a structured binding: C++17 lambdas cannot capture those.
  auto found = lookupEventOnStream(event, stream);
  std::shared_ptr<Event> e = std::move(found.first);
  std::shared_ptr<Stream> s = std::move(found.second);
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
  // Named variables, not a structured binding: C++17 lambdas cannot capture those.
  auto found = lookupEventOnStream(event, stream);
  std::shared_ptr<Event> e = std::move(found.first);
  std::shared_ptr<Stream> s = std::move(found.second);
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
