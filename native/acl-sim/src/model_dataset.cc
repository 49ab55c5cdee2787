// aclmdlDataset, aclDataBuffer and aclTensorDesc: the caller-owned handles that carry a model's
// inputs and outputs and, for range-dynamic models, their actual shapes.
#include "model_internal.h"

using namespace sim;

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
