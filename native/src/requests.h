// The request types the JS-facing methods submit to a device thread. Begin() runs on the device
// thread (the only ACL calls here), Settle() on the JS thread (see work.h for ownership).
#pragma once

#include <napi.h>

#include <memory>

#include "device_core.h"
#include "model_core.h"
#include "napi_util.h"
#include "work.h"

namespace npufleet {

struct OpenWork : Request {
  void Begin(DeviceCore &) override {}  // the device thread performs the open itself
  void Settle(Napi::Env env) override {
    if (failed) {
      core->OnClosedJs(env);
      Reject(env, deferred, failure);
      return;
    }
    Data(env).nextDevice = core;
    Napi::Object device = Data(env).deviceCtor.New({});
    Resolve(env, deferred, device);
  }
};

struct LoadWork : Request {
  // [device]
  void Begin(DeviceCore &dev) override {
    model = std::make_shared<ModelCore>(dev.api());
    try {
      model->Load(opts);
      dev.AddModel(model);
    } catch (const FailureException &e) {
      Fail(e.failure());
    } catch (const std::exception &e) {
      Failure f;
      f.kind = "internal";
      f.message = std::string("model load failed: ") + e.what();
      Fail(f);
    }
    if (failed) {
      try {
        model->Release();
      } catch (const FailureException &) {
        // the load failure is what the caller needs to see
      }
      model.reset();
    }
    dev.Post(this);
  }
  void Settle(Napi::Env env) override {
    if (failed) {
      Reject(env, deferred, failure);
      return;
    }
    Data(env).nextModel = model;
    Data(env).nextDevice = core;
    Napi::Object handle = Data(env).modelCtor.New({});
    const ModelInfo &mi = model->info;
    Napi::Object info = Napi::Object::New(env);
    info.Set("inputs", TensorsToJs(env, mi.inputs));
    info.Set("outputs", TensorsToJs(env, mi.outputs));
    Napi::Array gears = Napi::Array::New(env, mi.gears.size());
    for (size_t i = 0; i < mi.gears.size(); ++i) gears.Set(i, double(mi.gears[i]));
    info.Set("gears", gears);
    info.Set("dynamic", mi.dynamic == DynamicKind::Batch   ? "batch"
                        : mi.dynamic == DynamicKind::Range ? "range"
                                                           : "static");
    info.Set("deviceMemoryBytes", double(mi.deviceMemoryBytes));
    info.Set("slots", mi.slots);
    info.Set("modelId", double(mi.modelId));
    handle.Set("info", info);
    Resolve(env, deferred, handle);
  }
  LoadOptions opts;
  std::shared_ptr<ModelCore> model;
};

struct MemInfoWork : Request {
  // [device]
  void Begin(DeviceCore &dev) override {
    try {
      ACL_CHECK(dev.api(), aclrtGetMemInfo, ACL_HBM_MEM, &freeBytes, &totalBytes);
    } catch (const FailureException &e) {
      Fail(e.failure());
    }
    dev.Post(this);
  }
  void Settle(Napi::Env env) override {
    if (failed) return Reject(env, deferred, failure);
    Napi::Object o = Napi::Object::New(env);
    o.Set("freeBytes", double(freeBytes));
    o.Set("totalBytes", double(totalBytes));
    Resolve(env, deferred, o);
  }
  size_t freeBytes = 0, totalBytes = 0;
};

struct UnloadWork : Request {
  void Begin(DeviceCore &dev) override { dev.RequestUnload(model, this); }  // [device]
  void Settle(Napi::Env env) override {
    if (failed) return Reject(env, deferred, failure);
    Resolve(env, deferred, env.Undefined());
  }
  std::shared_ptr<ModelCore> model;
};

struct CloseWork : Request {
  void Begin(DeviceCore &dev) override { dev.RequestClose(this); }  // [device]
  void Settle(Napi::Env env) override {
    core->OnClosedJs(env);
    if (failed) return Reject(env, deferred, failure);
    Resolve(env, deferred, env.Undefined());
  }
};

inline void ReleaseRefs(Napi::Env env, ExecJob &job) {
  for (napi_ref r : job.keepAlive) napi_delete_reference(env, r);
  job.keepAlive.clear();
}

}  // namespace npufleet
