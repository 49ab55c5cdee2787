// Units of work that cross between the JS thread and a device thread.
//
// Ownership: a Work object is created on the JS thread, handed to DeviceCore::Submit (the device
// owns it from then on), run on the device thread, then posted back through the device's
// ThreadSafeFunction; Settle() runs on the JS thread and the object is deleted right after.
// Destructors never call N-API (they may run on the device thread when the env is gone), so the
// raw napi_deferred / napi_ref handles below are released only inside Settle().
#pragma once

#include <napi.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "acl_call.h"

namespace npufleet {

class DeviceCore;
class ModelCore;
using Clock = std::chrono::steady_clock;

struct Work {
  virtual ~Work() = default;
  // Device thread. Either finishes (and calls core.Post(this)) or parks itself somewhere the
  // device loop will finish it later (executes waiting for a slot, unload waiting for idle).
  virtual void Begin(DeviceCore &core) = 0;
  // JS thread, exactly once, when the env is alive. Resolves or rejects the promise.
  virtual void Settle(Napi::Env env) = 0;
  // Records the outcome as a failure (the first one wins). Any thread that owns the work.
  virtual void Fail(const Failure &f) {
    if (!failed) {
      failed = true;
      failure = f;
    }
  }
  bool failed = false;
  Failure failure;
  napi_deferred deferred = nullptr;  // the promise JS awaits; null for fire-and-forget work

  // Keeps the device (and its TSFN bookkeeping) alive until this work is settled and deleted.
  std::shared_ptr<DeviceCore> core;
};

// A request with a single outcome (open, load, memInfo, unload, close).
struct Request : Work {};

struct ExecInput {
  const uint8_t *data = nullptr;  // points into a JS ArrayBuffer kept alive by ExecJob::keepAlive
  size_t bytes = 0;
  std::vector<int64_t> dims;
};

struct ExecOutput {
  uint8_t *data = nullptr;  // malloc'd on the device thread; ownership moves to a JS Buffer
  size_t bytes = 0;
  std::vector<int64_t> dims;
};

struct ExecJob : Work {
  ~ExecJob() override {
    for (auto &o : outputs) std::free(o.data);
  }
  void Begin(DeviceCore &core) override;
  void Settle(Napi::Env env) override;  // binding.cc

  // Set on the JS thread before Submit; read-only afterwards.
  std::shared_ptr<ModelCore> model;
  std::vector<ExecInput> inputs;
  uint64_t gear = 0;
  double timeoutMs = 0;  // <= 0: no overrun marking
  Clock::time_point submittedAt;
  std::vector<napi_ref> keepAlive;  // the input typed arrays, released in Settle

  // Written on the device thread, read in Settle.
  std::vector<ExecOutput> outputs;
  double copyInMs = 0, executeMs = 0, copyOutMs = 0, totalMs = 0;
  bool overran = false;
};

}  // namespace npufleet
