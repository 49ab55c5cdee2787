// One opened device: its native thread, ACL context, loaded models and the pipeline
// of executions in flight.
//
// Threads: methods marked [JS] run on the JS thread only; [device] on this device's own thread
// only. Every ACL call for the device is made from [device] methods (and ModelCore, which only
// the device thread drives). The state under `mu_` (the queue, `accepting_`, `finished_`,
// `envGone_`) and `jsInputsMu_` are the only things both threads touch.
#pragma once

#include <napi.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "acl_loader.h"
#include "model_core.h"
#include "work.h"

namespace npufleet {

class DeviceCore : public std::enable_shared_from_this<DeviceCore> {
 public:
  static void CallJs(Napi::Env env, Napi::Function, void *, Work *work);
  using Tsfn = Napi::TypedThreadSafeFunction<void, Work, &DeviceCore::CallJs>;

  DeviceCore(int32_t deviceId, const AclBackend &backend);
  ~DeviceCore();

  // [JS] Creates the ThreadSafeFunction and the device thread; `open` is settled (through the
  // TSFN) once the thread has set the device and created its context. Streams belong to the
  // models' pipeline slots (model_core.h).
  void Start(Napi::Env env, std::unique_ptr<Request> open);
  // [JS] Hands `work` to the device thread and counts it as a pending promise (the event loop
  // stays alive while any is pending). Returns false (leaving `work` with the caller) once close
  // was requested. `isClose` atomically stops intake behind this item.
  bool Submit(Napi::Env env, std::unique_ptr<Work> &work, bool isClose = false);
  // [JS] The device thread has posted its final work (close, or failed open): join it and drop
  // the env cleanup hook.
  void OnClosedJs(Napi::Env env);
  // [JS] Env teardown: stop the thread (closing everything) and wait up to `waitMs` for it.
  // Returns false when the thread did not finish in time (it is then detached).
  bool ShutdownForExit(int waitMs);
  bool Accepting();

  // [device] Sends `work` to the JS thread for Settle(); deletes it if JS is gone (the TSFN is
  // closing, or the env was torn down while this thread was still busy).
  void Post(Work *work);
  // [device] Used by Work::Begin implementations.
  const AclApi &api() const { return backend_.api; }
  void AddModel(std::shared_ptr<ModelCore> model) { models_.push_back(std::move(model)); }
  void EnqueueExec(ExecJob *job);
  // `work` (may be null) is posted after the model finished its in-flight work and was released.
  void RequestUnload(const std::shared_ptr<ModelCore> &model, Work *work);
  void RequestClose(Work *work);

  const int32_t id;
  static int LiveDevices();
  // Process exit (atexit, also reached by process.exit(), which skips env cleanup hooks): stops
  // every device thread still running, waiting up to waitMs for each, before the ACL library's
  // static objects are destroyed. False when some device did not stop (hung work).
  static bool ShutdownAll(int waitMs);
  // How long teardown at exit waits for work in flight: NPU_FLEET_EXIT_GRACE_MS, default 2000.
  static int ExitGraceMs();

 private:
  static void EnvCleanupHook(void *arg);
  void JoinThread();
  void ThreadMain(Request *open);        // [device]
  void NameThread();                // [device] names the thread
  void Loop();                        // [device]
  void Dispatch(ModelCore &model);    // [device] start pending executes on free slots
  void PollInflight(bool block);      // [device]
  void ProgressLifecycle();           // [device] finish parked unloads / close once idle
  void Teardown();                    // [device] context, device reset

  const AclBackend &backend_;
  Tsfn tsfn_;
  std::thread thread_;

  // Shared between threads, guarded by mu_.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Work>> queue_;
  bool accepting_ = true;
  bool finished_ = false;  // the thread has posted its last work and released the TSFN
  // ShutdownForExit gave up waiting: the env, and with it the TSFN, may be gone (node frees a
  // TSFN at env teardown whoever still holds it), so the thread must not touch it any more.
  bool envGone_ = false;
  // Held by the device thread while it copies a batch's inputs out of JS memory (ModelCore::Start)
  // and by ShutdownForExit right after it sets envGone_: the env's heap, those inputs included,
  // is freed once ShutdownForExit returns, so no copy may be running then or start later.
  std::mutex jsInputsMu_;

  // [device] only.
  aclrtContext context_ = nullptr;
  bool deviceSet_ = false;
  std::vector<std::shared_ptr<ModelCore>> models_;
  std::deque<std::pair<std::shared_ptr<ModelCore>, int>> inflight_;  // submission order
  Clock::time_point lastDoneAt_{};  // when the previously retired batch finished
  // Block on the oldest batch with aclrtSynchronizeEventWithTimeout (else poll the events). Set
  // when the library has the symbol; cleared for good the first time the call reports "not
  // supported" on this device (ModelCore::Wait returns false).
  bool timedWait_ = false;
  bool closing_ = false;
  Work *closeWork_ = nullptr;
  bool exit_ = false;

  // [JS] only.
  int pendingJs_ = 0;
  std::weak_ptr<DeviceCore> *hookArg_ = nullptr;  // registered env cleanup hook, if any
  void RetainJs(Napi::Env env);
  void ReleaseJs(Napi::Env env);
};

}  // namespace npufleet
