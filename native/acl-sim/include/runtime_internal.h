// State shared by the runtime_*.cc files (the ACL runtime: init, devices, streams, memory,
// events, callbacks). One definition of each object lives in the file named beside it; the
// model API sees only runtime.h.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "runtime.h"

#pragma GCC visibility push(hidden)
namespace sim {

// One worker thread per stream runs its tasks in submission order (runtime_streams.cc).
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

  void start();
  void worker();
  void shutdown(bool discard);
  ~Stream();
};

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

// Process-lifetime state (defined in runtime_init.cc, which says why it is never destroyed).
extern std::mutex &g_mu;
extern bool g_init;
extern bool g_everFinalized;
extern uint64_t g_epoch;
extern SimConfig &g_cfg;
extern std::unique_ptr<Device[]> &g_dev;
extern std::map<void *, std::shared_ptr<Context>> &g_ctx;
extern std::map<void *, std::shared_ptr<Stream>> &g_streams;
extern std::map<void *, std::shared_ptr<Event>> &g_events;
extern std::map<uintptr_t, DevAlloc> &g_devAllocs;
extern std::map<uintptr_t, size_t> &g_hostAllocs;
extern std::map<uint64_t, std::shared_ptr<ReportQueue>> &g_reports;
extern std::mutex &g_sleepMu;
extern std::condition_variable &g_sleepCv;

// The calling thread's current context (a key of g_ctx), as in ACL (runtime_devices.cc).
extern thread_local void *tl_ctx;

// "Locked" helpers expect g_mu held and throw SimError.
void requireInitLocked();
void checkDevice(int32_t d);
std::shared_ptr<Context> currentCtxLocked();
std::shared_ptr<Context> requireCtxLocked();
std::shared_ptr<Stream> newStreamLocked(Context &c, void *ctxKey);
std::shared_ptr<Stream> lookupStreamLocked(aclrtStream s, bool sameDevice);

// Releases everything a device owns. Called without g_mu held (runtime_devices.cc).
void teardownDevice(int d);

// Waits on cv until pred, polling the stream's stop flag so teardown never deadlocks.
template <class Pred>
void waitUnlessStopped(std::unique_lock<std::mutex> &lk, std::condition_variable &cv, Stream *s, Pred pred) {
  while (!pred() && !s->stop.load()) cv.wait_for(lk, std::chrono::milliseconds(10));
}

}  // namespace sim
#pragma GCC visibility pop
