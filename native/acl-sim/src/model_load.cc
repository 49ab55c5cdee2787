// aclmdl* load and unload: ONNX parse, graph build and validation run (which derive the model's
// description: dynamic batch / range-dynamic dims, sizes, workspace), device memory accounting,
// and the batch gears of the next load (aclsimSetNextLoadBatchGears).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "load_validation.h"
#include "model_internal.h"

namespace sim {

// Never destroyed, like the runtime's state (runtime_init.cc says why).
std::mutex &g_mdlMu = *new std::mutex;
std::map<uint32_t, std::shared_ptr<Model>> &g_models = *new std::map<uint32_t, std::shared_ptr<Model>>;

namespace {

uint32_t g_nextId = 1;
thread_local std::vector<uint64_t> tl_gears;
thread_local bool tl_gearsSet = false;

aclDataType aclTypeOf(int onnxType) {
  switch (onnxType) {
    case ONNX_FLOAT: return ACL_FLOAT;
    case ONNX_INT64: return ACL_INT64;
    case ONNX_INT32: return ACL_INT32;
    case ONNX_UINT8: return ACL_UINT8;
    case ONNX_INT8: return ACL_INT8;
    case ONNX_BOOL: return ACL_BOOL;
    default: return ACL_DT_UNDEFINED;
  }
}

bool isDyn(const DimProto &d) { return !d.hasValue || d.value <= 0; }

}  // namespace

std::shared_ptr<Model> findModel(uint32_t id) {
  std::lock_guard<std::mutex> lk(g_mdlMu);
  auto it = g_models.find(id);
  if (it == g_models.end()) fail(ACL_ERROR_INVALID_MODEL_ID, "model id " + std::to_string(id) + " is not loaded");
  return it->second;
}

namespace {

struct DryRun {
  std::vector<std::vector<int64_t>> shapes;  // per output
  std::vector<bool> unknown;                 // per output: depends on what the zeros could not judge
  std::string unjudged;
};

// Binds zero-filled inputs (dynamic leading dim = lead, other dynamic dims = other) and runs
// the graph as the validation run; returns the output shapes.
DryRun dryRun(Graph &g, const DataDeps &deps, int64_t lead, int64_t other, std::vector<int> *types) {
  std::vector<std::vector<uint8_t>> store(g.inputSlots.size());
  size_t total = 0;
  for (size_t i = 0; i < g.inputSlots.size(); ++i) {
    const ValueInfo *vi = nullptr;
    for (const ValueInfo &v : g.proto.inputs) {
      if (v.name == g.slotNames[size_t(g.inputSlots[i])]) vi = &v;
    }
    Tensor &t = g.slots[size_t(g.inputSlots[i])];
    t.dtype = vi->elemType;
    t.shape.clear();
    for (size_t k = 0; k < vi->dims.size(); ++k) {
      const DimProto &d = vi->dims[k];
      t.shape.push_back(isDyn(d) ? (k == 0 ? lead : other) : d.value);
    }
    const size_t bytes = size_t(checkedNumel(t.shape, ACL_ERROR_PARSE_MODEL)) * onnxElemSize(t.dtype);
    total += bytes;
    if (total > rtConfig().memoryBytes) {
      fail(int(ACL_ERROR_GE_MEMORY_ALLOCATION), "the inputs at batch " + std::to_string(lead) + " need " + std::to_string(total) +
                                                    " bytes, more than the device memory");
    }
    store[i].assign(std::max<size_t>(bytes, 8), 0);
    t.data = store[i].data();
  }
  struct ValidationRun {
    ValidationRun() { setValidationRun(true); }
    ~ValidationRun() { setValidationRun(false); }
  } validating;
  const ValidationOutcome v = runValidation(g, deps);
  DryRun out;
  out.unjudged = v.unjudged;
  for (int s : g.outputSlots) {
    out.shapes.push_back(g.slots[size_t(s)].shape);
    out.unknown.push_back(v.unknown[size_t(s)]);
    if (types) types->push_back(g.slots[size_t(s)].dtype);
  }
  for (int s : g.inputSlots) g.slots[size_t(s)].data = nullptr;
  return out;
}

// The description of an output the validation run could not compute because it depends on
// input values the zeros cannot stand for: the graph's declared type and rank, every dynamic dim
// -1 for a reason other than the batch, so its buffer is sized by the caller as for any
// data-dependent shape. Real shapes come with each execution.
IODesc declaredOutput(const ValueInfo &vi, const std::string &source, const std::string &why) {
  const std::string lead = source + ": output '" + vi.name + "' depends on input values the validation run cannot judge (" + why + ")";
  if (!vi.hasShape) fail(ACL_ERROR_PARSE_MODEL, lead + ", and the graph declares no shape for it");
  IODesc d;
  d.name = vi.name;
  d.onnxType = vi.elemType;
  d.dt = aclTypeOf(vi.elemType);
  if (d.dt == ACL_DT_UNDEFINED || onnxElemSize(vi.elemType) == 0) {
    fail(ACL_ERROR_UNSUPPORTED_DATA_TYPE, lead + ", and its declared type " + onnxTypeName(vi.elemType) + " is not supported");
  }
  d.fmt = vi.dims.size() == 4 ? ACL_FORMAT_NCHW : ACL_FORMAT_ND;
  bool sizeKnown = true;
  for (const DimProto &dp : vi.dims) {
    d.dims.push_back(isDyn(dp) ? -1 : dp.value);
    d.nonBatchDyn.push_back(isDyn(dp));
    d.perBatch.push_back(0);
    sizeKnown = sizeKnown && !isDyn(dp);
  }
  d.size = sizeKnown ? size_t(checkedNumel(d.dims, ACL_ERROR_PARSE_MODEL)) * onnxElemSize(vi.elemType) : 0;
  return d;
}

std::vector<uint64_t> takeGears(bool consume) {
  std::vector<uint64_t> g = {1, 2, 4, 8, 16, 32};
  if (tl_gearsSet) g = tl_gears;
  if (consume) {
    tl_gears.clear();
    tl_gearsSet = false;
  }
  return g;
}

// Parses, validates and dry-runs a model; fills its description. Does not register it.
std::unique_ptr<Model> prepare(const uint8_t *bytes, size_t size, const std::string &source, std::vector<uint64_t> gears) {
  ModelProto mp;
  std::string err;
  bool unsupportedType = false;
  if (!parseOnnxModel(bytes, size, mp, err, &unsupportedType)) {
    if (unsupportedType) {
      fail(ACL_ERROR_UNSUPPORTED_DATA_TYPE, source + ": " + err + "; export the model with float32 weights (a float16 export converted back, e.g. onnxconverter-common's float16 tools)");
    }
    fail(ACL_ERROR_DESERIALIZE_MODEL, source + ": malformed ONNX model: " + err);
  }
  auto m = std::make_unique<Model>();
  ModelInfo &info = m->info;
  info.gears = std::move(gears);
  info.maxBatch = *std::max_element(info.gears.begin(), info.gears.end());
  try {
    m->graph = buildGraph(std::move(mp));
  } catch (SimError &e) {
    e.msg = source + ": " + e.msg;
    throw;
  }
  Graph &g = *m->graph;
  setTensorByteLimit(rtConfig().memoryBytes);
  struct Unlimit {
    ~Unlimit() { setTensorByteLimit(SIZE_MAX); }
  } unlimit;
  bool leadDyn = false, otherDyn = false;
  for (int s : g.inputSlots) {
    for (const ValueInfo &v : g.proto.inputs) {
      if (v.name != g.slotNames[size_t(s)]) continue;
      for (size_t k = 0; k < v.dims.size(); ++k) {
        if (isDyn(v.dims[k])) (k == 0 ? leadDyn : otherDyn) = true;
      }
      IODesc d;
      d.name = v.name;
      d.onnxType = v.elemType;
      d.dt = aclTypeOf(v.elemType);
      d.fmt = v.dims.size() == 4 ? ACL_FORMAT_NCHW : ACL_FORMAT_ND;
      std::vector<int64_t> probe;
      for (const DimProto &dp : v.dims) probe.push_back(isDyn(dp) ? 1 : dp.value);
      checkedNumel(probe, ACL_ERROR_PARSE_MODEL);
      for (size_t k = 0; k < v.dims.size(); ++k) {
        d.dims.push_back(isDyn(v.dims[k]) ? -1 : v.dims[k].value);
        d.nonBatchDyn.push_back(k > 0 && isDyn(v.dims[k]));
      }
      info.inputs.push_back(std::move(d));
    }
  }
  info.realInputs = info.inputs.size();
  info.kind = otherDyn ? DYN_RANGE : (leadDyn ? DYN_BATCH : STATIC);
  const int64_t maxB = int64_t(info.maxBatch);
  for (IODesc &d : info.inputs) {
    bool sizeKnown = true;
    int64_t n = 1;
    for (size_t k = 0; k < d.dims.size(); ++k) {
      if (d.dims[k] >= 0) n *= d.dims[k];
      else if (k == 0) n *= maxB;
      else sizeKnown = false;
    }
    d.size = sizeKnown ? size_t(n) * onnxElemSize(d.onnxType) : 0;
  }

  // Output shapes: run A (max batch), and for dynamic models B (batch 1, other dims 2) and
  // C (batch 1, other dims 1) tell batch-driven dims from the other dynamic ones.
  DryRun A, B, C;
  std::vector<int> types;
  try {
    const DataDeps deps = dataDeps(g);
    const uint64_t set = rtConfig().loadWorkBudget;
    WorkBudget budget(set ? set : defaultWorkBudget(g.weightBytes, info.maxBatch));
    if (info.kind == STATIC) {
      A = dryRun(g, deps, 1, 1, &types);
      B = C = A;
    } else {
      C = dryRun(g, deps, 1, 1, nullptr);
      B = dryRun(g, deps, 1, 2, nullptr);
      A = dryRun(g, deps, maxB, 1, &types);
    }
  } catch (SimError &e) {
    if (e.code == int(ACL_ERROR_GE_MEMORY_ALLOCATION)) fail(e.code, source + ": " + e.msg);
    fail(ACL_ERROR_PARSE_MODEL, source + ": validation run failed: " + e.msg);
  }
  for (size_t i = 0; i < g.outputSlots.size(); ++i) {
    const ValueInfo &vi = g.proto.outputs[i];
    if (A.unknown[i] || B.unknown[i] || C.unknown[i]) {
      const std::string &why = !A.unjudged.empty() ? A.unjudged : !B.unjudged.empty() ? B.unjudged : C.unjudged;
      info.outputs.push_back(declaredOutput(vi, source, why));
      continue;
    }
    IODesc d;
    d.name = vi.name;
    d.onnxType = types[i];
    d.dt = aclTypeOf(types[i]);
    if (d.dt == ACL_DT_UNDEFINED || onnxElemSize(types[i]) == 0) {
      fail(ACL_ERROR_UNSUPPORTED_DATA_TYPE, source + ": output '" + vi.name + "' has unsupported type " + onnxTypeName(types[i]));
    }
    const auto &a = A.shapes[i], &b = B.shapes[i], &c = C.shapes[i];
    if (a.size() != b.size() || a.size() != c.size()) {
      fail(ACL_ERROR_PARSE_MODEL, source + ": output '" + vi.name + "' changes rank with the input shape");
    }
    d.fmt = a.size() == 4 ? ACL_FORMAT_NCHW : ACL_FORMAT_ND;
    bool sizeKnown = true;
    for (size_t k = 0; k < a.size(); ++k) {
      const bool declaredDyn = vi.hasShape && vi.dims.size() == a.size() && isDyn(vi.dims[k]);
      const bool seqDriven = b[k] != c[k];
      const bool batchDriven = a[k] != c[k];
      d.dims.push_back(declaredDyn || seqDriven || batchDriven ? -1 : a[k]);
      d.nonBatchDyn.push_back(seqDriven);
      d.perBatch.push_back(batchDriven && !seqDriven && maxB > 0 && c[k] > 0 && a[k] == maxB * c[k] ? c[k] : 0);
      d.atMaxBatch.push_back(seqDriven ? -1 : a[k]);
      if (seqDriven) sizeKnown = false;
    }
    int64_t n = 1;
    for (int64_t v : a) n *= v;
    d.size = sizeKnown ? size_t(n) * onnxElemSize(types[i]) : 0;
    info.outputs.push_back(std::move(d));
  }
  if (info.kind == DYN_BATCH) {
    IODesc mb;
    mb.name = ACL_DYNAMIC_TENSOR_NAME;
    mb.dt = ACL_UINT64;
    mb.onnxType = ONNX_UINT64;
    mb.dims = {1};
    mb.nonBatchDyn = {false};
    mb.size = sizeof(uint64_t);
    info.inputs.push_back(mb);
  }
  info.weightBytes = g.weightBytes;
  info.workBytes = g.workspaceBytes();
  return m;
}

std::vector<uint8_t> readFile(const char *path) {
  if (!path || !*path) fail(ACL_ERROR_INVALID_PARAM, "modelPath is null or empty");
  FILE *f = std::fopen(path, "rb");
  if (!f) fail(ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID, std::string("cannot open model file '") + path + "': " + std::strerror(errno));
  std::vector<uint8_t> data;
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    fail(ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID, std::string("model path '") + path + "' is not a regular file");
  }
  if (st.st_size > (int64_t(1) << 32)) {
    std::fclose(f);
    fail(ACL_ERROR_INVALID_FILE_SIZE, std::string("model file '") + path + "' is larger than 4 GiB");
  }
  data.resize(size_t(st.st_size));
  const size_t got = data.empty() ? 0 : std::fread(data.data(), 1, data.size(), f);
  std::fclose(f);
  if (got != data.size()) fail(ACL_ERROR_READ_MODEL_FAILURE, std::string("short read on model file '") + path + "'");
  return data;
}

// `gears` were taken (consumed) by the caller first, so a failed load uses them up too.
aclError loadBytes(const uint8_t *bytes, size_t size, uint32_t *modelId, const std::string &source, std::vector<uint64_t> gears) {
  rtRequireInit();
  if (!modelId) fail(ACL_ERROR_INVALID_PARAM, "modelId is null");
  const int dev = rtCurrentDevice();
  std::unique_ptr<Model> m = prepare(bytes, size, source, std::move(gears));
  const size_t total = m->info.weightBytes + m->info.workBytes;
  rtReserve(dev, total, int(ACL_ERROR_GE_MEMORY_ALLOCATION), "loading " + source);
  m->dev = dev;
  m->epoch = rtEpoch();
  m->reserved = total;
  m->curOut.resize(m->info.outputs.size());
  std::lock_guard<std::mutex> lk(g_mdlMu);
  m->id = g_nextId++;
  if (g_nextId == 0) g_nextId = 1;
  *modelId = m->id;
  const uint32_t newId = m->id;  // read before release(): C++17 sequences the right side of = first
  g_models[newId] = std::shared_ptr<Model>(m.release());
  return ACL_SUCCESS;
}

}  // namespace

// ------------------------------------------------------------ called by the runtime (runtime.h)
void mdlReleaseDevice(int dev) {
  std::vector<std::shared_ptr<Model>> drop;
  {
    std::lock_guard<std::mutex> lk(g_mdlMu);
    for (auto it = g_models.begin(); it != g_models.end();) {
      if (it->second->dev == dev) {
        drop.push_back(it->second);
        it = g_models.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void mdlReleaseAll() {
  std::map<uint32_t, std::shared_ptr<Model>> drop;
  std::lock_guard<std::mutex> lk(g_mdlMu);
  drop.swap(g_models);
}

}  // namespace sim

using namespace sim;

// ------------------------------------------------------------ load / unload
ACLSIM_API aclError aclmdlLoadFromFile(const char *modelPath, uint32_t *modelId) {
  API_BEGIN
  std::vector<uint64_t> gears = takeGears(true);
  rtRequireInit();
  std::vector<uint8_t> data = readFile(modelPath);
  return loadBytes(data.data(), data.size(), modelId, std::string("'") + modelPath + "'", std::move(gears));
  API_END
}

ACLSIM_API aclError aclmdlLoadFromMem(const void *model, size_t modelSize, uint32_t *modelId) {
  API_BEGIN
  std::vector<uint64_t> gears = takeGears(true);
  if (!model) return setError(ACL_ERROR_INVALID_PARAM, "model is null");
  return loadBytes(static_cast<const uint8_t *>(model), modelSize, modelId, "model in memory", std::move(gears));
  API_END
}

ACLSIM_API aclError aclmdlQuerySize(const char *fileName, size_t *workSize, size_t *weightSize) {
  API_BEGIN
  rtRequireInit();
  if (!workSize || !weightSize) return setError(ACL_ERROR_INVALID_PARAM, "workSize/weightSize is null");
  std::vector<uint8_t> data = readFile(fileName);
  std::unique_ptr<Model> m = prepare(data.data(), data.size(), std::string("'") + fileName + "'", takeGears(false));
  *workSize = m->info.workBytes;
  *weightSize = m->info.weightBytes;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclmdlUnload(uint32_t modelId) {
  API_BEGIN
  rtRequireInit();
  std::shared_ptr<Model> m = findModel(modelId);
  const int dev = rtCurrentDevice();
  if (dev != m->dev) {
    return setError(ACL_ERROR_RT_MODEL_CONTEXT, "model " + std::to_string(modelId) + " was loaded on device " +
                                                    std::to_string(m->dev) + ", not the current device " + std::to_string(dev));
  }
  {
    std::lock_guard<std::mutex> lk(g_mdlMu);
    g_models.erase(modelId);
  }
  std::lock_guard<std::mutex> wait(m->execMu);  // a synchronous execution in progress finishes first
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclsimSetNextLoadBatchGears(const uint64_t *gears, size_t count) {
  if (!gears || count == 0 || count > ACL_MAX_BATCH_NUM) {
    return setError(ACL_ERROR_INVALID_PARAM, "gears must be a non-empty list of at most " + std::to_string(ACL_MAX_BATCH_NUM) + " sizes");
  }
  std::vector<uint64_t> g(gears, gears + count);
  std::sort(g.begin(), g.end());
  if (g[0] < 1 || g.back() > 65536 || std::adjacent_find(g.begin(), g.end()) != g.end()) {
    return setError(ACL_ERROR_INVALID_PARAM, "gears must be distinct sizes in 1..65536");
  }
  tl_gears = g;
  tl_gearsSet = true;
  return ACL_SUCCESS;
}
