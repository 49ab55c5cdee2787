// aclmdlExecute / ExecuteAsync / ExecuteV2: checks a dataset against the model, then runs the
// graph on the calling thread (synchronous) or on the stream's worker thread (async), with the
// device time model and the injected execution faults.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "model_internal.h"
#include "ops.h"

struct aclmdlExecConfigHandle {
  int32_t streamTimeoutMs = -1;
};

namespace sim {
namespace {

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
    // Not execution faults (runtime_events.cc syncEvent, model_desc.cc aclmdlSetDynamicBatchSize).
    if (f.kind == Fault::NOSYNCWAIT || f.kind == Fault::CURDIMSATRUN) continue;
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

}  // namespace
}  // namespace sim

using namespace sim;

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
