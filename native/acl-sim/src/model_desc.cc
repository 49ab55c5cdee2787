// aclmdlDesc: a loaded model's inputs and outputs (names, types, formats, dims, sizes), its
// batch gears and dims ranges, current output dims, and aclmdlSetDynamicBatchSize.
#include <algorithm>
#include <cstring>

#include "model_internal.h"

// Hidden like the ModelInfo it holds (-Wattributes otherwise); it has no exported members.
struct __attribute__((visibility("hidden"))) aclmdlDesc {
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
  // Until an execution reports actual shapes, GetCurOutputDims derives them from the gear; with
  // the `curdimsatrun` fault on the model's device only executions update them.
  for (const Fault &f : rtConfig().faults) {
    if (f.kind == Fault::CURDIMSATRUN && (f.device < 0 || f.device == m->dev)) return ACL_SUCCESS;
  }
  std::lock_guard<std::mutex> lk(m->curMu);
  for (size_t i = 0; i < info.outputs.size(); ++i) {
    const IODesc &o = info.outputs[i];
    std::vector<int64_t> dims = o.dims;
    for (size_t k = 0; k < dims.size(); ++k) {
      if (dims[k] >= 0) continue;
      if (o.perBatch[k] > 0) {
        dims[k] = o.perBatch[k] * int64_t(batchSize);
      } else if (batchSize == info.maxBatch && k < o.atMaxBatch.size()) {
        // The validation run at the largest gear gave this dim (with one gear, or gears up to 1,
        // batch-driven dims cannot be told from fixed ones, so perBatch is 0).
        dims[k] = o.atMaxBatch[k];
      }
    }
    m->curOut[i] = dims;
  }
  return ACL_SUCCESS;
  API_END
}
