#include "harness.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>

int g_checks = 0, g_failures = 0;
static std::string g_dumpDir;

std::vector<float> randVec(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v) x = d(rng);
  return v;
}

HostT makeF(const std::vector<int64_t> &shape, const std::vector<float> &v) {
  HostT t;
  t.type = 1;
  t.shape = shape;
  t.data.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}
HostT randF(const std::vector<int64_t> &shape, uint32_t seed, float lo, float hi) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return makeF(shape, randVec(n, seed, lo, hi));
}
HostT makeI64(const std::vector<int64_t> &shape, const std::vector<int64_t> &v) {
  HostT t;
  t.type = 7;
  t.shape = shape;
  t.data.resize(v.size() * 8);
  if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}
HostT makeI32(const std::vector<int64_t> &shape, const std::vector<int32_t> &v) {
  HostT t;
  t.type = 6;
  t.shape = shape;
  t.data.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

static int onnxTypeOf(aclDataType t) {
  switch (t) {
    case ACL_FLOAT: return 1;
    case ACL_INT32: return 6;
    case ACL_INT64: return 7;
    default: return 0;
  }
}

RunResult runModel(const std::string &model, const std::vector<HostT> &ins, const RunOpts &o) {
  RunResult r;
  if (!o.gears.empty()) aclsimSetNextLoadBatchGears(o.gears.data(), o.gears.size());
  uint32_t id = 0;
  r.loadErr = aclmdlLoadFromMem(model.data(), model.size(), &id);
  if (r.loadErr) {
    const char *m = aclGetRecentErrMsg();
    r.msg = m ? m : "";
    return r;
  }
  aclmdlDesc *desc = aclmdlCreateDesc();
  aclmdlGetDesc(desc, id);
  const size_t nin = aclmdlGetNumInputs(desc), nout = aclmdlGetNumOutputs(desc);
  aclmdlDataset *in = aclmdlCreateDataset(), *out = aclmdlCreateDataset();
  std::vector<void *> devs;
  aclrtStream stream = nullptr;
  if (o.async) aclrtCreateStream(&stream);
  size_t dynIdx = SIZE_MAX;
  aclmdlGetInputIndexByName(desc, ACL_DYNAMIC_TENSOR_NAME, &dynIdx);
  aclGetRecentErrMsg();
  for (size_t i = 0; i < nin; ++i) {
    r.inNames.push_back(aclmdlGetInputNameByIndex(desc, i));
    size_t sz = aclmdlGetInputSizeByIndex(desc, i);
    const HostT *h = i < ins.size() && i != dynIdx ? &ins[i] : nullptr;
    if (h && h->data.size() > sz) sz = h->data.size();
    if (sz == 0) sz = 8;
    void *d = nullptr;
    aclrtMalloc(&d, sz, ACL_MEM_MALLOC_HUGE_FIRST);
    devs.push_back(d);
    if (h && !h->data.empty()) aclrtMemcpy(d, sz, h->data.data(), h->data.size(), ACL_MEMCPY_HOST_TO_DEVICE);
    aclmdlAddDatasetBuffer(in, aclCreateDataBuffer(d, sz));
    if (h && o.setShapes) {
      aclmdlIODims dims;
      aclmdlGetInputDims(desc, i, &dims);
      bool nonLeadDyn = false;
      for (size_t k = 1; k < dims.dimCount; ++k) nonLeadDyn |= dims.dims[k] < 0;
      if (nonLeadDyn) {
        aclTensorDesc *td = aclCreateTensorDesc(aclmdlGetInputDataType(desc, i), int(h->shape.size()), h->shape.data(), ACL_FORMAT_ND);
        aclmdlSetDatasetTensorDesc(in, td, i);
        aclDestroyTensorDesc(td);
      }
    }
  }
  for (size_t i = 0; i < nout; ++i) {
    size_t sz = aclmdlGetOutputSizeByIndex(desc, i);
    if (sz == 0) sz = o.outBytes ? o.outBytes : (1 << 20);
    void *d = nullptr;
    aclrtMalloc(&d, sz, ACL_MEM_MALLOC_HUGE_FIRST);
    devs.push_back(d);
    aclmdlAddDatasetBuffer(out, aclCreateDataBuffer(d, sz));
  }
  if (dynIdx != SIZE_MAX) {
    uint64_t b = o.batch ? o.batch : (ins.empty() || ins[0].shape.empty() ? 1 : uint64_t(ins[0].shape[0]));
    aclError e = aclmdlSetDynamicBatchSize(id, in, dynIdx, b);
    if (e) {
      r.execErr = e;
      const char *m = aclGetRecentErrMsg();
      r.msg = m ? m : "";
    }
  }
  if (!r.execErr) {
    r.execErr = o.async ? aclmdlExecuteAsync(id, in, out, stream) : aclmdlExecute(id, in, out);
    if (!r.execErr && o.async) r.execErr = aclrtSynchronizeStream(stream);
    if (r.execErr) {
      const char *m = aclGetRecentErrMsg();
      r.msg = m ? m : "";
    }
  }
  if (!r.execErr) {
    for (size_t i = 0; i < nout; ++i) {
      HostT h;
      aclTensorDesc *td = aclmdlGetDatasetTensorDesc(out, i);
      h.type = onnxTypeOf(aclmdlGetOutputDataType(desc, i));
      for (size_t k = 0; td && k < aclGetTensorDescNumDims(td); ++k) {
        int64_t v;
        aclGetTensorDescDimV2(td, k, &v);
        h.shape.push_back(v);
      }
      const size_t bytes = td ? aclGetTensorDescSize(td) : 0;
      h.data.resize(bytes);
      aclDataBuffer *b = aclmdlGetDatasetBuffer(out, i);
      if (bytes) aclrtMemcpy(h.data.data(), bytes, aclGetDataBufferAddr(b), bytes, ACL_MEMCPY_DEVICE_TO_HOST);
      r.outputs.push_back(std::move(h));
    }
  }
  for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(in); ++i) aclDestroyDataBuffer(aclmdlGetDatasetBuffer(in, i));
  for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(out); ++i) aclDestroyDataBuffer(aclmdlGetDatasetBuffer(out, i));
  aclmdlDestroyDataset(in);
  aclmdlDestroyDataset(out);
  for (void *d : devs) aclrtFree(d);
  if (stream) aclrtDestroyStream(stream);
  aclmdlUnload(id);
  aclmdlDestroyDesc(desc);
  return r;
}

bool allClose(const HostT &a, const HostT &b, float rtol, float atol) {
  if (a.shape != b.shape || a.type != b.type || a.data.size() != b.data.size()) {
    std::fprintf(stderr, "  shape/type mismatch\n");
    return false;
  }
  if (a.type != 1) return a.data == b.data;
  for (size_t i = 0; i < a.numel(); ++i) {
    const float x = a.f()[i], y = b.f()[i];
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) {
      std::fprintf(stderr, "  element %zu: %.7g vs %.7g\n", i, double(x), double(y));
      return false;
    }
  }
  return true;
}

void setDumpDir(const std::string &dir) {
  g_dumpDir = dir;
  mkdir(dir.c_str(), 0755);
}

static void writeFile(const std::string &path, const void *p, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char *>(p), std::streamsize(n));
}

static std::string shapeJson(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

void dumpCase(const std::string &name, const std::string &model, const std::vector<HostT> &ins, const RunResult &r) {
  if (g_dumpDir.empty() || r.loadErr || r.execErr) return;
  const std::string dir = g_dumpDir + "/" + name;
  mkdir(dir.c_str(), 0755);
  writeFile(dir + "/model.onnx", model.data(), model.size());
  std::string meta = "{\"inputs\":[";
  for (size_t i = 0; i < ins.size(); ++i) {
    writeFile(dir + "/in" + std::to_string(i) + ".bin", ins[i].data.data(), ins[i].data.size());
    meta += std::string(i ? "," : "") + "{\"name\":\"" + r.inNames[i] + "\",\"type\":" + std::to_string(ins[i].type) +
            ",\"shape\":" + shapeJson(ins[i].shape) + "}";
  }
  meta += "],\"outputs\":[";
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    writeFile(dir + "/out" + std::to_string(i) + ".bin", r.outputs[i].data.data(), r.outputs[i].data.size());
    meta += std::string(i ? "," : "") + "{\"type\":" + std::to_string(r.outputs[i].type) + ",\"shape\":" + shapeJson(r.outputs[i].shape) + "}";
  }
  meta += "]}";
  writeFile(dir + "/meta.json", meta.data(), meta.size());
}

void setEnv(const char *k, const char *v) {
  if (v) setenv(k, v, 1);
  else unsetenv(k);
}
