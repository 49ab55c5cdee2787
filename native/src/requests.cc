#include "requests.h"

#include "napi_util.h"

namespace npufleet {

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

}  // namespace npufleet
