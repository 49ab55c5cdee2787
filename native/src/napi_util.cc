#include "napi_util.h"

namespace npufleet {

AddonData &Data(Napi::Env env) { return *env.GetInstanceData<AddonData>(); }

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

Napi::Array TensorsToJs(Napi::Env env, const std::vector<TensorInfo> &ts) {
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

}  // namespace npufleet
