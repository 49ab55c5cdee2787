#include "model_core.h"

#include <algorithm>
#include <cstring>

namespace npufleet {

namespace {

double MsBetween(Clock::time_point from, Clock::time_point to) {
  const double ms = std::chrono::duration<double, std::milli>(to - from).count();
  return ms > 0 ? ms : 0;
}

bool IsWaitTimeout(aclError rc) {
  return rc == ACL_ERROR_RT_EVENT_SYNC_TIMEOUT || rc == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT ||
         rc == 107019 /* ACL_ERROR_RT_WAIT_TIMEOUT */ || rc == 207020 /* ACL_ERROR_RT_TIMEOUT */;
}

size_t ElementCount(const std::vector<int64_t> &dims) {
  size_t n = 1;
  for (int64_t d : dims) n *= static_cast<size_t>(d < 0 ? 0 : d);
  return n;
}

std::string DimsText(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

ModelCore::~ModelCore() = default;

void ModelCore::Load(const LoadOptions &opts) {
  size_t freeBefore = 0, total = 0;
  ACL_CHECK(api_, aclrtGetMemInfo, ACL_HBM_MEM, &freeBefore, &total);

  // The simulator cannot read gears from an ONNX file; real ACL reads them from the .om.
  if (api_.aclsimSetNextLoadBatchGears != nullptr && !opts.gears.empty()) {
    ACL_CHECK(api_, aclsimSetNextLoadBatchGears, opts.gears.data(), opts.gears.size());
  }
  uint32_t modelId = 0;
  {
    const aclError rc = api_.aclmdlLoadFromFile(opts.path.c_str(), &modelId);
    if (rc != ACL_SUCCESS) ThrowAcl(api_, rc, "aclmdlLoadFromFile", opts.path);
  }
  modelLoaded_ = true;
  info.modelId = modelId;
  desc_ = api_.aclmdlCreateDesc();
  if (desc_ == nullptr) ThrowAcl(api_, 500000, "aclmdlCreateDesc");
  ACL_CHECK(api_, aclmdlGetDesc, desc_, modelId);

  auto ioDims = std::make_unique<aclmdlIODims>();  // 1160 bytes: keep off the stack
  numAclInputs_ = api_.aclmdlGetNumInputs(desc_);
  size_t mbatchBytes = 0;
  for (size_t i = 0; i < numAclInputs_; ++i) {
    const char *name = api_.aclmdlGetInputNameByIndex(desc_, i);
    const std::string inputName = name ? name : "";
    if (inputName == ACL_DYNAMIC_TENSOR_NAME) {
      mbatchIndex_ = i;
      mbatchBytes = api_.aclmdlGetInputSizeByIndex(desc_, i);
      continue;
    }
    TensorInfo t;
    t.name = inputName;
    t.aclIndex = i;
    t.dtype = api_.aclmdlGetInputDataType(desc_, i);
    t.elemBytes = api_.aclDataTypeSize(t.dtype);
    *ioDims = {};
    ACL_CHECK(api_, aclmdlGetInputDims, desc_, i, ioDims.get());
    t.dims.assign(ioDims->dims, ioDims->dims + std::min(ioDims->dimCount, ACL_MAX_DIM_CNT));
    t.bufferBytes = api_.aclmdlGetInputSizeByIndex(desc_, i);
    if (t.elemBytes == 0) {
      ThrowKind("invalid", "input " + t.name + " has unsupported data type " +
                               std::to_string(static_cast<int>(t.dtype)));
    }
    info.inputs.push_back(std::move(t));
  }
  const size_t numOutputs = api_.aclmdlGetNumOutputs(desc_);
  for (size_t o = 0; o < numOutputs; ++o) {
    TensorInfo t;
    const char *name = api_.aclmdlGetOutputNameByIndex(desc_, o);
    t.name = name ? name : "";
    t.aclIndex = o;
    t.dtype = api_.aclmdlGetOutputDataType(desc_, o);
    t.elemBytes = api_.aclDataTypeSize(t.dtype);
    *ioDims = {};
    ACL_CHECK(api_, aclmdlGetOutputDims, desc_, o, ioDims.get());
    t.dims.assign(ioDims->dims, ioDims->dims + std::min(ioDims->dimCount, ACL_MAX_DIM_CNT));
    t.bufferBytes = api_.aclmdlGetOutputSizeByIndex(desc_, o);
    if (t.elemBytes == 0) {
      ThrowKind("invalid", "output " + t.name + " has unsupported data type " +
                               std::to_string(static_cast<int>(t.dtype)));
    }
    info.outputs.push_back(std::move(t));
  }

  aclmdlBatch batch{};
  std::vector<uint64_t> modelGears;
  if (api_.aclmdlGetDynamicBatch(desc_, &batch) == ACL_SUCCESS) {
    const size_t n = std::min(batch.batchCount, ACL_MAX_BATCH_NUM);
    modelGears.assign(batch.batch, batch.batch + n);
  } else {
    TakeRecentErrMsg(api_);  // a static model may answer with an error; not a failure
  }

  bool anyDynamicDim = false;
  for (const auto &t : info.inputs) {
    for (int64_t d : t.dims) anyDynamicDim = anyDynamicDim || d < 0;
  }
  if (mbatchIndex_ && !modelGears.empty()) {
    info.dynamic = DynamicKind::Batch;
    info.gears = modelGears;
  } else if (mbatchIndex_) {
    ThrowKind("invalid", "model has the " + std::string(ACL_DYNAMIC_TENSOR_NAME) +
                             " input but aclmdlGetDynamicBatch reports no batch gears; only dynamic "
                             "batch is supported (not dynamic HW/dims)");
  } else if (anyDynamicDim) {
    info.dynamic = DynamicKind::Range;
    info.gears = !opts.gears.empty() ? opts.gears : modelGears;
  } else {
    info.dynamic = DynamicKind::Static;
    const auto &first = info.inputs.empty() ? TensorInfo{} : info.inputs.front();
    info.gears = {first.dims.empty() ? 1u : static_cast<uint64_t>(first.dims[0])};
  }
  std::sort(info.gears.begin(), info.gears.end());
  info.gears.erase(std::unique(info.gears.begin(), info.gears.end()), info.gears.end());
  if (info.gears.empty()) {
    // A range model with no gears: its batch dimension is bounded by maxInputDims.
    for (const auto &t : info.inputs) {
      auto it = opts.maxInputDims.find(t.name);
      if (it != opts.maxInputDims.end() && !it->second.empty() && it->second[0] > 0) {
        info.gears.push_back(static_cast<uint64_t>(it->second[0]));
        break;
      }
    }
    if (info.gears.empty()) info.gears.push_back(1);
  }
  const int64_t maxGear = static_cast<int64_t>(info.gears.back());

  for (auto &t : info.inputs) {
    auto given = opts.maxInputDims.find(t.name);
    bool dynamicBeyondBatch = false;
    for (size_t k = 1; k < t.dims.size(); ++k) dynamicBeyondBatch = dynamicBeyondBatch || t.dims[k] < 0;
    if (given != opts.maxInputDims.end()) {
      if (given->second.size() != t.dims.size()) {
        ThrowKind("invalid", "maxInputDims." + t.name + " has rank " +
                                 std::to_string(given->second.size()) + ", the model input is " +
                                 DimsText(t.dims));
      }
      t.maxDims = given->second;
      for (size_t k = 0; k < t.dims.size(); ++k) {
        if (t.maxDims[k] <= 0 || (t.dims[k] >= 0 && t.dims[k] != t.maxDims[k])) {
          ThrowKind("invalid", "maxInputDims." + t.name + " " + DimsText(t.maxDims) +
                                   " does not fit the model input " + DimsText(t.dims));
        }
      }
      // The batch dimension is bounded by the gears, whatever maxInputDims says.
      if (!t.dims.empty() && t.dims[0] < 0) t.maxDims[0] = std::max(t.maxDims[0], maxGear);
    } else {
      t.maxDims = t.dims;
      for (size_t k = 0; k < t.maxDims.size(); ++k) {
        if (t.maxDims[k] >= 0) continue;
        if (k != 0) {
          ThrowKind("invalid", "input " + t.name + " " + DimsText(t.dims) +
                                   " has a dynamic non-batch dimension: pass maxInputDims." +
                                   t.name + " to size its buffers");
        }
        t.maxDims[k] = maxGear;
      }
    }
    // Real shapes of such inputs are passed per execution through aclmdlSetDatasetTensorDesc.
    if (dynamicBeyondBatch || info.dynamic == DynamicKind::Range) setsTensorDesc_ = true;
    if (dynamicBeyondBatch || info.dynamic == DynamicKind::Range || t.bufferBytes == 0) {
      t.bufferBytes = ElementCount(t.maxDims) * t.elemBytes;
    }
  }
  for (auto &t : info.outputs) {
    auto given = opts.maxOutputDims.find(t.name);
    t.maxDims = given != opts.maxOutputDims.end() ? given->second : t.dims;
    if (t.maxDims.size() != t.dims.size()) {
      ThrowKind("invalid", "maxOutputDims." + t.name + " has rank " + std::to_string(t.maxDims.size()) +
                               ", the model output is " + DimsText(t.dims));
    }
    bool dynamicBeyondBatch = false;
    for (size_t k = 0; k < t.maxDims.size(); ++k) {
      if (t.dims[k] >= 0 && t.maxDims[k] != t.dims[k]) {
        ThrowKind("invalid", "maxOutputDims." + t.name + " " + DimsText(t.maxDims) +
                                 " does not fit the model output " + DimsText(t.dims));
      }
      dynamicBeyondBatch = dynamicBeyondBatch || (k > 0 && t.dims[k] < 0);
      if (k == 0 && t.dims[0] < 0) t.maxDims[0] = std::max<int64_t>(t.maxDims[0], maxGear);
      if (t.maxDims[k] >= 0) continue;
      ThrowKind("invalid", "output " + t.name + " " + DimsText(t.dims) +
                               " has a dynamic non-batch dimension: pass maxOutputDims." + t.name +
                               " to size its buffers");
    }
    if (t.bufferBytes == 0 || dynamicBeyondBatch) {
      t.bufferBytes = std::max(t.bufferBytes, ElementCount(t.maxDims) * t.elemBytes);
    }
  }
  info.slots = opts.slots;
  slots_.resize(static_cast<size_t>(opts.slots));
  for (auto &s : slots_) AllocateSlot(s, mbatchBytes);

  size_t freeAfter = 0;
  ACL_CHECK(api_, aclrtGetMemInfo, ACL_HBM_MEM, &freeAfter, &total);
  info.deviceMemoryBytes =
      freeBefore > freeAfter ? static_cast<int64_t>(freeBefore - freeAfter) : 0;
  loaded = true;
}

void ModelCore::AllocateSlot(Slot &s, size_t mbatchBytes) {
  s.inDs = api_.aclmdlCreateDataset();
  s.outDs = api_.aclmdlCreateDataset();
  if (s.inDs == nullptr || s.outDs == nullptr) ThrowAcl(api_, 500000, "aclmdlCreateDataset");
  auto addBuffer = [&](aclmdlDataset *ds, void *ptr, size_t bytes) {
    aclDataBuffer *db = api_.aclCreateDataBuffer(ptr, bytes);
    if (db == nullptr) ThrowAcl(api_, 500000, "aclCreateDataBuffer");
    s.dataBuffers.push_back(db);
    ACL_CHECK(api_, aclmdlAddDatasetBuffer, ds, db);
  };
  size_t visible = 0;
  for (size_t i = 0; i < numAclInputs_; ++i) {
    if (mbatchIndex_ && *mbatchIndex_ == i) {
      const size_t bytes = std::max<size_t>(mbatchBytes, 8);
      ACL_CHECK(api_, aclrtMalloc, &s.devMbatch, bytes, ACL_MEM_MALLOC_NORMAL_ONLY);
      addBuffer(s.inDs, s.devMbatch, bytes);
      continue;
    }
    const TensorInfo &t = info.inputs[visible++];
    const size_t bytes = std::max<size_t>(t.bufferBytes, 1);
    s.devIn.push_back(nullptr);
    ACL_CHECK(api_, aclrtMalloc, &s.devIn.back(), bytes, ACL_MEM_MALLOC_NORMAL_ONLY);
    s.hostIn.push_back(nullptr);
    ACL_CHECK(api_, aclrtMallocHost, &s.hostIn.back(), bytes);
    addBuffer(s.inDs, s.devIn.back(), t.bufferBytes);
  }
  for (const auto &t : info.outputs) {
    const size_t bytes = std::max<size_t>(t.bufferBytes, 1);
    s.devOut.push_back(nullptr);
    ACL_CHECK(api_, aclrtMalloc, &s.devOut.back(), bytes, ACL_MEM_MALLOC_NORMAL_ONLY);
    s.hostOut.push_back(nullptr);
    ACL_CHECK(api_, aclrtMallocHost, &s.hostOut.back(), bytes);
    addBuffer(s.outDs, s.devOut.back(), t.bufferBytes);
  }
  ACL_CHECK(api_, aclrtCreateStream, &s.stream);
  for (aclrtEvent *ev : {&s.evStart, &s.evIn, &s.evExecStart, &s.evExec, &s.evOut}) {
    ACL_CHECK(api_, aclrtCreateEvent, ev);
  }
}

void ModelCore::FreeSlotMemory(Slot &s) {
  // Descriptors first, then memory (aclDestroyDataBuffer never frees the memory it wraps).
  for (auto *d : s.inDescs) api_.aclDestroyTensorDesc ? api_.aclDestroyTensorDesc(d) : void();
  s.inDescs.clear();
  for (auto *db : s.dataBuffers) api_.aclDestroyDataBuffer(db);
  s.dataBuffers.clear();
  if (s.inDs) api_.aclmdlDestroyDataset(s.inDs);
  if (s.outDs) api_.aclmdlDestroyDataset(s.outDs);
  s.inDs = s.outDs = nullptr;
  for (void *p : s.devIn) if (p) api_.aclrtFree(p);
  for (void *p : s.devOut) if (p) api_.aclrtFree(p);
  for (void *p : s.hostIn) if (p) api_.aclrtFreeHost(p);
  for (void *p : s.hostOut) if (p) api_.aclrtFreeHost(p);
  if (s.devMbatch) api_.aclrtFree(s.devMbatch);
  s.devIn.clear(), s.devOut.clear(), s.hostIn.clear(), s.hostOut.clear();
  s.devMbatch = nullptr;
  for (aclrtEvent *ev : {&s.evStart, &s.evIn, &s.evExecStart, &s.evExec, &s.evOut}) {
    if (*ev) api_.aclrtDestroyEvent(*ev);
    *ev = nullptr;
  }
  if (s.stream != nullptr) {
    api_.aclrtSynchronizeStream(s.stream);  // idle here; clears any sticky error before destroy
    api_.aclrtDestroyStream(s.stream);
    s.stream = nullptr;
  }
  TakeRecentErrMsg(api_);
}

void ModelCore::Release() {
  Failure first;
  bool failed = false;
  for (auto &s : slots_) FreeSlotMemory(s);
  slots_.clear();
  if (modelLoaded_) {
    const aclError rc = api_.aclmdlUnload(info.modelId);
    if (rc != ACL_SUCCESS) {
      failed = true;
      first.kind = "acl";
      first.aclCode = rc;
      first.api = "aclmdlUnload";
      first.aclRecentMsg = TakeRecentErrMsg(api_);
      first.message = "aclmdlUnload failed: " + std::to_string(rc) + " " + AclErrorName(rc);
    }
    modelLoaded_ = false;
  }
  if (desc_) api_.aclmdlDestroyDesc(desc_);
  desc_ = nullptr;
  loaded = false;
  if (failed) throw FailureException(first);
}

int ModelCore::FreeSlot() const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].job == nullptr) return static_cast<int>(i);
  }
  return -1;
}

void ModelCore::Fail(Slot &s, const Failure &f) {
  if (s.job != nullptr && !s.job->failed) {
    s.job->failed = true;
    s.job->failure = f;
  }
}

std::vector<int64_t> ModelCore::ReadOutputDims(Slot &s, size_t o, bool afterRun) {
  const TensorInfo &t = info.outputs[o];
  if (info.dynamic == DynamicKind::Static) return t.dims;
  const bool knownAfterRun = info.dynamic == DynamicKind::Range || setsTensorDesc_;
  if (knownAfterRun && !afterRun) return t.maxDims;
  // Dynamic batch: only the batch dimension varies, so the gear determines the shape. (Not
  // aclmdlGetCurOutputDims: it is per model, and a batch finishing on another slot may update it
  // between this slot's setter and the read.)
  if (info.dynamic == DynamicKind::Batch && !setsTensorDesc_) {
    std::vector<int64_t> dims = t.dims;
    if (!dims.empty() && dims[0] < 0) dims[0] = static_cast<int64_t>(s.job->gear);
    if (std::all_of(dims.begin(), dims.end(), [](int64_t v) { return v >= 0; })) return dims;
  }
  auto allKnown = [](const std::vector<int64_t> &d) {
    return std::all_of(d.begin(), d.end(), [](int64_t v) { return v >= 0; });
  };
  if (knownAfterRun && api_.aclmdlGetDatasetTensorDesc != nullptr &&
      api_.aclGetTensorDescNumDims != nullptr && api_.aclGetTensorDescDimV2 != nullptr) {
    aclTensorDesc *d = api_.aclmdlGetDatasetTensorDesc(s.outDs, t.aclIndex);
    if (d != nullptr) {
      std::vector<int64_t> dims(api_.aclGetTensorDescNumDims(d));
      bool ok = true;
      for (size_t k = 0; k < dims.size() && ok; ++k) {
        ok = api_.aclGetTensorDescDimV2(d, k, &dims[k]) == ACL_SUCCESS;
      }
      if (ok && !dims.empty() && allKnown(dims)) return dims;
    }
    TakeRecentErrMsg(api_);
  }
  if (api_.aclmdlGetCurOutputDims != nullptr) {
    auto io = std::make_unique<aclmdlIODims>();
    if (api_.aclmdlGetCurOutputDims(desc_, t.aclIndex, io.get()) == ACL_SUCCESS) {
      std::vector<int64_t> dims(io->dims, io->dims + std::min(io->dimCount, ACL_MAX_DIM_CNT));
      if (!dims.empty() && allKnown(dims) && dims.size() == t.dims.size()) return dims;
    } else {
      TakeRecentErrMsg(api_);
    }
  }
  // Fallback: the leading dynamic dimension is the batch of this execution.
  std::vector<int64_t> dims = t.dims;
  const int64_t batch = info.dynamic == DynamicKind::Batch
                            ? static_cast<int64_t>(s.job->gear)
                            : (s.job->inputs.empty() || s.job->inputs[0].dims.empty()
                                   ? 1
                                   : s.job->inputs[0].dims[0]);
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] < 0) dims[k] = k == 0 ? batch : t.maxDims[k];
  }
  return dims;
}

void ModelCore::Start(int slotIndex, ExecJob *job) {
  Slot &s = slots_[static_cast<size_t>(slotIndex)];
  s.job = job;
  ++inflight_;
  s.done = false;
  s.outDims.assign(info.outputs.size(), {});
  s.outCopyBytes.assign(info.outputs.size(), 0);
  try {
    const auto t0 = Clock::now();
    for (size_t k = 0; k < info.inputs.size(); ++k) {
      const ExecInput &in = job->inputs[k];
      if (in.bytes > info.inputs[k].bufferBytes) {
        ThrowKind("invalid", "input " + info.inputs[k].name + " has " + std::to_string(in.bytes) +
                                 " bytes, more than its buffer of " +
                                 std::to_string(info.inputs[k].bufferBytes));
      }
      if (in.bytes > 0) std::memcpy(s.hostIn[k], in.data, in.bytes);
    }
    s.enqueuedAt = Clock::now();
    s.hostCopyInMs = MsBetween(t0, s.enqueuedAt);

    if (setsTensorDesc_) {
      if (api_.aclmdlSetDatasetTensorDesc == nullptr || api_.aclCreateTensorDesc == nullptr) {
        ThrowKind("invalid", "this ACL library lacks aclmdlSetDatasetTensorDesc, needed for "
                             "models with dynamic non-batch dimensions");
      }
      for (auto *d : s.inDescs) api_.aclDestroyTensorDesc ? api_.aclDestroyTensorDesc(d) : void();
      s.inDescs.clear();
      for (size_t k = 0; k < info.inputs.size(); ++k) {
        const auto &dims = job->inputs[k].dims;
        aclTensorDesc *d = api_.aclCreateTensorDesc(info.inputs[k].dtype,
                                                    static_cast<int>(dims.size()), dims.data(),
                                                    ACL_FORMAT_ND);
        if (d == nullptr) ThrowAcl(api_, 100000, "aclCreateTensorDesc");
        s.inDescs.push_back(d);
        ACL_CHECK(api_, aclmdlSetDatasetTensorDesc, s.inDs, d, info.inputs[k].aclIndex);
      }
    }
    ACL_CHECK(api_, aclrtRecordEvent, s.evStart, s.stream);
    for (size_t k = 0; k < info.inputs.size(); ++k) {
      const size_t bytes = job->inputs[k].bytes;
      if (bytes == 0) continue;
      ACL_CHECK(api_, aclrtMemcpyAsync, s.devIn[k], info.inputs[k].bufferBytes, s.hostIn[k], bytes,
                ACL_MEMCPY_HOST_TO_DEVICE, s.stream);
    }
    ACL_CHECK(api_, aclrtRecordEvent, s.evIn, s.stream);
    // One execution of a modelId at a time: chain after the previous batch's execute.
    if (lastStarted_ >= 0 && lastStarted_ != slotIndex) {
      const Slot &prev = slots_[static_cast<size_t>(lastStarted_)];
      if (prev.job != nullptr && !prev.done) {
        ACL_CHECK(api_, aclrtStreamWaitEvent, s.stream, prev.evExec);
      }
    }
    ACL_CHECK(api_, aclrtRecordEvent, s.evExecStart, s.stream);
    if (info.dynamic == DynamicKind::Batch) {
      ACL_CHECK(api_, aclmdlSetDynamicBatchSize, info.modelId, s.inDs, *mbatchIndex_, job->gear);
    }
    for (size_t o = 0; o < info.outputs.size(); ++o) {
      s.outDims[o] = ReadOutputDims(s, o, false);
      s.outCopyBytes[o] = std::min(ElementCount(s.outDims[o]) * info.outputs[o].elemBytes,
                                   info.outputs[o].bufferBytes);
    }
    ACL_CHECK(api_, aclmdlExecuteAsync, info.modelId, s.inDs, s.outDs, s.stream);
    lastStarted_ = slotIndex;
    ACL_CHECK(api_, aclrtRecordEvent, s.evExec, s.stream);
    for (size_t o = 0; o < info.outputs.size(); ++o) {
      if (s.outCopyBytes[o] == 0) continue;
      ACL_CHECK(api_, aclrtMemcpyAsync, s.hostOut[o], info.outputs[o].bufferBytes, s.devOut[o],
                s.outCopyBytes[o], ACL_MEMCPY_DEVICE_TO_HOST, s.stream);
    }
    ACL_CHECK(api_, aclrtRecordEvent, s.evOut, s.stream);
  } catch (const FailureException &e) {
    Fail(s, e.failure());
    // Whatever was already enqueued may still read or write this slot: fence the stream so the
    // slot is recycled (and the next execute chained) only after the device is done with it.
    const bool fenced = api_.aclrtRecordEvent(s.evExec, s.stream) == ACL_SUCCESS &&
                        api_.aclrtRecordEvent(s.evOut, s.stream) == ACL_SUCCESS;
    if (!fenced) {
      TakeRecentErrMsg(api_);
      api_.aclrtSynchronizeStream(s.stream);
      TakeRecentErrMsg(api_);
      s.done = true;
      s.doneAt = Clock::now();
    }
  }
}

void ModelCore::MarkDone(Slot &s, aclError rc, const char *api) {
  s.done = true;
  s.doneAt = Clock::now();
  if (rc != ACL_SUCCESS) {
    Failure f;
    f.kind = "acl";
    f.aclCode = rc;
    f.api = api;
    f.aclRecentMsg = TakeRecentErrMsg(api_);
    f.message = std::string(api) + " reported " + std::to_string(rc) + " " + AclErrorName(rc) +
                " for this batch" + (f.aclRecentMsg.empty() ? "" : ": " + f.aclRecentMsg);
    Fail(s, f);
  }
}

bool ModelCore::Poll(int slotIndex) {
  Slot &s = slots_[static_cast<size_t>(slotIndex)];
  if (s.done) return true;
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  const aclError rc = api_.aclrtQueryEventStatus(s.evOut, &status);
  if (rc != ACL_SUCCESS) {
    MarkDone(s, rc, "aclrtQueryEventStatus");
  } else if (status == ACL_EVENT_RECORDED_STATUS_COMPLETE) {
    MarkDone(s, ACL_SUCCESS, "");
  }
  return s.done;
}

void ModelCore::Wait(int slotIndex, int32_t timeoutMs) {
  Slot &s = slots_[static_cast<size_t>(slotIndex)];
  if (s.done || api_.aclrtSynchronizeEventWithTimeout == nullptr) return;
  const aclError rc = api_.aclrtSynchronizeEventWithTimeout(s.evOut, timeoutMs);
  if (rc == ACL_SUCCESS) {
    MarkDone(s, ACL_SUCCESS, "");
  } else if (IsWaitTimeout(rc)) {
    TakeRecentErrMsg(api_);  // a wait that timed out is not an error; clear the thread's text
  } else {
    MarkDone(s, rc, "aclrtSynchronizeEventWithTimeout");
  }
}

void ModelCore::FillTimings(Slot &s, ExecJob *job, Clock::time_point prevDoneAt,
                            double hostCopyOutMs) {
  float inMs = 0, execMs = 0, outMs = 0;
  const bool timed =
      api_.aclrtEventElapsedTime != nullptr &&
      api_.aclrtEventElapsedTime(&inMs, s.evStart, s.evIn) == ACL_SUCCESS &&
      api_.aclrtEventElapsedTime(&execMs, s.evExecStart, s.evExec) == ACL_SUCCESS &&
      api_.aclrtEventElapsedTime(&outMs, s.evExec, s.evOut) == ACL_SUCCESS;
  if (timed) {
    job->copyInMs = s.hostCopyInMs + std::max(0.0f, inMs);
    job->executeMs = std::max(0.0f, execMs);
    job->copyOutMs = std::max(0.0f, outMs) + hostCopyOutMs;
  } else {
    // Without device timestamps: the device-side span, from when this batch could start.
    TakeRecentErrMsg(api_);
    job->copyInMs = s.hostCopyInMs;
    job->executeMs = MsBetween(std::max(s.enqueuedAt, prevDoneAt), s.doneAt);
    job->copyOutMs = hostCopyOutMs;
  }
}

ExecJob *ModelCore::Finish(int slotIndex, Clock::time_point prevDoneAt) {
  Slot &s = slots_[static_cast<size_t>(slotIndex)];
  ExecJob *job = s.job;
  // The stream is idle, so this returns at once; it surfaces an asynchronous device failure of
  // this batch (e.g. a failed kernel), which event waits do not report.
  const aclError rc = api_.aclrtSynchronizeStream(s.stream);
  if (rc != ACL_SUCCESS) MarkDone(s, rc, "aclrtSynchronizeStream");
  const auto t0 = Clock::now();
  if (!job->failed) {
    for (size_t o = 0; o < info.outputs.size(); ++o) {
      const TensorInfo &t = info.outputs[o];
      ExecOutput out;
      out.dims = info.dynamic == DynamicKind::Range || setsTensorDesc_ ? ReadOutputDims(s, o, true)
                                                                       : s.outDims[o];
      out.bytes = ElementCount(out.dims) * t.elemBytes;
      if (out.bytes > t.bufferBytes) {
        Failure f;
        f.kind = "internal";
        f.message = "output " + t.name + " reports dims " + DimsText(out.dims) +
                    " larger than its buffer of " + std::to_string(t.bufferBytes) + " bytes";
        Fail(s, f);
        break;
      }
      out.data = static_cast<uint8_t *>(std::malloc(out.bytes > 0 ? out.bytes : 1));
      if (out.bytes > 0) std::memcpy(out.data, s.hostOut[o], out.bytes);
      job->outputs.push_back(std::move(out));
    }
  }
  const auto end = Clock::now();
  if (!job->failed) FillTimings(s, job, prevDoneAt, MsBetween(t0, end));
  job->totalMs = MsBetween(job->submittedAt, end);
  job->overran = job->timeoutMs > 0 && job->totalMs > job->timeoutMs;
  s.job = nullptr;
  --inflight_;
  return job;
}

}  // namespace npufleet
