// The ACL surface the binding uses, declared locally (no CANN headers at build time).
// Signatures and constant values follow the public ACL headers as summarised in
// reference/acl-api.md; every call goes through the one function table `AclApi`, filled by dlsym
// from whichever library acl_loader.cc resolved (real libascendcl.so or the bundled simulator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace npufleet {

using aclError = int;
using aclrtStream = void *;
using aclrtEvent = void *;
using aclrtContext = void *;
struct aclDataBuffer;
struct aclTensorDesc;
struct aclmdlDataset;
struct aclmdlDesc;

// aclDataType (acl_base.h)
enum aclDataType : int {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
};

// aclFormat (acl_base.h)
enum aclFormat : int { ACL_FORMAT_UNDEFINED = -1, ACL_FORMAT_NCHW = 0, ACL_FORMAT_ND = 2 };

// acl_rt.h enums (implicit values from 0)
enum aclrtMemcpyKind : int {
  ACL_MEMCPY_HOST_TO_HOST = 0,
  ACL_MEMCPY_HOST_TO_DEVICE = 1,
  ACL_MEMCPY_DEVICE_TO_HOST = 2,
  ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
};
enum aclrtMemMallocPolicy : int { ACL_MEM_MALLOC_HUGE_FIRST = 0, ACL_MEM_MALLOC_NORMAL_ONLY = 2 };
enum aclrtMemAttr : int { ACL_DDR_MEM = 0, ACL_HBM_MEM = 1 };
enum aclrtEventRecordedStatus : int {
  ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
  ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
};

// acl_mdl.h
constexpr size_t ACL_MAX_DIM_CNT = 128;
constexpr size_t ACL_MAX_TENSOR_NAME_LEN = 128;
constexpr size_t ACL_MAX_BATCH_NUM = 128;
constexpr const char *ACL_DYNAMIC_TENSOR_NAME = "ascend_mbatch_shape_data";

struct aclmdlIODims {
  char name[ACL_MAX_TENSOR_NAME_LEN];
  size_t dimCount;
  int64_t dims[ACL_MAX_DIM_CNT];
};
struct aclmdlBatch {
  size_t batchCount;
  uint64_t batch[ACL_MAX_BATCH_NUM];
};

// Error codes the binding branches on (full symbolic table in acl_errors.cc).
constexpr aclError ACL_SUCCESS = 0;
constexpr aclError ACL_ERROR_REPEAT_INITIALIZE = 100002;
constexpr aclError ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046;
constexpr aclError ACL_ERROR_RT_EVENT_SYNC_TIMEOUT = 507047;

// X-macro: (return type, name, parameter list). Required symbols must all resolve.
#define NPUFLEET_ACL_REQUIRED(X)                                                                   \
  X(aclError, aclInit, (const char *configPath))                                                   \
  X(aclError, aclFinalize, ())                                                                     \
  X(const char *, aclGetRecentErrMsg, ())                                                          \
  X(size_t, aclDataTypeSize, (aclDataType dataType))                                               \
  X(aclError, aclrtGetDeviceCount, (uint32_t * count))                                             \
  X(aclError, aclrtSetDevice, (int32_t deviceId))                                                  \
  X(aclError, aclrtResetDevice, (int32_t deviceId))                                                \
  X(aclError, aclrtCreateContext, (aclrtContext * context, int32_t deviceId))                      \
  X(aclError, aclrtDestroyContext, (aclrtContext context))                                         \
  X(aclError, aclrtSetCurrentContext, (aclrtContext context))                                      \
  X(aclError, aclrtCreateStream, (aclrtStream * stream))                                           \
  X(aclError, aclrtDestroyStream, (aclrtStream stream))                                            \
  X(aclError, aclrtSynchronizeStream, (aclrtStream stream))                                        \
  X(aclError, aclrtGetMemInfo, (aclrtMemAttr attr, size_t * free, size_t * total))                 \
  X(aclError, aclrtMalloc, (void **devPtr, size_t size, aclrtMemMallocPolicy policy))              \
  X(aclError, aclrtFree, (void *devPtr))                                                           \
  X(aclError, aclrtMallocHost, (void **hostPtr, size_t size))                                      \
  X(aclError, aclrtFreeHost, (void *hostPtr))                                                      \
  X(aclError, aclrtMemcpy,                                                                         \
    (void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind))              \
  X(aclError, aclrtMemcpyAsync,                                                                    \
    (void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,               \
     aclrtStream stream))                                                                          \
  X(aclError, aclrtCreateEvent, (aclrtEvent * event))                                              \
  X(aclError, aclrtDestroyEvent, (aclrtEvent event))                                               \
  X(aclError, aclrtRecordEvent, (aclrtEvent event, aclrtStream stream))                            \
  X(aclError, aclrtStreamWaitEvent, (aclrtStream stream, aclrtEvent event))                        \
  X(aclError, aclrtSynchronizeEvent, (aclrtEvent event))                                           \
  X(aclError, aclrtQueryEventStatus, (aclrtEvent event, aclrtEventRecordedStatus * status))        \
  X(aclError, aclmdlLoadFromFile, (const char *modelPath, uint32_t *modelId))                      \
  X(aclError, aclmdlUnload, (uint32_t modelId))                                                    \
  X(aclmdlDesc *, aclmdlCreateDesc, ())                                                            \
  X(aclError, aclmdlDestroyDesc, (aclmdlDesc * modelDesc))                                         \
  X(aclError, aclmdlGetDesc, (aclmdlDesc * modelDesc, uint32_t modelId))                           \
  X(size_t, aclmdlGetNumInputs, (aclmdlDesc * modelDesc))                                          \
  X(size_t, aclmdlGetNumOutputs, (aclmdlDesc * modelDesc))                                         \
  X(size_t, aclmdlGetInputSizeByIndex, (aclmdlDesc * modelDesc, size_t index))                     \
  X(size_t, aclmdlGetOutputSizeByIndex, (aclmdlDesc * modelDesc, size_t index))                    \
  X(aclError, aclmdlGetInputDims, (const aclmdlDesc *modelDesc, size_t index, aclmdlIODims *dims)) \
  X(aclError, aclmdlGetOutputDims,                                                                 \
    (const aclmdlDesc *modelDesc, size_t index, aclmdlIODims *dims))                               \
  X(aclDataType, aclmdlGetInputDataType, (const aclmdlDesc *modelDesc, size_t index))              \
  X(aclDataType, aclmdlGetOutputDataType, (const aclmdlDesc *modelDesc, size_t index))             \
  X(const char *, aclmdlGetInputNameByIndex, (const aclmdlDesc *modelDesc, size_t index))          \
  X(const char *, aclmdlGetOutputNameByIndex, (const aclmdlDesc *modelDesc, size_t index))         \
  X(aclError, aclmdlGetDynamicBatch, (const aclmdlDesc *modelDesc, aclmdlBatch *batch))            \
  X(aclError, aclmdlSetDynamicBatchSize,                                                           \
    (uint32_t modelId, aclmdlDataset * dataset, size_t index, uint64_t batchSize))                 \
  X(aclmdlDataset *, aclmdlCreateDataset, ())                                                      \
  X(aclError, aclmdlDestroyDataset, (const aclmdlDataset *dataset))                                \
  X(aclError, aclmdlAddDatasetBuffer, (aclmdlDataset * dataset, aclDataBuffer *dataBuffer))        \
  X(aclDataBuffer *, aclCreateDataBuffer, (void *data, size_t size))                               \
  X(aclError, aclDestroyDataBuffer, (const aclDataBuffer *dataBuffer))                             \
  X(aclError, aclmdlExecuteAsync,                                                                  \
    (uint32_t modelId, const aclmdlDataset *input, aclmdlDataset *output, aclrtStream stream))

// Present in most (not all) ACL versions, or simulator-only; checked for nullptr before use.
#define NPUFLEET_ACL_OPTIONAL(X)                                                                   \
  X(aclError, aclrtSynchronizeEventWithTimeout, (aclrtEvent event, int32_t timeout))               \
  X(aclError, aclmdlGetCurOutputDims,                                                              \
    (const aclmdlDesc *modelDesc, size_t index, aclmdlIODims *dims))                               \
  X(aclError, aclmdlSetDatasetTensorDesc,                                                          \
    (aclmdlDataset * dataset, aclTensorDesc * tensorDesc, size_t index))                           \
  X(aclTensorDesc *, aclmdlGetDatasetTensorDesc, (const aclmdlDataset *dataset, size_t index))     \
  X(aclFormat, aclmdlGetInputFormat, (const aclmdlDesc *modelDesc, size_t index))                  \
  X(aclTensorDesc *, aclCreateTensorDesc,                                                          \
    (aclDataType dataType, int numDims, const int64_t *dims, aclFormat format))                    \
  X(void, aclDestroyTensorDesc, (const aclTensorDesc *desc))                                       \
  X(size_t, aclGetTensorDescNumDims, (const aclTensorDesc *desc))                                  \
  X(aclError, aclGetTensorDescDimV2, (const aclTensorDesc *desc, size_t index, int64_t *dimSize)) \
  X(aclError, aclrtEventElapsedTime, (float *ms, aclrtEvent startEvent, aclrtEvent endEvent))      \
  X(aclError, aclsimSetNextLoadBatchGears, (const uint64_t *gears, size_t count))

struct AclApi {
#define NPUFLEET_ACL_FIELD(ret, name, params) ret(*name) params = nullptr;
  NPUFLEET_ACL_REQUIRED(NPUFLEET_ACL_FIELD)
  NPUFLEET_ACL_OPTIONAL(NPUFLEET_ACL_FIELD)
#undef NPUFLEET_ACL_FIELD
};

// Symbolic name for an aclError value ("ACL_ERROR_RT_MEMORY_ALLOCATION"), or "ACL_ERROR_UNKNOWN".
const char *AclErrorName(aclError code);

}  // namespace npufleet
