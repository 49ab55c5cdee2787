// aclmdl* API: ONNX model load, descriptions, datasets, dynamic batch / range-dynamic shapes,
// synchronous and stream execution with the device time model and fault injection.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "graph.h"
#include "ops.h"
#include "runtime.h"

struct aclDataBuffer {
  void *data;
  size_t size;
};
struct aclTensorDesc {
  aclDataType dt;
  aclFormat fmt;
  std::vector<int64_t> dims;
};
struct aclmdlDataset {
  std::vector<aclDataBuffer *> bufs;
  std::vector<aclTensorDesc *> descs;  // owned copies, parallel to bufs
  bool batchSet = false;
  uint64_t batch = 0;
  ~aclmdlDataset() {
    for (aclTensorDesc *d : descs) delete d;
  }
  void setDesc(size_t i, const aclTensorDesc &d) {
    if (descs.size() < bufs.size()) descs.resize(bufs.size(), nullptr);
    delete descs[i];
    descs[i] = new aclTensorDesc(d);
  }
};
struct aclmdlExecConfigHandle {
  int32_t streamTimeoutMs = -1;
};

namespace sim {
namespace {

enum DynKind { STATIC, DYN_BATCH, DYN_RANGE };

struct IODesc {
  std::string name;
  aclDataType dt = ACL_FLOAT;
  aclFormat fmt = ACL_FORMAT_ND;
  int onnxType = ONNX_FLOAT;
  std::vector<int64_t> dims;       // -1 = dynamic
  std::vector<bool> nonBatchDyn;   // per dim: dynamic for a reason other than the batch
  std::vector<int64_t> perBatch;   // outputs: dim = perBatch * batch when > 0 (batch-driven)
  size_t size = 0;
};

struct ModelInfo {
  DynKind kind = STATIC;
  std::vector<IODesc> inputs, outputs;  // inputs include ascend_mbatch_shape_data (last) for DYN_BATCH
  size_t realInputs = 0;
  std::vector<uint64_t> gears;
  uint64_t maxBatch = 1;
  size_t weightBytes = 0, workBytes = 0;
};

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

struct Model {
  uint32_t id = 0;
  int dev = 0;
  uint64_t epoch = 0;
  size_t reserved = 0;
  ModelInfo info;
  std::unique_ptr<Graph> graph;
  std::mutex execMu;
  std::mutex curMu;
  std::vector<std::vector<int64_t>> curOut;
  ~Model() {
    if (reserved) rtRelease(dev, reserved, epoch);
  }
};

std::mutex &g_mdlMu = *new std::mutex;
std::map<uint32_t, std::shared_ptr<Model>> &g_models = *new std::map<uint32_t, std::shared_ptr<Model>>;
uint32_t g_nextId = 1;
thread_local std::vector<uint64_t> tl_gears;
thread_local bool tl_gearsSet = false;

bool isDyn(const DimProto &d) { return !d.hasValue || d.value <= 0; }

std::shared_ptr<Model> findModel(uint32_t id) {
  std::lock_guard<std::mutex> lk(g_mdlMu);
  auto it = g_models.find(id);
  if (it == g_models.end()) fail(ACL_ERROR_INVALID_MODEL_ID, "model id " + std::to_string(id) + " is not loaded");
  return it->second;
}

// Binds zero-filled inputs (dynamic leading dim = lead, other dynamic dims = other) and runs
// the graph; returns the output shapes.
std::vector<std::vector<int64_t>> dryRun(Graph &g, int64_t lead, int64_t other, std::vector<int> *types) {
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
  g.run();
  std::vector<std::vector<int64_t>> out;
  for (int s : g.outputSlots) {
    out.push_back(g.slots[size_t(s)].shape);
    if (types) types->push_back(g.slots[size_t(s)].dtype);
  }
  for (int s : g.inputSlots) g.slots[size_t(s)].data = nullptr;
  return out;
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
  if (!parseOnnxModel(bytes, size, mp, err)) fail(ACL_ERROR_DESERIALIZE_MODEL, source + ": malformed ONNX model: " + err);
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
  std::vector<std::vector<int64_t>> A, B, C;
  std::vector<int> types;
  try {
    if (info.kind == STATIC) {
      A = dryRun(g, 1, 1, &types);
      B = C = A;
    } else {
      C = dryRun(g, 1, 1, nullptr);
      B = dryRun(g, 1, 2, nullptr);
      A = dryRun(g, maxB, 1, &types);
    }
  } catch (SimError &e) {
    if (e.code == int(ACL_ERROR_GE_MEMORY_ALLOCATION)) fail(e.code, source + ": " + e.msg);
    fail(ACL_ERROR_PARSE_MODEL, source + ": validation run failed: " + e.msg);
  }
  for (size_t i = 0; i < g.outputSlots.size(); ++i) {
    const ValueInfo &vi = g.proto.outputs[i];
    IODesc d;
    d.name = vi.name;
    d.onnxType = types[i];
    d.dt = aclTypeOf(types[i]);
    if (d.dt == ACL_DT_UNDEFINED || onnxElemSize(types[i]) == 0) {
      fail(ACL_ERROR_UNSUPPORTED_DATA_TYPE, source + ": output '" + vi.name + "' has unsupported type " + onnxTypeName(types[i]));
    }
    const auto &a = A[i], &b = B[i], &c = C[i];
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

// ------------------------------------------------------------ execution
struct ExecPlan {
  std::shared_ptr<Model> model;
  std::vector<void *> inPtrs;
  std::vector<std::vector<int64_t>> inShapes;
  std::vector<aclDataBuffer> outBufs;
  aclmdlDataset *output = nullptr;
  int64_t batch = 1;
};

size_t bytesOf(const std::vector<int64_t> &s, int onnxType) {
  return size_t(checkedNumel(s, ACL_ERROR_INVALID_PARAM)) * onnxElemSize(onnxType);
}

ExecPlan plan(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output) {
  rtRequireInit();
  ExecPlan p;
  p.model = findModel(modelId);
  const ModelInfo &info = p.model->info;
  const int dev = rtCurrentDevice();
  if (dev != p.model->dev) {
    fail(ACL_ERROR_RT_MODEL_CONTEXT, "model " + std::to_string(modelId) + " was loaded on device " +
                                         std::to_string(p.model->dev) + " but the current context is on device " + std::to_string(dev));
  }
  if (!input || !output) fail(ACL_ERROR_INVALID_PARAM, "input or output dataset is null");
  if (input->bufs.size() != info.inputs.size()) {
    fail(ACL_ERROR_MODEL_INPUT_NOT_MATCH, "input dataset has " + std::to_string(input->bufs.size()) + " buffers; the model has " +
                                              std::to_string(info.inputs.size()) + " inputs" +
                                              (info.kind == DYN_BATCH ? " (including " ACL_DYNAMIC_TENSOR_NAME ")" : ""));
  }
  if (output->bufs.size() != info.outputs.size()) {
    fail(ACL_ERROR_MODEL_OUTPUT_NOT_MATCH, "output dataset has " + std::to_string(output->bufs.size()) + " buffers; the model has " +
                                               std::to_string(info.outputs.size()) + " outputs");
  }
  if (info.kind == DYN_BATCH) {
    if (!input->batchSet) {
      fail(int(ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID),
           "dynamic-batch model: call aclmdlSetDynamicBatchSize on the input dataset before executing");
    }
    p.batch = int64_t(input->batch);
  }
  for (size_t i = 0; i < info.realInputs; ++i) {
    const IODesc &d = info.inputs[i];
    std::vector<int64_t> shape = d.dims;
    const aclTensorDesc *td = i < input->descs.size() ? input->descs[i] : nullptr;
    bool hasDyn = false;
    for (int64_t v : d.dims) hasDyn |= v < 0;
    if (info.kind == DYN_BATCH) {
      if (!shape.empty() && shape[0] < 0) shape[0] = p.batch;
    } else if (hasDyn) {
      if (!td) {
        fail(ACL_ERROR_INVALID_PARAM, "input " + std::to_string(i) + " ('" + d.name +
                                          "') has dynamic dims: set its shape with aclmdlSetDatasetTensorDesc before executing");
      }
      if (td->dims.size() != d.dims.size()) {
        fail(ACL_ERROR_INVALID_PARAM, "input " + std::to_string(i) + " shape " + shapeStr(td->dims) + " has the wrong rank for " + shapeStr(d.dims));
      }
      if (td->dt != ACL_DT_UNDEFINED && td->dt != d.dt) {
        fail(ACL_ERROR_INVALID_PARAM, "input " + std::to_string(i) + " tensor desc type " + std::to_string(td->dt) +
                                          " does not match the model's " + std::to_string(d.dt));
      }
      for (size_t k = 0; k < shape.size(); ++k) {
        if (d.dims[k] >= 0 && td->dims[k] != d.dims[k]) {
          fail(ACL_ERROR_INVALID_PARAM, "input " + std::to_string(i) + " shape " + shapeStr(td->dims) + " does not match " + shapeStr(d.dims));
        }
        if (td->dims[k] < 1) fail(ACL_ERROR_INVALID_PARAM, "input " + std::to_string(i) + " shape " + shapeStr(td->dims) + " has a dim < 1");
        shape[k] = td->dims[k];
      }
    }
    const size_t need = bytesOf(shape, d.onnxType);
    const aclDataBuffer *b = input->bufs[i];
    if (!b || (need && !b->data) || b->size < need) {
      fail(ACL_ERROR_INVALID_PARAM, "input " + std::to_string(i) + " ('" + d.name + "') buffer has " +
                                        std::to_string(b ? b->size : 0) + " bytes; shape " + shapeStr(shape) + " needs " + std::to_string(need));
    }
    if (need && !rtIsDeviceRange(b->data, need)) {
      fail(ACL_ERROR_INVALID_PARAM, "input " + std::to_string(i) + " buffer is not device memory (aclrtMalloc)");
    }
    p.inPtrs.push_back(b->data);
    p.inShapes.push_back(shape);
  }
  if (info.kind != DYN_BATCH) p.batch = p.inShapes.empty() || p.inShapes[0].empty() ? 1 : p.inShapes[0][0];
  for (size_t i = 0; i < info.outputs.size(); ++i) {
    const aclDataBuffer *b = output->bufs[i];
    if (!b) fail(ACL_ERROR_INVALID_PARAM, "output buffer " + std::to_string(i) + " is null");
    if (b->size && (!b->data || !rtIsDeviceRange(b->data, b->size))) {
      fail(ACL_ERROR_INVALID_PARAM, "output " + std::to_string(i) + " buffer is not device memory (aclrtMalloc)");
    }
    p.outBufs.push_back(*b);
  }
  p.output = output;
  return p;
}

// Whether the plan's first input is float32 and holds `v` anywhere (padding rows included).
bool firstInputHolds(const ExecPlan &p, const ModelInfo &info, float v) {
  if (p.inPtrs.empty() || info.inputs.empty() || info.inputs[0].onnxType != 1 /* FLOAT */) return false;
  size_t n = 1;
  for (int64_t d : p.inShapes[0]) n *= size_t(d);
  const float *x = static_cast<const float *>(p.inPtrs[0]);
  for (size_t i = 0; i < n; ++i) {
    if (x[i] == v) return true;
  }
  return false;
}

const Fault *findFault(int dev, uint64_t k, const ExecPlan &p, const ModelInfo &info) {
  for (const Fault &f : rtConfig().faults) {
    if (f.kind == Fault::NOSYNCWAIT) continue;  // not an execution fault (see runtime.cc syncEvent)
    if ((f.device < 0 || f.device == dev) && k >= f.from && k <= f.to && (!f.byValue || firstInputHolds(p, info, f.value))) return &f;
  }
  return nullptr;
}

void runPlan(ExecPlan &p) {
  Model &m = *p.model;
  std::lock_guard<std::mutex> lk(m.execMu);
  const uint64_t k = rtNextExecution(m.dev);
  const Fault *fault = findFault(m.dev, k, p, m.info);
  const std::string where = "execution " + std::to_string(k) + " of model " + std::to_string(m.id) + " on device " + std::to_string(m.dev);
  if (fault && fault->kind == Fault::CRASH) {
    std::fprintf(stderr, "acl-sim: injected fault '%s': %s crashes the process\n", fault->text.c_str(), where.c_str());
    std::abort();
  }
  if (fault && fault->kind == Fault::FAIL) {
    fail(ACL_ERROR_RT_MODEL_EXECUTE, "injected fault '" + fault->text + "': " + where + " failed");
  }
  const auto t0 = Clock::now();
  if (fault && fault->kind == Fault::HANG) {
    if (!rtDeviceSleep(m.dev, fault->hangMs)) {
      fail(ACL_ERROR_RT_MODEL_EXECUTE, "injected fault '" + fault->text + "': " + where + " was hung when the device was reset");
    }
  }
  const auto tc = Clock::now();
  Graph &g = *m.graph;
  const ModelInfo &info = m.info;
  for (size_t i = 0; i < info.realInputs; ++i) {
    Tensor &t = g.slots[size_t(g.inputSlots[i])];
    t.dtype = info.inputs[i].onnxType;
    t.shape = p.inShapes[i];
    t.data = p.inPtrs[i];
  }
  setTensorByteLimit(rtConfig().memoryBytes);
  try {
    g.run();
    setTensorByteLimit(SIZE_MAX);
  } catch (SimError &e) {
    setTensorByteLimit(SIZE_MAX);
    for (int s : g.inputSlots) g.slots[size_t(s)].data = nullptr;
    fail(ACL_ERROR_RT_MODEL_EXECUTE, where + " failed: " + e.msg);
  }
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < g.outputSlots.size(); ++i) {
    const Tensor &t = g.slots[size_t(g.outputSlots[i])];
    const size_t n = t.bytes();
    if (p.outBufs[i].size < n) {
      for (int s : g.inputSlots) g.slots[size_t(s)].data = nullptr;
      fail(ACL_ERROR_INVALID_PARAM, where + ": output " + std::to_string(i) + " needs " + std::to_string(n) +
                                        " bytes for shape " + shapeStr(t.shape) + " but its buffer has " + std::to_string(p.outBufs[i].size));
    }
    if (n) std::memcpy(p.outBufs[i].data, t.data, n);
    shapes.push_back(t.shape);
    p.output->setDesc(i, aclTensorDesc{info.outputs[i].dt, info.outputs[i].fmt, t.shape});
  }
  for (int s : g.inputSlots) g.slots[size_t(s)].data = nullptr;
  {
    std::lock_guard<std::mutex> ck(m.curMu);
    m.curOut = shapes;
  }
  const SimConfig &cfg = rtConfig();
  const double cpuMs = msSince(tc);
  double deviceMs = cpuMs;
  if (cfg.profileOn) deviceMs = std::max(cpuMs, cfg.baseMs + cfg.perItemMs * double(p.batch));
  if (fault && fault->kind == Fault::SLOW) deviceMs = deviceMs * fault->factor + fault->addMs;
  const double left = deviceMs - msSince(tc);
  if (left > 0) rtDeviceSleep(m.dev, left);
  (void)t0;
}

aclError execute(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output, aclrtStream stream, bool async) {
  ExecPlan p = plan(modelId, input, output);
  if (!async) {
    runPlan(p);
    return ACL_SUCCESS;
  }
  std::shared_ptr<Stream> s = rtStream(stream);
  auto shared = std::make_shared<ExecPlan>(std::move(p));
  rtEnqueue(s, [shared] { runPlan(*shared); });
  return ACL_SUCCESS;
}

const IODesc *ioAt(const aclmdlDesc *desc, size_t index, bool input);

}  // namespace

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

struct aclmdlDesc {
  uint32_t modelId = 0;
  bool filled = false;
  sim::ModelInfo info;
};

namespace sim {
namespace {
const IODesc *ioAt(const aclmdlDesc *desc, size_t index, bool input) {
  if (!desc || !desc->filled) return nullptr;
  const auto &v = input ? desc->info.inputs : desc->info.outputs;
  return index < v.size() ? &v[index] : nullptr;
}
void fillDims(const IODesc &d, aclmdlIODims *dims, const std::vector<int64_t> &values) {
  std::memset(dims->name, 0, sizeof(dims->name));
  std::strncpy(dims->name, d.name.c_str(), ACL_MAX_TENSOR_NAME_LEN - 1);
  dims->dimCount = std::min<size_t>(values.size(), ACL_MAX_DIM_CNT);
  for (size_t k = 0; k < dims->dimCount; ++k) dims->dims[k] = values[k];
}
}  // namespace
}  // namespace sim

using namespace sim;

#define API_BEGIN try {
#define API_END                                                          \
  }                                                                      \
  catch (const SimError &e) { return setError(e.code, e.msg); }          \
  catch (const std::bad_alloc &) { return setError(ACL_ERROR_BAD_ALLOC, "host out of memory"); }

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

// ------------------------------------------------------------ description
ACLSIM_API aclmdlDesc *aclmdlCreateDesc() { return new (std::nothrow) aclmdlDesc(); }

ACLSIM_API aclError aclmdlDestroyDesc(aclmdlDesc *modelDesc) {
  if (!modelDesc) return setError(ACL_ERROR_INVALID_PARAM, "modelDesc is null");
  delete modelDesc;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclmdlGetDesc(aclmdlDesc *modelDesc, uint32_t modelId) {
  API_BEGIN
  rtRequireInit();
  if (!modelDesc) return setError(ACL_ERROR_INVALID_PARAM, "modelDesc is null");
  std::shared_ptr<Model> m = findModel(modelId);
  modelDesc->modelId = modelId;
  modelDesc->info = m->info;
  modelDesc->filled = true;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API size_t aclmdlGetNumInputs(aclmdlDesc *d) { return d && d->filled ? d->info.inputs.size() : 0; }
ACLSIM_API size_t aclmdlGetNumOutputs(aclmdlDesc *d) { return d && d->filled ? d->info.outputs.size() : 0; }
ACLSIM_API size_t aclmdlGetInputSizeByIndex(aclmdlDesc *d, size_t i) {
  const IODesc *io = ioAt(d, i, true);
  return io ? io->size : 0;
}
ACLSIM_API size_t aclmdlGetOutputSizeByIndex(aclmdlDesc *d, size_t i) {
  const IODesc *io = ioAt(d, i, false);
  return io ? io->size : 0;
}

static aclError getDims(const aclmdlDesc *d, size_t i, aclmdlIODims *dims, bool input) {
  if (!dims) return setError(ACL_ERROR_INVALID_PARAM, "dims is null");
  const IODesc *io = ioAt(d, i, input);
  if (!io) return setError(ACL_ERROR_INVALID_PARAM, std::string(input ? "input" : "output") + " index " + std::to_string(i) + " is out of range or the desc is empty");
  fillDims(*io, dims, io->dims);
  return ACL_SUCCESS;
}
ACLSIM_API aclError aclmdlGetInputDims(const aclmdlDesc *d, size_t i, aclmdlIODims *dims) { return getDims(d, i, dims, true); }
ACLSIM_API aclError aclmdlGetInputDimsV2(const aclmdlDesc *d, size_t i, aclmdlIODims *dims) { return getDims(d, i, dims, true); }
ACLSIM_API aclError aclmdlGetOutputDims(const aclmdlDesc *d, size_t i, aclmdlIODims *dims) { return getDims(d, i, dims, false); }

ACLSIM_API aclError aclmdlGetCurOutputDims(const aclmdlDesc *d, size_t i, aclmdlIODims *dims) {
  API_BEGIN
  if (!dims) return setError(ACL_ERROR_INVALID_PARAM, "dims is null");
  const IODesc *io = ioAt(d, i, false);
  if (!io) return setError(ACL_ERROR_INVALID_PARAM, "output index " + std::to_string(i) + " is out of range or the desc is empty");
  std::shared_ptr<Model> m = findModel(d->modelId);
  std::vector<int64_t> cur;
  {
    std::lock_guard<std::mutex> lk(m->curMu);
    if (i < m->curOut.size()) cur = m->curOut[i];
  }
  fillDims(*io, dims, cur.empty() ? io->dims : cur);
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclDataType aclmdlGetInputDataType(const aclmdlDesc *d, size_t i) {
  const IODesc *io = ioAt(d, i, true);
  return io ? io->dt : ACL_DT_UNDEFINED;
}
ACLSIM_API aclDataType aclmdlGetOutputDataType(const aclmdlDesc *d, size_t i) {
  const IODesc *io = ioAt(d, i, false);
  return io ? io->dt : ACL_DT_UNDEFINED;
}
ACLSIM_API aclFormat aclmdlGetInputFormat(const aclmdlDesc *d, size_t i) {
  const IODesc *io = ioAt(d, i, true);
  return io ? io->fmt : ACL_FORMAT_UNDEFINED;
}
ACLSIM_API aclFormat aclmdlGetOutputFormat(const aclmdlDesc *d, size_t i) {
  const IODesc *io = ioAt(d, i, false);
  return io ? io->fmt : ACL_FORMAT_UNDEFINED;
}
ACLSIM_API const char *aclmdlGetInputNameByIndex(const aclmdlDesc *d, size_t i) {
  const IODesc *io = ioAt(d, i, true);
  return io ? io->name.c_str() : "";
}
ACLSIM_API const char *aclmdlGetOutputNameByIndex(const aclmdlDesc *d, size_t i) {
  const IODesc *io = ioAt(d, i, false);
  return io ? io->name.c_str() : "";
}

static aclError indexByName(const aclmdlDesc *d, const char *name, size_t *index, bool input) {
  if (!d || !d->filled || !name || !index) return setError(ACL_ERROR_INVALID_PARAM, "null argument or empty desc");
  const auto &v = input ? d->info.inputs : d->info.outputs;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].name == name) {
      *index = i;
      return ACL_SUCCESS;
    }
  }
  return setError(ACL_ERROR_INVALID_PARAM, std::string("the model has no ") + (input ? "input" : "output") + " named '" + name + "'");
}
ACLSIM_API aclError aclmdlGetInputIndexByName(const aclmdlDesc *d, const char *name, size_t *index) { return indexByName(d, name, index, true); }
ACLSIM_API aclError aclmdlGetOutputIndexByName(const aclmdlDesc *d, const char *name, size_t *index) { return indexByName(d, name, index, false); }

ACLSIM_API aclError aclmdlGetDynamicBatch(const aclmdlDesc *d, aclmdlBatch *batch) {
  if (!d || !d->filled || !batch) return setError(ACL_ERROR_INVALID_PARAM, "null argument or empty desc");
  batch->batchCount = 0;
  if (d->info.kind == DYN_BATCH) {
    batch->batchCount = std::min<size_t>(d->info.gears.size(), ACL_MAX_BATCH_NUM);
    for (size_t i = 0; i < batch->batchCount; ++i) batch->batch[i] = d->info.gears[i];
  }
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclmdlGetDynamicHW(const aclmdlDesc *d, size_t, aclmdlHW *hw) {
  if (!d || !d->filled || !hw) return setError(ACL_ERROR_INVALID_PARAM, "null argument or empty desc");
  hw->hwCount = 0;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclmdlGetInputDynamicGearCount(const aclmdlDesc *d, size_t, size_t *gearCount) {
  if (!d || !d->filled || !gearCount) return setError(ACL_ERROR_INVALID_PARAM, "null argument or empty desc");
  *gearCount = 0;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclmdlGetInputDimsRange(const aclmdlDesc *d, size_t i, aclmdlIODimsRange *r) {
  if (!r) return setError(ACL_ERROR_INVALID_PARAM, "dimsRange is null");
  const IODesc *io = ioAt(d, i, true);
  if (!io) return setError(ACL_ERROR_INVALID_PARAM, "input index out of range or empty desc");
  r->rangeCount = std::min<size_t>(io->dims.size(), ACL_MAX_DIM_CNT);
  for (size_t k = 0; k < r->rangeCount; ++k) {
    const int64_t v = io->dims[k];
    r->range[k][0] = v >= 0 ? v : 1;
    r->range[k][1] = v >= 0 ? v : (k == 0 ? int64_t(d->info.maxBatch) : -1);
  }
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclmdlSetDynamicBatchSize(uint32_t modelId, aclmdlDataset *dataset, size_t index, uint64_t batchSize) {
  API_BEGIN
  rtRequireInit();
  std::shared_ptr<Model> m = findModel(modelId);
  const ModelInfo &info = m->info;
  if (info.kind != DYN_BATCH) return setError(ACL_ERROR_MODEL_NOT_DYNAMIC, "model " + std::to_string(modelId) + " has no dynamic batch");
  if (!dataset) return setError(ACL_ERROR_INVALID_PARAM, "dataset is null");
  if (index != info.inputs.size() - 1) {
    return setError(ACL_ERROR_INVALID_PARAM, "index " + std::to_string(index) + " is not the " ACL_DYNAMIC_TENSOR_NAME " input (" +
                                                 std::to_string(info.inputs.size() - 1) + ")");
  }
  if (index >= dataset->bufs.size()) {
    return setError(ACL_ERROR_INVALID_PARAM, "the dataset has no buffer at index " + std::to_string(index) + " for " ACL_DYNAMIC_TENSOR_NAME);
  }
  if (std::find(info.gears.begin(), info.gears.end(), batchSize) == info.gears.end()) {
    std::string gs;
    for (uint64_t g : info.gears) gs += (gs.empty() ? "" : ",") + std::to_string(g);
    return setError(int(ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID),
                    "batch size " + std::to_string(batchSize) + " is not one of the model's gears {" + gs + "}");
  }
  dataset->batchSet = true;
  dataset->batch = batchSize;
  aclDataBuffer *b = dataset->bufs[index];
  if (b && b->data && b->size >= sizeof(uint64_t) && rtIsDeviceRange(b->data, sizeof(uint64_t))) {
    std::memcpy(b->data, &batchSize, sizeof(uint64_t));
  }
  // Until an execution reports actual shapes, GetCurOutputDims derives them from the gear.
  std::lock_guard<std::mutex> lk(m->curMu);
  for (size_t i = 0; i < info.outputs.size(); ++i) {
    const IODesc &o = info.outputs[i];
    std::vector<int64_t> dims = o.dims;
    for (size_t k = 0; k < dims.size(); ++k) {
      if (dims[k] < 0 && o.perBatch[k] > 0) dims[k] = o.perBatch[k] * int64_t(batchSize);
    }
    m->curOut[i] = dims;
  }
  return ACL_SUCCESS;
  API_END
}

// ------------------------------------------------------------ datasets / buffers / tensor descs
ACLSIM_API aclmdlDataset *aclmdlCreateDataset() { return new (std::nothrow) aclmdlDataset(); }

ACLSIM_API aclError aclmdlDestroyDataset(const aclmdlDataset *dataset) {
  if (!dataset) return setError(ACL_ERROR_INVALID_PARAM, "dataset is null");
  delete dataset;
  return ACL_SUCCESS;
}

ACLSIM_API aclError aclmdlAddDatasetBuffer(aclmdlDataset *dataset, aclDataBuffer *dataBuffer) {
  if (!dataset || !dataBuffer) return setError(ACL_ERROR_INVALID_PARAM, "dataset or dataBuffer is null");
  dataset->bufs.push_back(dataBuffer);
  dataset->descs.resize(dataset->bufs.size(), nullptr);
  return ACL_SUCCESS;
}

ACLSIM_API aclDataBuffer *aclmdlGetDatasetBuffer(const aclmdlDataset *dataset, size_t index) {
  if (!dataset || index >= dataset->bufs.size()) return nullptr;
  return dataset->bufs[index];
}

ACLSIM_API size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset *dataset) { return dataset ? dataset->bufs.size() : 0; }

ACLSIM_API aclError aclmdlSetDatasetTensorDesc(aclmdlDataset *dataset, aclTensorDesc *tensorDesc, size_t index) {
  API_BEGIN
  if (!dataset) return setError(ACL_ERROR_INVALID_PARAM, "dataset is null");
  if (index >= dataset->bufs.size()) {
    return setError(ACL_ERROR_INVALID_PARAM, "index " + std::to_string(index) + " must be smaller than the dataset's buffer count " +
                                                 std::to_string(dataset->bufs.size()));
  }
  dataset->descs.resize(dataset->bufs.size(), nullptr);
  if (!tensorDesc) {
    delete dataset->descs[index];
    dataset->descs[index] = nullptr;
    return ACL_SUCCESS;
  }
  dataset->setDesc(index, *tensorDesc);  // the dataset keeps its own copy, like ACL
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclTensorDesc *aclmdlGetDatasetTensorDesc(const aclmdlDataset *dataset, size_t index) {
  if (!dataset || index >= dataset->descs.size()) return nullptr;
  return dataset->descs[index];
}

ACLSIM_API aclDataBuffer *aclCreateDataBuffer(void *data, size_t size) {
  return new (std::nothrow) aclDataBuffer{data, size};
}
ACLSIM_API aclError aclDestroyDataBuffer(const aclDataBuffer *dataBuffer) {
  if (!dataBuffer) return setError(ACL_ERROR_INVALID_PARAM, "dataBuffer is null");
  delete dataBuffer;
  return ACL_SUCCESS;
}
ACLSIM_API aclError aclUpdateDataBuffer(aclDataBuffer *dataBuffer, void *data, size_t size) {
  if (!dataBuffer) return setError(ACL_ERROR_INVALID_PARAM, "dataBuffer is null");
  dataBuffer->data = data;
  dataBuffer->size = size;
  return ACL_SUCCESS;
}
ACLSIM_API void *aclGetDataBufferAddr(const aclDataBuffer *b) { return b ? b->data : nullptr; }
ACLSIM_API uint32_t aclGetDataBufferSize(const aclDataBuffer *b) { return b ? uint32_t(b->size) : 0; }
ACLSIM_API size_t aclGetDataBufferSizeV2(const aclDataBuffer *b) { return b ? b->size : 0; }

ACLSIM_API aclTensorDesc *aclCreateTensorDesc(aclDataType dataType, int numDims, const int64_t *dims, aclFormat format) {
  if (numDims < 0 || numDims > ACL_MAX_DIM_CNT || (numDims > 0 && !dims)) return nullptr;
  auto *d = new (std::nothrow) aclTensorDesc{dataType, format, {}};
  if (d && numDims > 0) d->dims.assign(dims, dims + numDims);
  return d;
}
ACLSIM_API void aclDestroyTensorDesc(const aclTensorDesc *desc) { delete desc; }
ACLSIM_API aclDataType aclGetTensorDescType(const aclTensorDesc *d) { return d ? d->dt : ACL_DT_UNDEFINED; }
ACLSIM_API aclFormat aclGetTensorDescFormat(const aclTensorDesc *d) { return d ? d->fmt : ACL_FORMAT_UNDEFINED; }
ACLSIM_API size_t aclGetTensorDescNumDims(const aclTensorDesc *d) { return d ? d->dims.size() : 0; }
ACLSIM_API size_t aclGetTensorDescElementCount(const aclTensorDesc *d) {
  if (!d) return 0;
  size_t n = 1;
  for (int64_t v : d->dims) {
    if (v < 0) return 0;
    n *= size_t(v);
  }
  return n;
}
ACLSIM_API size_t aclGetTensorDescSize(const aclTensorDesc *d) {
  return d ? aclGetTensorDescElementCount(d) * aclDataTypeSize(d->dt) : 0;
}
ACLSIM_API aclError aclGetTensorDescDimV2(const aclTensorDesc *d, size_t index, int64_t *dimSize) {
  if (!d || !dimSize || index >= d->dims.size()) return setError(ACL_ERROR_INVALID_PARAM, "null argument or dim index out of range");
  *dimSize = d->dims[index];
  return ACL_SUCCESS;
}

// ------------------------------------------------------------ execute
ACLSIM_API aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output) {
  API_BEGIN
  return execute(modelId, input, output, nullptr, false);
  API_END
}

ACLSIM_API aclError aclmdlExecuteAsync(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output, aclrtStream stream) {
  API_BEGIN
  return execute(modelId, input, output, stream, true);
  API_END
}

ACLSIM_API aclmdlExecConfigHandle *aclmdlCreateExecConfigHandle() { return new (std::nothrow) aclmdlExecConfigHandle(); }
ACLSIM_API aclError aclmdlDestroyExecConfigHandle(const aclmdlExecConfigHandle *handle) {
  if (!handle) return setError(ACL_ERROR_INVALID_PARAM, "handle is null");
  delete handle;
  return ACL_SUCCESS;
}
ACLSIM_API aclError aclmdlSetExecConfigOpt(aclmdlExecConfigHandle *handle, aclmdlExecConfigAttr attr, const void *attrValue,
                                           size_t valueSize) {
  if (!handle || !attrValue) return setError(ACL_ERROR_INVALID_PARAM, "handle or attrValue is null");
  if (attr == ACL_MDL_STREAM_SYNC_TIMEOUT || attr == ACL_MDL_EVENT_SYNC_TIMEOUT) {
    if (valueSize != sizeof(int32_t)) return setError(ACL_ERROR_INVALID_PARAM, "timeout value must be an int32_t");
    int32_t v;
    std::memcpy(&v, attrValue, sizeof v);
    if (v < -1) return setError(ACL_ERROR_INVALID_PARAM, "timeout must be -1 or >= 0 ms");
    if (attr == ACL_MDL_STREAM_SYNC_TIMEOUT) handle->streamTimeoutMs = v;
    return ACL_SUCCESS;
  }
  return setError(ACL_ERROR_API_NOT_SUPPORT, "exec config attribute " + std::to_string(int(attr)) + " is not supported by the simulator");
}
ACLSIM_API aclError aclmdlExecuteV2(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output, aclrtStream stream,
                                    const aclmdlExecConfigHandle *handle) {
  API_BEGIN
  if (!stream) return execute(modelId, input, output, nullptr, false);
  aclError e = execute(modelId, input, output, stream, true);
  if (e) return e;
  return aclrtSynchronizeStreamWithTimeout(stream, handle ? handle->streamTimeoutMs : -1);
  API_END
}
ACLSIM_API aclError aclmdlExecuteAsyncV2(uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output, aclrtStream stream,
                                         const aclmdlExecConfigHandle *) {
  API_BEGIN
  return execute(modelId, input, output, stream, true);
  API_END
}
