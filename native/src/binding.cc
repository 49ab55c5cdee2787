// N-API surface of the addon. Everything in this file runs on the JS thread, except the
// Work::Begin bodies, which run on the device thread (marked [device]). Only src/device loads
// this module; argument validation happens there, the checks here only guard memory safety.
#include <dlfcn.h>
#include <napi.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "acl_loader.h"
#include "device_core.h"
#include "model_core.h"

namespace npufleet {
namespace {

struct AddonData {
  Napi::FunctionReference deviceCtor;
  Napi::FunctionReference modelCtor;
  std::string addonDir;
  // Handed to the next NativeDevice / NativeModel constructor call (JS thread only). Lets C++
  // construct the wrappers without Napi::External objects, which node frees only on GC.
  std::shared_ptr<DeviceCore> nextDevice;
  std::shared_ptr<ModelCore> nextModel;
};

AddonData &Data(Napi::Env env) { return *env.GetInstanceData<AddonData>(); }

std::string AddonDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&AddonDir), &info) == 0 || info.dli_fname == nullptr) {
    return ".";
  }
  std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

Napi::Error MakeError(Napi::Env env, const Failure &f) {
  Napi::Error err = Napi::Error::New(env, f.message);
  Napi::Object o = err.Value();
  o.Set("kind", f.kind);
  if (f.kind == "acl") {
    o.Set("aclError", Napi::Number::New(env, f.aclCode));
    o.Set("aclCode", AclErrorName(f.aclCode));
    o.Set("aclMessage", f.aclRecentMsg);
    o.Set("api", f.api);
  }
  return err;
}

napi_deferred NewPromise(Napi::Env env, Napi::Value *promise) {
  napi_deferred deferred = nullptr;
  napi_value p = nullptr;
  NAPI_THROW_IF_FAILED(env, napi_create_promise(env, &deferred, &p), nullptr);
  *promise = Napi::Value(env, p);
  return deferred;
}

void Resolve(Napi::Env env, napi_deferred d, napi_value v) {
  if (d != nullptr) napi_resolve_deferred(env, d, v);
}

void Reject(Napi::Env env, napi_deferred d, const Failure &f) {
  if (d != nullptr) napi_reject_deferred(env, d, MakeError(env, f).Value());
}

Napi::Value RejectedNow(Napi::Env env, const std::string &kind, const std::string &message) {
  Failure f;
  f.kind = kind;
  f.message = message;
  Napi::Value promise;
  Reject(env, NewPromise(env, &promise), f);
  return promise;
}

Napi::Array DimsToJs(Napi::Env env, const std::vector<int64_t> &dims) {
  Napi::Array a = Napi::Array::New(env, dims.size());
  for (size_t i = 0; i < dims.size(); ++i) a.Set(i, Napi::Number::New(env, double(dims[i])));
  return a;
}

std::vector<int64_t> DimsFromJs(Napi::Value v, const char *what) {
  if (!v.IsArray()) throw Napi::TypeError::New(v.Env(), std::string(what) + " must be an array");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<int64_t> dims(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value d = a.Get(i);
    if (!d.IsNumber()) throw Napi::TypeError::New(v.Env(), std::string(what) + " must hold numbers");
    dims[i] = d.As<Napi::Number>().Int64Value();
  }
  return dims;
}

Napi::Object TensorsToJs(Napi::Env env, const std::vector<TensorInfo> &ts) {
  Napi::Array a = Napi::Array::New(env, ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", ts[i].name);
    o.Set("dtype", Napi::Number::New(env, ts[i].dtype));
    o.Set("dims", DimsToJs(env, ts[i].dims));
    o.Set("maxDims", DimsToJs(env, ts[i].maxDims));
    o.Set("bufferBytes", Napi::Number::New(env, double(ts[i].bufferBytes)));
    a.Set(i, o);
  }
  return a;
}

// ---- requests ---------------------------------------------------------------------------------

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

// Creates the promise, hands the work to the device, or rejects at once when the device no
// longer accepts work (close requested). `onRefused` releases what the work pins (JS thread).
template <typename OnRefused>
Napi::Value SubmitWork(Napi::Env env, DeviceCore &core, std::unique_ptr<Work> work, bool isClose,
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

Napi::Value SubmitWork(Napi::Env env, DeviceCore &core, std::unique_ptr<Work> work,
                       bool isClose = false) {
  return SubmitWork(env, core, std::move(work), isClose, [](Work &) {});
}

// ---- Device -----------------------------------------------------------------------------------

class NativeDevice : public Napi::ObjectWrap<NativeDevice> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeDevice",
                       {InstanceMethod<&NativeDevice::LoadModel>("loadModel"),
                        InstanceMethod<&NativeDevice::MemInfo>("memInfo"),
                        InstanceMethod<&NativeDevice::Close>("close"),
                        InstanceAccessor<&NativeDevice::Id>("id")});
  }

  explicit NativeDevice(const Napi::CallbackInfo &info) : Napi::ObjectWrap<NativeDevice>(info) {
    core_ = std::move(Data(info.Env()).nextDevice);
    if (!core_) throw Napi::TypeError::New(info.Env(), "NativeDevice is created by openDevice()");
  }

  // GC of an unclosed device: close it in the background (no one awaits the result).
  ~NativeDevice() override {
    if (!core_ || !core_->Accepting()) return;
    std::unique_ptr<Work> w = std::make_unique<CloseWork>();
    core_->Submit(Env(), w, true);
  }

 private:
  Napi::Value Id(const Napi::CallbackInfo &info) { return Napi::Number::New(info.Env(), core_->id); }

  // loadModel(path, gears: number[], maxInputDims: Record<string, number[]>, slots: 1|2,
  //           maxOutputDims: Record<string, number[]>)
  Napi::Value LoadModel(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (info.Length() < 4 || !info[0].IsString() || !info[1].IsArray() || !info[2].IsObject() ||
        !info[3].IsNumber()) {
      throw Napi::TypeError::New(env, "loadModel(path, gears, maxInputDims, slots, maxOutputDims)");
    }
    auto w = std::make_unique<LoadWork>();
    w->opts.path = info[0].As<Napi::String>();
    for (int64_t g : DimsFromJs(info[1], "gears")) {
      if (g <= 0) throw Napi::RangeError::New(env, "gears must be positive");
      w->opts.gears.push_back(static_cast<uint64_t>(g));
    }
    auto readDimsMap = [](Napi::Object o, std::map<std::string, std::vector<int64_t>> &out) {
      Napi::Array names = o.GetPropertyNames();
      for (uint32_t i = 0; i < names.Length(); ++i) {
        const std::string name = names.Get(i).ToString();
        out[name] = DimsFromJs(o.Get(name), "max dims entries");
      }
    };
    readDimsMap(info[2].As<Napi::Object>(), w->opts.maxInputDims);
    if (info.Length() > 4 && info[4].IsObject()) {
      readDimsMap(info[4].As<Napi::Object>(), w->opts.maxOutputDims);
    }
    const int slots = info[3].As<Napi::Number>().Int32Value();
    if (slots != 1 && slots != 2) throw Napi::RangeError::New(env, "slots must be 1 or 2");
    w->opts.slots = slots;
    return SubmitWork(env, *core_, std::move(w));
  }

  Napi::Value MemInfo(const Napi::CallbackInfo &info) {
    return SubmitWork(info.Env(), *core_, std::make_unique<MemInfoWork>());
  }

  Napi::Value Close(const Napi::CallbackInfo &info) {
    return SubmitWork(info.Env(), *core_, std::make_unique<CloseWork>(), true);
  }

  std::shared_ptr<DeviceCore> core_;
};

// ---- Model ------------------------------------------------------------------------------------

void ReleaseRefs(Napi::Env env, ExecJob &job) {
  for (napi_ref r : job.keepAlive) napi_delete_reference(env, r);
  job.keepAlive.clear();
}

}  // namespace

void ExecJob::Settle(Napi::Env env) {
  ReleaseRefs(env, *this);
  if (failed) return Reject(env, deferred, failure);
  Napi::Array outs = Napi::Array::New(env, outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    ExecOutput &o = outputs[i];
    Napi::Object t = Napi::Object::New(env);
    // The malloc'd bytes become the Buffer's backing store (no copy); freed by its finalizer.
    const size_t bytes = o.bytes;
    Napi::Buffer<uint8_t> buf = Napi::Buffer<uint8_t>::New(
        env, o.data, bytes, [bytes](Napi::Env fenv, uint8_t *p) {
          std::free(p);
          Napi::MemoryManagement::AdjustExternalMemory(fenv, -static_cast<int64_t>(bytes));
        });
    o.data = nullptr;
    Napi::MemoryManagement::AdjustExternalMemory(env, static_cast<int64_t>(bytes));
    t.Set("data", buf);
    t.Set("dims", DimsToJs(env, o.dims));
    outs.Set(i, t);
  }
  Napi::Object timings = Napi::Object::New(env);
  timings.Set("copyInMs", copyInMs);
  timings.Set("executeMs", executeMs);
  timings.Set("copyOutMs", copyOutMs);
  timings.Set("totalMs", totalMs);
  Napi::Object result = Napi::Object::New(env);
  result.Set("outputs", outs);
  result.Set("timings", timings);
  result.Set("overran", overran);
  Resolve(env, deferred, result);
}

namespace {

class NativeModel : public Napi::ObjectWrap<NativeModel> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeModel",
                       {InstanceMethod<&NativeModel::Execute>("execute"),
                        InstanceMethod<&NativeModel::Unload>("unload")});
  }

  explicit NativeModel(const Napi::CallbackInfo &info) : Napi::ObjectWrap<NativeModel>(info) {
    model_ = std::move(Data(info.Env()).nextModel);
    device_ = std::move(Data(info.Env()).nextDevice);
    if (!model_ || !device_) {
      throw Napi::TypeError::New(info.Env(), "NativeModel is created by loadModel()");
    }
  }

  // GC of a loaded model nobody unloaded: unload it in the background.
  ~NativeModel() override {
    if (!model_ || model_->unloadRequested.exchange(true)) return;
    auto w = std::make_unique<UnloadWork>();
    w->model = model_;
    std::unique_ptr<Work> work(w.release());
    device_->Submit(Env(), work, false);
  }

 private:
  // execute(inputs: Array<{data: ArrayBufferView, dims: number[]}>, gear: number, timeoutMs: number)
  // The input bytes are read on the device thread: the views are pinned (napi_ref) until the
  // promise settles and must not be modified or transferred meanwhile.
  Napi::Value Execute(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (info.Length() < 3 || !info[0].IsArray() || !info[1].IsNumber() || !info[2].IsNumber()) {
      throw Napi::TypeError::New(env, "execute(inputs, gear, timeoutMs)");
    }
    if (model_->unloadRequested) return RejectedNow(env, "closed", "the model is unloaded");
    const ModelInfo &mi = model_->info;
    Napi::Array arr = info[0].As<Napi::Array>();
    if (arr.Length() != mi.inputs.size()) {
      throw Napi::RangeError::New(env, "the model takes " + std::to_string(mi.inputs.size()) +
                                           " inputs, got " + std::to_string(arr.Length()));
    }
    const int64_t gear = info[1].As<Napi::Number>().Int64Value();
    if (gear <= 0) throw Napi::RangeError::New(env, "gear must be positive");
    auto job = std::make_unique<ExecJob>();
    job->model = model_;
    job->gear = static_cast<uint64_t>(gear);
    job->timeoutMs = info[2].As<Napi::Number>().DoubleValue();
    for (uint32_t i = 0; i < arr.Length(); ++i) {
      Napi::Value item = arr.Get(i);
      if (!item.IsObject()) throw Napi::TypeError::New(env, "each input is {data, dims}");
      Napi::Value data = item.As<Napi::Object>().Get("data");
      if (!data.IsTypedArray() && !data.IsDataView()) {
        throw Napi::TypeError::New(env, "input data must be a Uint8Array/Buffer");
      }
      ExecInput in;
      in.dims = DimsFromJs(item.As<Napi::Object>().Get("dims"), "input dims");
      if (data.IsTypedArray()) {
        Napi::TypedArray ta = data.As<Napi::TypedArray>();
        Napi::ArrayBuffer ab = ta.ArrayBuffer();
        in.data = static_cast<const uint8_t *>(ab.Data()) + ta.ByteOffset();
        in.bytes = ta.ByteLength();
      } else {
        Napi::DataView dv = data.As<Napi::DataView>();
        in.data = static_cast<const uint8_t *>(dv.ArrayBuffer().Data()) + dv.ByteOffset();
        in.bytes = dv.ByteLength();
      }
      if (in.bytes > mi.inputs[i].bufferBytes) {
        for (napi_ref r : job->keepAlive) napi_delete_reference(env, r);
        throw Napi::RangeError::New(env, "input " + mi.inputs[i].name + " has " +
                                             std::to_string(in.bytes) + " bytes, its buffer holds " +
                                             std::to_string(mi.inputs[i].bufferBytes));
      }
      if (in.bytes > 0 && in.data == nullptr) {
        for (napi_ref r : job->keepAlive) napi_delete_reference(env, r);
        throw Napi::TypeError::New(env, "input " + mi.inputs[i].name + " is detached");
      }
      napi_ref ref = nullptr;
      napi_create_reference(env, data, 1, &ref);
      job->keepAlive.push_back(ref);
      job->inputs.push_back(std::move(in));
    }
    job->submittedAt = Clock::now();
    return SubmitWork(env, *device_, std::move(job), false,
                      [env](Work &w) { ReleaseRefs(env, static_cast<ExecJob &>(w)); });
  }

  Napi::Value Unload(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (model_->unloadRequested.exchange(true)) {
      return RejectedNow(env, "closed", "the model is already unloaded");
    }
    auto w = std::make_unique<UnloadWork>();
    w->model = model_;
    return SubmitWork(env, *device_, std::move(w));
  }

  std::shared_ptr<ModelCore> model_;
  std::shared_ptr<DeviceCore> device_;
};

// ---- module -----------------------------------------------------------------------------------

void ShutdownAtExit() {
  DeviceCore::ShutdownAll(5000);
  if (DeviceCore::LiveDevices() == 0) FinalizeBackend();
}

const AclBackend &Backend(Napi::Env env) {
  try {
    const AclBackend &b = GetBackend(Data(env).addonDir);
    // Registered after the ACL library was loaded, so it runs before that library's static
    // destructors: device threads must not call into a half-destroyed library at exit.
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(&ShutdownAtExit); });
    return b;
  } catch (const std::exception &e) {
    Napi::Error err = Napi::Error::New(env, e.what());
    err.Value().Set("kind", "load");
    throw err;
  }
}

// backendInfo(): {kind, libraryPath, deviceCount}. Loads and initialises ACL on first call.
Napi::Value BackendInfo(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  const AclBackend &b = Backend(env);
  uint32_t count = 0;
  const aclError rc = b.api.aclrtGetDeviceCount(&count);
  if (rc != ACL_SUCCESS) {
    Failure f;
    f.kind = "acl";
    f.aclCode = rc;
    f.api = "aclrtGetDeviceCount";
    f.aclRecentMsg = TakeRecentErrMsg(b.api);
    f.message = "aclrtGetDeviceCount failed: " + std::to_string(rc) + " " + AclErrorName(rc);
    throw MakeError(env, f);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("kind", b.kind);
  o.Set("libraryPath", b.libraryPath);
  o.Set("deviceCount", count);
  return o;
}

// openDevice(id): Promise<NativeDevice>. The device thread sets the device, creates the context
// and streams, then settles the promise.
Napi::Value OpenDevice(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "openDevice(id)");
  const AclBackend &b = Backend(env);
  auto core = std::make_shared<DeviceCore>(info[0].As<Napi::Number>().Int32Value(), b);
  auto open = std::make_unique<OpenWork>();
  Napi::Value promise;
  open->deferred = NewPromise(env, &promise);
  core->Start(env, std::move(open));
  return promise;
}

}  // namespace
}  // namespace npufleet

// Present only when the process runs with LeakSanitizer (npm run test:asan preloads libasan).
extern "C" int __lsan_do_recoverable_leak_check() __attribute__((weak));

namespace npufleet {
namespace {

// leakCheck(): null without LeakSanitizer; else 0 (no leaks) or 1 (leaks were reported to stderr).
// Lets the native tests check for leaks at the end of each file, whatever way vitest ends the
// worker process (a killed process never runs LSan's at-exit check).
Napi::Value LeakCheck(const Napi::CallbackInfo &info) {
  if (__lsan_do_recoverable_leak_check == nullptr) return info.Env().Null();
  return Napi::Number::New(info.Env(), __lsan_do_recoverable_leak_check());
}

Napi::Value ErrorName(const Napi::CallbackInfo &info) {
  return Napi::String::New(info.Env(), AclErrorName(info[0].As<Napi::Number>().Int32Value()));
}

void FinalizeAtExit(void *) {
  if (DeviceCore::LiveDevices() == 0) FinalizeBackend();
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto *data = new AddonData();
  data->addonDir = AddonDir();
  data->deviceCtor = Napi::Persistent(NativeDevice::Define(env));
  data->modelCtor = Napi::Persistent(NativeModel::Define(env));
  env.SetInstanceData(data);
  // Registered first, so it runs after every device's own cleanup hook.
  napi_add_env_cleanup_hook(env, &FinalizeAtExit, nullptr);
  exports.Set("backendInfo", Napi::Function::New(env, BackendInfo));
  exports.Set("openDevice", Napi::Function::New(env, OpenDevice));
  exports.Set("aclErrorName", Napi::Function::New(env, ErrorName));
  exports.Set("leakCheck", Napi::Function::New(env, LeakCheck));
  exports.Set("addonDir", data->addonDir);
  return exports;
}

}  // namespace npufleet

static Napi::Object InitNpuFleet(Napi::Env env, Napi::Object exports) {
  return npufleet::Init(env, exports);
}

NODE_API_MODULE(npu_fleet, InitNpuFleet)
