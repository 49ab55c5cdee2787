// N-API surface of the addon. Everything in this file runs on the JS thread, except the
// Work::Begin bodies, which run on the device thread (marked [device]). Only src/device loads
// this module; argument validation happens there, the checks here only guard memory safety.
#include <dlfcn.h>
#include <napi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "acl_loader.h"
#include "device_core.h"
#include "model_core.h"
#include "model_util.h"
#include "napi_util.h"
#include "requests.h"

namespace npufleet {
namespace {

std::string AddonDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&AddonDir), &info) == 0 || info.dli_fname == nullptr) {
    return ".";
  }
  std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
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
  // [JS] The input bytes are read on the device thread: the views are pinned (napi_ref) until the
  // promise settles and must not be modified or transferred meanwhile. The views stay owned by JS;
  // the device thread copies them into the slot's pinned staging (ModelCore::Start).
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
    // Any throw below (a later input malformed) must release the refs already taken: a leaked
    // napi_ref pins its view, and the memory behind it, for the life of the env.
    struct RefGuard {
      napi_env env;
      ExecJob *job;
      ~RefGuard() {
        if (job == nullptr) return;
        for (napi_ref r : job->keepAlive) napi_delete_reference(env, r);
        job->keepAlive.clear();
      }
    } guard{env, job.get()};
    for (uint32_t i = 0; i < arr.Length(); ++i) {
      const TensorInfo &t = mi.inputs[i];
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
      if (in.bytes > t.bufferBytes) {
        throw Napi::RangeError::New(env, "input " + t.name + " has " + std::to_string(in.bytes) +
                                             " bytes, its buffer holds " +
                                             std::to_string(t.bufferBytes));
      }
      // The dims must describe exactly these bytes: for range-dynamic models they reach ACL as
      // the input's real shape (aclmdlSetDatasetTensorDesc), and real ACL reads dims × dtype
      // bytes from the device buffer without checking them against what was copied in (only
      // the simulator checks). Memory safety on the device, so checked here, not only in TS.
      size_t described = 0;
      const bool negative =
          std::any_of(in.dims.begin(), in.dims.end(), [](int64_t d) { return d < 0; });
      if (in.dims.size() != t.dims.size() || negative ||
          !TensorBytes(in.dims, t.elemBytes, &described) || described != in.bytes) {
        throw Napi::RangeError::New(env, "input " + t.name + " dims " + DimsText(in.dims) +
                                             " do not describe its " + std::to_string(in.bytes) +
                                             " bytes (model dims " + DimsText(t.dims) + ", " +
                                             std::to_string(t.elemBytes) + " bytes/element)");
      }
      if (in.bytes > 0 && in.data == nullptr) {
        throw Napi::TypeError::New(env, "input " + t.name + " is detached");
      }
      napi_ref ref = nullptr;
      napi_create_reference(env, data, 1, &ref);
      job->keepAlive.push_back(ref);
      job->inputs.push_back(std::move(in));
    }
    guard.job = nullptr;  // from here the refs belong to the job: released in Settle or onRefused
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

std::atomic<int> g_exitCode{0};

// Stops every device (closing its models and context, resetting it) and then finalizes ACL.
// Called twice at most, and idempotent: first from the process 'exit' event on the main JS thread
// (shutdownForExit, below), so all of it runs before C exit(); then, as a fallback for exits that
// bypass that event, from std::atexit. From atexit alone it would run after the static destructors
// of every ACL singleton constructed after the handler was registered (exit() destroys in reverse
// order of registration, and libascendcl.so creates its singletons lazily, after aclInit): device
// threads and aclFinalize would then call into a half-destroyed library (acl-api.md §2, §10:
// aclFinalize not from destructors, the singleton destruction order at exit is unknown).
void ShutdownAtExit() {
  if (!DeviceCore::ShutdownAll(DeviceCore::ExitGraceMs())) {
    // A device is still busy (hung work): its thread and the ACL library's own threads may still
    // be inside the library, so running its static destructors could crash the exit. Leave now;
    // the OS and the driver reclaim the device. The code is the one process.exit() was given.
    std::fflush(nullptr);
    std::_Exit(g_exitCode.load());
  }
  FinalizeBackendIfUnused();
}

// shutdownForExit(): [JS, main thread] src/device calls it from process.on('exit'), after
// setExitCode. Blocks the (exiting) JS thread up to NPU_FLEET_EXIT_GRACE_MS per device; when a
// device is hung past that it ends the process at once with _Exit and the exit code.
Napi::Value ShutdownForExitJs(const Napi::CallbackInfo &info) {
  ShutdownAtExit();
  return info.Env().Undefined();
}

// liveDevices(): device threads not yet finished, process-wide (tests and diagnostics).
Napi::Value LiveDevicesJs(const Napi::CallbackInfo &info) {
  return Napi::Number::New(info.Env(), DeviceCore::LiveDevices());
}

// setExitCode(code): src/device calls it from process.on('exit') so a forced exit keeps the code.
Napi::Value SetExitCode(const Napi::CallbackInfo &info) {
  if (info.Length() > 0 && info[0].IsNumber()) g_exitCode = info[0].As<Napi::Number>().Int32Value();
  return info.Env().Undefined();
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
  aclError rc = ACL_SUCCESS;
  try {
    // A worker thread's env teardown must not finalize ACL during the query.
    const BackendUse use;
    rc = b.api.aclrtGetDeviceCount(&count);
  } catch (const std::runtime_error &e) {
    Napi::Error err = Napi::Error::New(env, e.what());
    err.Value().Set("kind", "load");
    throw err;
  }
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

// Env teardown (a worker thread ending, or the main thread's env at exit): runs after every
// device of this env was closed by its own hook. Devices of other envs keep ACL up.
void FinalizeAtExit(void *) {
  // Failpoint for test/native/finalize-race.test.ts: holds the teardown just before it decides,
  // so a test can open a device on another thread at that moment. Unset in production.
  if (const char *d = std::getenv("NPU_FLEET_TEST_FINALIZE_DELAY_MS")) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(d)));
  }
  FinalizeBackendIfUnused();
}

}  // namespace

// Keeps this shared object mapped until the process ends. Node dlcloses an addon when the last
// env that loaded it is torn down (a worker thread exiting, when the main thread never loaded
// it), and glibc then runs the handlers this object registered with std::atexit: the
// process-exit teardown (ShutdownAtExit) would run at that worker's exit, closing every device
// in the process and, with one busy, _Exit-ing the whole process with the worker's exit code;
// and a device thread left running past the exit grace would execute unmapped code. Pinned, the
// atexit handler runs at process exit only and device threads may outlive any env.
static void PinAddon() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&PinAddon), &info) == 0 || info.dli_fname == nullptr) return;
  dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);  // never closed, on purpose
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  static std::once_flag pinned;
  std::call_once(pinned, PinAddon);
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
  exports.Set("setExitCode", Napi::Function::New(env, SetExitCode));
  exports.Set("liveDevices", Napi::Function::New(env, LiveDevicesJs));
  exports.Set("shutdownForExit", Napi::Function::New(env, ShutdownForExitJs));
  exports.Set("addonDir", data->addonDir);
  return exports;
}

}  // namespace npufleet

static Napi::Object InitNpuFleet(Napi::Env env, Napi::Object exports) {
  return npufleet::Init(env, exports);
}

NODE_API_MODULE(npu_fleet, InitNpuFleet)
