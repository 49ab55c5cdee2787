// N-API helpers shared by the binding's files (JS thread only).
#pragma once

#include <napi.h>

#include <memory>
#include <string>
#include <vector>

#include "acl_call.h"
#include "device_core.h"
#include "model_core.h"

namespace npufleet {

// Per-env state (napi instance data).
struct AddonData {
  Napi::FunctionReference deviceCtor;
  Napi::FunctionReference modelCtor;
  std::string addonDir;
  // Handed to the next NativeDevice / NativeModel constructor call (JS thread only). Lets C++
  // construct the wrappers without Napi::External objects, which node frees only on GC.
  std::shared_ptr<DeviceCore> nextDevice;
  std::shared_ptr<ModelCore> nextModel;
};

AddonData &Data(Napi::Env env);

// A JS Error carrying kind / aclError / aclCode / aclMessage / api (see src/device/native-error.ts).
Napi::Error MakeError(Napi::Env env, const Failure &f);
napi_deferred NewPromise(Napi::Env env, Napi::Value *promise);
void Resolve(Napi::Env env, napi_deferred d, napi_value v);  // no-op for a null deferred
void Reject(Napi::Env env, napi_deferred d, const Failure &f);
Napi::Value RejectedNow(Napi::Env env, const std::string &kind, const std::string &message);
Napi::Array DimsToJs(Napi::Env env, const std::vector<int64_t> &dims);
std::vector<int64_t> DimsFromJs(Napi::Value v, const char *what);  // throws TypeError
Napi::Array TensorsToJs(Napi::Env env, const std::vector<TensorInfo> &ts);

// Creates the promise, hands the work to the device, or rejects at once when the device no
// longer accepts work (close requested). `onRefused` releases what the work pins (JS thread).
template <typename OnRefused>
inline Napi::Value SubmitWork(Napi::Env env, DeviceCore &core, std::unique_ptr<Work> work, bool isClose,
                       OnRefused onRefused) {
  Napi::Value promise;
  work->deferred = NewPromise(env, &promise);
  if (!core.Submit(env, work, isClose)) {
    onRefused(*work);
    Failure f;
    f.kind = "closed";
    f.message = "device " + std::to_string(core.id) + " is closed";
    Reject(env, work->deferred, f);
  }
  return promise;
}

inline Napi::Value SubmitWork(Napi::Env env, DeviceCore &core, std::unique_ptr<Work> work,
                              bool isClose = false) {
  return SubmitWork(env, core, std::move(work), isClose, [](Work &) {});
}

}  // namespace npufleet
