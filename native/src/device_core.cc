#include "device_core.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <pthread.h>
#include <stdexcept>
#include <string>

namespace npufleet {

namespace {
// How long the device thread blocks on an in-flight event before looking at its queue again.
// New work arriving during a wait is picked up within this bound (copy-in of the next batch
// still overlaps the current execution whenever that execution is longer).
constexpr int32_t kWaitSliceMs = 1;
constexpr auto kPollSlice = std::chrono::microseconds(200);
}  // namespace

static std::atomic<int> g_runningDevices{0};  // device threads not yet finished
static std::mutex g_registryMu;
static std::vector<std::weak_ptr<DeviceCore>> g_registry;  // every started device

int DeviceCore::ExitGraceMs() {
  const char *v = std::getenv("NPU_FLEET_EXIT_GRACE_MS");
  const int ms = v != nullptr ? std::atoi(v) : 0;
  return ms > 0 ? ms : 2000;
}

bool DeviceCore::ShutdownAll(int waitMs) {
  std::vector<std::shared_ptr<DeviceCore>> live;
  {
    std::lock_guard<std::mutex> lock(g_registryMu);
    for (auto &w : g_registry) {
      if (auto d = w.lock()) live.push_back(std::move(d));
    }
    g_registry.clear();
  }
  bool all = true;
  for (auto &d : live) all = d->ShutdownForExit(waitMs) && all;
  return all;
}

DeviceCore::DeviceCore(int32_t deviceId, const AclBackend &backend)
    : id(deviceId),
      backend_(backend),
      timedWait_(backend.api.aclrtSynchronizeEventWithTimeout != nullptr) {}

int DeviceCore::LiveDevices() { return g_runningDevices.load(); }

DeviceCore::~DeviceCore() {
  if (thread_.joinable()) {
    // The last reference may be dropped by the device thread itself as it exits.
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
}

void DeviceCore::CallJs(Napi::Env env, Napi::Function, void *, Work *work) {
  std::unique_ptr<Work> owned(work);
  if (env == nullptr) return;  // env is going away: free C++ state only, never touch N-API
  try {
    owned->Settle(env);
  } catch (const Napi::Error &e) {
    // Settle must not throw into the TSFN; a failure here means the env is shutting down.
  }
  if (owned->core) owned->core->ReleaseJs(env);
}

void DeviceCore::RetainJs(Napi::Env env) {
  if (pendingJs_++ == 0) tsfn_.Ref(env);
}

void DeviceCore::ReleaseJs(Napi::Env env) {
  if (--pendingJs_ == 0) tsfn_.Unref(env);
}

void DeviceCore::EnvCleanupHook(void *arg) {
  // Env teardown with the device still open (process.exit, worker exit). Registered after the
  // TSFN was created, so it runs before the TSFN's own teardown and the thread can still post.
  auto *weak = static_cast<std::weak_ptr<DeviceCore> *>(arg);
  if (auto core = weak->lock()) {
    core->hookArg_ = nullptr;
    core->ShutdownForExit(ExitGraceMs());
  }
  delete weak;
}

void DeviceCore::OnClosedJs(Napi::Env env) {
  JoinThread();
  if (hookArg_ != nullptr) {
    napi_remove_env_cleanup_hook(env, &DeviceCore::EnvCleanupHook, hookArg_);
    delete hookArg_;
    hookArg_ = nullptr;
  }
}

void DeviceCore::Start(Napi::Env env, std::unique_ptr<Request> open) {
  tsfn_ = Tsfn::New(env, "npu-fleet-device", 0, 1, nullptr);
  tsfn_.Unref(env);
  hookArg_ = new std::weak_ptr<DeviceCore>(shared_from_this());
  napi_add_env_cleanup_hook(env, &DeviceCore::EnvCleanupHook, hookArg_);
  RetainJs(env);
  ++g_runningDevices;
  {
    std::lock_guard<std::mutex> lock(g_registryMu);
    g_registry.erase(std::remove_if(g_registry.begin(), g_registry.end(),
                                    [](const std::weak_ptr<DeviceCore> &w) { return w.expired(); }),
                     g_registry.end());
    g_registry.push_back(shared_from_this());
  }
  open->core = shared_from_this();
  Request *raw = open.release();
  auto self = shared_from_this();
  thread_ = std::thread([self, raw]() { self->ThreadMain(raw); });
}

bool DeviceCore::Submit(Napi::Env env, std::unique_ptr<Work> &work, bool isClose) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return false;
    if (isClose) accepting_ = false;
    work->core = shared_from_this();
    queue_.push_back(std::move(work));
  }
  RetainJs(env);
  cv_.notify_one();
  return true;
}

void ExecJob::Begin(DeviceCore &core) { core.EnqueueExec(this); }

bool DeviceCore::Accepting() {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_;
}

void DeviceCore::JoinThread() {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool DeviceCore::ShutdownForExit(int waitMs) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (accepting_) {
      accepting_ = false;
      struct SilentClose : Work {
        void Begin(DeviceCore &core) override {
          core.RequestClose(nullptr);
          delete this;  // nobody awaits it, so it is never posted back
        }
        void Settle(Napi::Env) override {}
      };
      queue_.push_back(std::make_unique<SilentClose>());
      cv_.notify_one();
    }
    if (!cv_.wait_for(lock, std::chrono::milliseconds(waitMs), [&] { return finished_; })) {
      // The caller goes on to tear down the env (or the process): from here the thread
      // finishes its work without posting it (Post) or releasing the TSFN (ThreadMain).
      envGone_ = true;
      lock.unlock();
      { std::lock_guard<std::mutex> copying(jsInputsMu_); }  // waits out a copy in progress
      if (thread_.joinable()) thread_.detach();
      return false;
    }
  }
  JoinThread();
  return true;
}

void DeviceCore::Post(Work *work) {
  if (work == nullptr) return;
  // Under mu_, so ShutdownForExit cannot give up (and the env free the TSFN) mid-call. Work
  // destructors make no N-API calls, so deleting it here is safe; its promise is gone anyway.
  std::lock_guard<std::mutex> lock(mu_);
  if (envGone_ || tsfn_.NonBlockingCall(work) != napi_ok) delete work;
}

// [device] Named `npu-dev<N>` for top -H, perf and /proc/PID/task/*/comm (threads the ACL library
// creates from this thread inherit the name). Linux only, like CANN.
void DeviceCore::NameThread() {
#ifdef __linux__
  const std::string name = "npu-dev" + std::to_string(id);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
#endif
}

void DeviceCore::ThreadMain(Request *open) {
  const AclApi &api = backend_.api;
  // Held from before aclrtSetDevice to after the last ACL call of this thread, so an env
  // teardown elsewhere (a worker thread ending) never finalizes ACL under this device.
  std::optional<BackendUse> use;
  NameThread();
  try {
    try {
      use.emplace();
    } catch (const std::runtime_error &e) {
      Failure f;
      f.kind = "acl";
      f.api = "aclInit";
      f.message = e.what();
      throw FailureException(f);
    }
    ACL_CHECK(api, aclrtSetDevice, id);
    deviceSet_ = true;
    ACL_CHECK(api, aclrtCreateContext, &context_, id);  // also makes it current on this thread
  } catch (const FailureException &e) {
    open->Fail(e.failure());
  }
  if (open->failed) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      accepting_ = false;
    }
    Teardown();
    Post(open);
  } else {
    Post(open);
    Loop();
  }
  // Anything still queued was submitted after close (cannot happen) or raced a failed open.
  std::deque<std::unique_ptr<Work>> leftovers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leftovers.swap(queue_);
  }
  for (auto &w : leftovers) {
    Failure f;
    f.kind = "closed";
    f.message = "device " + std::to_string(id) + " is closed";
    w->Fail(f);
    Post(w.release());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!envGone_) tsfn_.Release();
  }
  use.reset();
  --g_runningDevices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  }
  cv_.notify_all();
}

void DeviceCore::Loop() {
  while (!exit_) {
    std::deque<std::unique_ptr<Work>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty() && inflight_.empty()) {
        cv_.wait(lock, [&] { return !queue_.empty(); });
      } else if (queue_.empty() && !timedWait_) {
        // No (usable) timed event wait in this ACL: poll the events, waking early for new work.
        cv_.wait_for(lock, kPollSlice, [&] { return !queue_.empty(); });
      }
      batch.swap(queue_);
    }
    for (auto &w : batch) w.release()->Begin(*this);
    if (!inflight_.empty()) PollInflight(batch.empty());
    ProgressLifecycle();
  }
}

void DeviceCore::EnqueueExec(ExecJob *job) {
  ModelCore &model = *job->model;
  if (!model.loaded || closing_) {
    Failure f;
    f.kind = "closed";
    f.message = closing_ ? "device " + std::to_string(id) + " is closing" : "the model is unloaded";
    job->Fail(f);
    Post(job);
    return;
  }
  model.pending.push_back(job);
  Dispatch(model);
}

void DeviceCore::Dispatch(ModelCore &model) {
  for (int slot = model.FreeSlot(); slot >= 0 && !model.pending.empty(); slot = model.FreeSlot()) {
    ExecJob *job = model.pending.front();
    model.pending.pop_front();
    std::unique_lock<std::mutex> copying(jsInputsMu_);
    bool envGone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      envGone = envGone_;
    }
    if (envGone) {
      // Its inputs were JS memory of an env that is gone; nobody awaits the result either.
      copying.unlock();
      Failure f;
      f.kind = "closed";
      f.message = "device " + std::to_string(id) + " was abandoned at env teardown";
      job->Fail(f);
      Post(job);
      continue;
    }
    model.Start(slot, job, copying);  // releases `copying` once the inputs are copied
    for (auto &m : models_) {
      if (m.get() == &model) {
        inflight_.emplace_back(m, slot);
        break;
      }
    }
  }
}

void DeviceCore::PollInflight(bool block) {
  if (block && timedWait_) {
    auto &[model, slot] = inflight_.front();
    // False: the library exports aclrtSynchronizeEventWithTimeout but this SoC/driver does not
    // support it. Poll from now on, as without the symbol; the batch is not failed (the Poll
    // below and later ones retire it). No note reaches JS: nothing carries one from the device
    // thread (only Work results cross to JS, and N-API is never touched here), and the fallback
    // changes no outcome, only how completion is observed.
    if (!model->Wait(slot, kWaitSliceMs)) timedWait_ = false;
  }
  // Retire every finished batch (models are independent, so a hung batch of one model must not
  // hold back another's results); each freed slot may start a pending execute.
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    auto [model, slot] = *it;
    if (!model->Poll(slot)) {
      ++it;
      continue;
    }
    it = inflight_.erase(it);
    const Clock::time_point doneAt = model->SlotAt(slot).doneAt;
    ExecJob *job = model->Finish(slot, lastDoneAt_);
    lastDoneAt_ = doneAt;
    Post(job);
    Dispatch(*model);  // appends to inflight_: re-scan from the start
    it = inflight_.begin();
  }
}

void DeviceCore::RequestUnload(const std::shared_ptr<ModelCore> &model, Work *work) {
  if (!model->loaded || model->unloadWork != nullptr) {
    if (work != nullptr) {
      Failure f;
      f.kind = "closed";
      f.message = "the model is already unloaded";
      work->Fail(f);
    }
    Post(work);
    return;
  }
  model->unloadRequested = true;
  struct Noop : Request {
    void Begin(DeviceCore &) override {}
    void Settle(Napi::Env) override {}
  };
  // A parked marker even when nobody waits, so ProgressLifecycle knows to unload.
  model->unloadWork = work != nullptr ? work : new Noop();
}

void DeviceCore::RequestClose(Work *work) {
  closing_ = true;
  closeWork_ = work;
  for (auto &m : models_) {
    if (m->loaded && m->unloadWork == nullptr) RequestUnload(m, nullptr);
  }
}

void DeviceCore::ProgressLifecycle() {
  for (auto it = models_.begin(); it != models_.end();) {
    ModelCore &m = **it;
    if (m.unloadWork != nullptr && m.IsIdle()) {
      Work *w = m.unloadWork;
      m.unloadWork = nullptr;
      try {
        m.Release();
      } catch (const FailureException &e) {
        w->Fail(e.failure());
      }
      Post(w);
      it = models_.erase(it);
    } else {
      ++it;
    }
  }
  if (closing_ && models_.empty() && inflight_.empty()) {
    Teardown();
    Post(closeWork_);
    closeWork_ = nullptr;
    exit_ = true;
  }
}

void DeviceCore::Teardown() {
  const AclApi &a = api();
  Failure first;
  auto note = [&](aclError rc, const char *fn) {
    if (rc == ACL_SUCCESS) return;
    const std::string recent = TakeRecentErrMsg(a);
    if (first.kind.empty()) {
      first.kind = "acl";
      first.aclCode = rc;
      first.api = fn;
      first.aclRecentMsg = recent;
      first.message = std::string(fn) + " failed: " + std::to_string(rc) + " " + AclErrorName(rc);
    }
  };
  if (context_ != nullptr) note(a.aclrtDestroyContext(context_), "aclrtDestroyContext");
  context_ = nullptr;
  if (deviceSet_) note(a.aclrtResetDevice(id), "aclrtResetDevice");
  deviceSet_ = false;
  if (!first.kind.empty()) {
    if (closeWork_ != nullptr) closeWork_->Fail(first);
  }
}

}  // namespace npufleet
