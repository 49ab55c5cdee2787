// ACL callbacks (aclrtSubscribeReport, aclrtLaunchCallback, aclrtProcessReport) and host
// functions, both run from a stream's worker thread.
#include <pthread.h>

#include "runtime_internal.h"

using namespace sim;

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
