#include "model_core.h"

#include <algorithm>
#include <cstring>

#include "model_util.h"

namespace npufleet {

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
    if (api_.aclmdlGetInputFormat != nullptr) {
      const aclFormat f = api_.aclmdlGetInputFormat(desc_, i);
      if (f != ACL_FORMAT_UNDEFINED) t.format = f;
    }
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
      if (!TensorBytes(t.maxDims, t.elemBytes, &t.bufferBytes)) {
        ThrowKind("invalid", "input " + t.name + " max dims " + DimsText(t.maxDims) +
                                 " overflow a byte size (size_t)");
      }
    }
  }
  // acl-api.md §4: a gear model's outputs are sized for the largest gear by ACL and their dims
  // reported per gear by aclmdlGetCurOutputDims, whichever axes the batch drives (a flattened
  // [batch x 4], a transposed [3, batch]); with range-dynamic inputs they are read after each run.
  const bool learnsGearDims = info.dynamic == DynamicKind::Batch && !setsTensorDesc_ &&
                              api_.aclmdlGetCurOutputDims != nullptr;
  std::vector<size_t> descBytes;  // aclmdlGetOutputSizeByIndex, before maxOutputDims
  std::vector<size_t> needGearDims;  // sized by ACL only: load fails unless their dims are learned
  for (size_t o = 0; o < info.outputs.size(); ++o) {
    TensorInfo &t = info.outputs[o];
    descBytes.push_back(t.bufferBytes);
    auto given = opts.maxOutputDims.find(t.name);
    bool beyondBatch = false;
    for (size_t k = 1; k < t.dims.size(); ++k) beyondBatch = beyondBatch || t.dims[k] < 0;
    if (learnsGearDims && beyondBatch && given == opts.maxOutputDims.end() && t.bufferBytes > 0) {
      t.maxDims = t.dims;
      if (t.maxDims[0] < 0) t.maxDims[0] = maxGear;
      needGearDims.push_back(o);
      continue;
    }
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
      size_t bytes = 0;
      if (!TensorBytes(t.maxDims, t.elemBytes, &bytes)) {
        ThrowKind("invalid", "output " + t.name + " max dims " + DimsText(t.maxDims) +
                                 " overflow a byte size (size_t)");
      }
      t.bufferBytes = std::max(t.bufferBytes, bytes);
    }
  }
  info.slots = opts.slots;
  slots_.resize(static_cast<size_t>(opts.slots));
  for (auto &s : slots_) AllocateSlot(s, mbatchBytes);
  if (learnsGearDims) LearnGearOutputDims(descBytes);
  for (size_t o : needGearDims) {
    const TensorInfo &t = info.outputs[o];
    if (t.dimsByGear.empty()) {
      ThrowKind("invalid", "output " + t.name + " " + DimsText(t.dims) +
                               " has a dynamic non-batch dimension that aclmdlGetCurOutputDims did "
                               "not report for every gear: pass maxOutputDims." + t.name +
                               " to size its buffers");
    }
  }

  size_t freeAfter = 0;
  ACL_CHECK(api_, aclrtGetMemInfo, ACL_HBM_MEM, &freeAfter, &total);
  info.deviceMemoryBytes =
      freeBefore > freeAfter ? static_cast<int64_t>(freeBefore - freeAfter) : 0;
  loaded = true;
}

// The current output dims are the model's, not an execution's: read while batches of other gears
// run on the other slot they may describe another batch (f6db680, reverted in a242115: 3 runs in
// 6 got another gear's output length). So each gear's dims are read here, serially, before the
// model serves, and every batch is sized from this table. Per gear: the setter (on slot 0's
// dataset, idle until Load returns), then aclmdlGetCurOutputDims. A library that updates them at
// the setter (acl-api.md §4, and the simulator) is read with no execution; one that updates them
// only when an execution runs shows it by dims that are not all known or do not change with the
// gear, and is then asked again after one synchronous execute per gear on zeroed inputs.
void ModelCore::LearnGearOutputDims(const std::vector<size_t> &descBytes) {
  std::vector<size_t> outs;
  for (size_t o = 0; o < info.outputs.size(); ++o) {
    if (descBytes[o] > 0) outs.push_back(o);  // 0: data-dependent dims, read after each run
  }
  if (outs.empty() || slots_.empty()) return;
  Slot &s = slots_.front();
  auto io = std::make_unique<aclmdlIODims>();
  auto fits = [&](const TensorInfo &t, const std::vector<int64_t> &d) {
    if (d.size() != t.dims.size()) return false;
    for (size_t k = 0; k < d.size(); ++k) {
      if (d[k] < 0 || (t.dims[k] >= 0 && d[k] != t.dims[k])) return false;
    }
    size_t bytes = 0;
    return TensorBytes(d, t.elemBytes, &bytes) && bytes <= t.bufferBytes;
  };
  using Table = std::vector<std::vector<std::vector<int64_t>>>;  // [outs index][gear index]
  // false when an execute failed (nothing learned by that pass)
  auto pass = [&](bool execute, Table &table, std::vector<bool> &valid) {
    table.assign(outs.size(), std::vector<std::vector<int64_t>>(info.gears.size()));
    valid.assign(outs.size(), true);
    for (size_t g = 0; g < info.gears.size(); ++g) {
      ACL_CHECK(api_, aclmdlSetDynamicBatchSize, info.modelId, s.inDs, *mbatchIndex_, info.gears[g]);
      if (execute) {
        aclError rc = api_.aclmdlExecuteAsync(info.modelId, s.inDs, s.outDs, s.stream);
        const aclError sync = api_.aclrtSynchronizeStream(s.stream);
        if (rc == ACL_SUCCESS) rc = sync;
        if (rc != ACL_SUCCESS) {
          TakeRecentErrMsg(api_);
          return false;
        }
      }
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!valid[i]) continue;
        const TensorInfo &t = info.outputs[outs[i]];
        *io = {};
        if (api_.aclmdlGetCurOutputDims(desc_, t.aclIndex, io.get()) != ACL_SUCCESS) {
          TakeRecentErrMsg(api_);
          valid[i] = false;
          continue;
        }
        std::vector<int64_t> d(io->dims, io->dims + std::min(io->dimCount, ACL_MAX_DIM_CNT));
        valid[i] = fits(t, d);
        // A dim the gear drives differs between two gears; the same dims at the previous gear
        // mean the setter did not update them.
        const bool gearDriven = std::any_of(t.dims.begin(), t.dims.end(), [](int64_t v) { return v < 0; });
        if (!execute && gearDriven && g > 0 && d == table[i][g - 1]) valid[i] = false;
        table[i][g] = std::move(d);
      }
    }
    return true;
  };
  Table table;
  std::vector<bool> valid;
  pass(false, table, valid);
  if (std::find(valid.begin(), valid.end(), false) != valid.end()) {
    for (size_t k = 0; k < info.inputs.size(); ++k) {
      const size_t bytes = info.inputs[k].bufferBytes;
      if (bytes == 0) continue;
      std::memset(s.hostIn[k], 0, bytes);
      ACL_CHECK(api_, aclrtMemcpy, s.devIn[k], bytes, s.hostIn[k], bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    }
    Table ran;
    std::vector<bool> ranValid;
    if (pass(true, ran, ranValid)) {
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!ranValid[i]) continue;
        table[i] = std::move(ran[i]);
        valid[i] = true;
      }
    }
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!valid[i]) continue;
    TensorInfo &t = info.outputs[outs[i]];
    t.dimsByGear = std::move(table[i]);
    t.maxDims = t.dimsByGear.back();  // gears are sorted: the largest
  }
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

}  // namespace npufleet
