// ACL subset declarations for the CPU simulator. Values and signatures follow
// shared/reference/acl-api.md (ACL 1.10 / 1.17 headers); written from that spec, not copied.
#pragma once
#include <cstddef>
#include <cstdint>

#define ACLSIM_API extern "C" __attribute__((visibility("default")))

typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef int aclError;
typedef uint16_t aclFloat16;
typedef struct aclDataBuffer aclDataBuffer;
typedef struct aclTensorDesc aclTensorDesc;
typedef struct aclmdlDataset aclmdlDataset;
typedef struct aclmdlDesc aclmdlDesc;
typedef struct aclmdlExecConfigHandle aclmdlExecConfigHandle;
typedef void (*aclrtCallback)(void *userData);
typedef void (*aclrtHostFunc)(void *args);

#define ACL_MAX_DIM_CNT 128
#define ACL_MAX_TENSOR_NAME_LEN 128
#define ACL_MAX_BATCH_NUM 128
#define ACL_MAX_HW_NUM 128
#define ACL_DIM_ENDPOINTS 2
#define ACL_DYNAMIC_TENSOR_NAME "ascend_mbatch_shape_data"

typedef struct aclmdlIODims {
  char name[ACL_MAX_TENSOR_NAME_LEN];
  size_t dimCount;
  int64_t dims[ACL_MAX_DIM_CNT];
} aclmdlIODims;
typedef struct aclmdlIODimsRange {
  size_t rangeCount;
  int64_t range[ACL_MAX_DIM_CNT][ACL_DIM_ENDPOINTS];
} aclmdlIODimsRange;
typedef struct aclmdlBatch {
  size_t batchCount;
  uint64_t batch[ACL_MAX_BATCH_NUM];
} aclmdlBatch;
typedef struct aclmdlHW {
  size_t hwCount;
  uint64_t hw[ACL_MAX_HW_NUM][2];
} aclmdlHW;

typedef enum {
  ACL_MDL_STREAM_SYNC_TIMEOUT = 0,
  ACL_MDL_EVENT_SYNC_TIMEOUT,
  ACL_MDL_WORK_ADDR_PTR,
  ACL_MDL_WORK_SIZET,
  ACL_MDL_MPAIMID_SIZET,
  ACL_MDL_AICQOS_SIZET,
  ACL_MDL_AICOST_SIZET,
  ACL_MDL_MEC_TIMETHR_SIZET
} aclmdlExecConfigAttr;

typedef enum {
  ACL_DT_UNDEFINED = -1, ACL_FLOAT = 0, ACL_FLOAT16 = 1, ACL_INT8 = 2, ACL_INT32 = 3, ACL_UINT8 = 4,
  ACL_INT16 = 6, ACL_UINT16 = 7, ACL_UINT32 = 8, ACL_INT64 = 9, ACL_UINT64 = 10, ACL_DOUBLE = 11,
  ACL_BOOL = 12, ACL_STRING = 13, ACL_COMPLEX64 = 16, ACL_COMPLEX128 = 17, ACL_BF16 = 27,
  ACL_INT4 = 29, ACL_UINT1 = 30, ACL_COMPLEX32 = 33
} aclDataType;

typedef enum {
  ACL_FORMAT_UNDEFINED = -1, ACL_FORMAT_NCHW = 0, ACL_FORMAT_NHWC = 1, ACL_FORMAT_ND = 2,
  ACL_FORMAT_NC1HWC0 = 3, ACL_FORMAT_FRACTAL_Z = 4, ACL_FORMAT_NC1HWC0_C04 = 12,
  ACL_FORMAT_HWCN = 16, ACL_FORMAT_NDHWC = 27, ACL_FORMAT_FRACTAL_NZ = 29, ACL_FORMAT_NCDHW = 30,
  ACL_FORMAT_NDC1HWC0 = 32, ACL_FRACTAL_Z_3D = 33, ACL_FORMAT_NC = 35, ACL_FORMAT_NCL = 47
} aclFormat;

typedef enum { ACL_DEVICE = 0, ACL_HOST = 1 } aclrtRunMode;
typedef enum {
  ACL_MEMCPY_HOST_TO_HOST = 0, ACL_MEMCPY_HOST_TO_DEVICE = 1, ACL_MEMCPY_DEVICE_TO_HOST = 2,
  ACL_MEMCPY_DEVICE_TO_DEVICE = 3, ACL_MEMCPY_DEFAULT = 4
} aclrtMemcpyKind;
typedef enum {
  ACL_MEM_MALLOC_HUGE_FIRST = 0, ACL_MEM_MALLOC_HUGE_ONLY = 1, ACL_MEM_MALLOC_NORMAL_ONLY = 2,
  ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3, ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
  ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5, ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
  ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000
} aclrtMemMallocPolicy;
typedef enum {
  ACL_DDR_MEM = 0, ACL_HBM_MEM, ACL_DDR_MEM_HUGE, ACL_DDR_MEM_NORMAL, ACL_HBM_MEM_HUGE,
  ACL_HBM_MEM_NORMAL
} aclrtMemAttr;
typedef enum { ACL_CALLBACK_NO_BLOCK = 0, ACL_CALLBACK_BLOCK = 1 } aclrtCallbackBlockType;
typedef enum {
  ACL_EVENT_STATUS_COMPLETE = 0, ACL_EVENT_STATUS_NOT_READY = 1, ACL_EVENT_STATUS_RESERVED = 2
} aclrtEventStatus;
typedef enum {
  ACL_EVENT_RECORDED_STATUS_NOT_READY = 0, ACL_EVENT_RECORDED_STATUS_COMPLETE = 1
} aclrtEventRecordedStatus;
typedef enum {
  ACL_STREAM_STATUS_COMPLETE = 0, ACL_STREAM_STATUS_NOT_READY = 1,
  ACL_STREAM_STATUS_RESERVED = 0xFFFF
} aclrtStreamStatus;

#define ACL_EVENT_SYNC 0x1u
#define ACL_EVENT_CAPTURE_STREAM_PROGRESS 0x2u
#define ACL_EVENT_TIME_LINE 0x8u
#define ACL_CONTINUE_ON_FAILURE 0x0u
#define ACL_STOP_ON_FAILURE 0x1u

// ---- error codes (acl-api.md §1.6) ----
static const int ACL_SUCCESS = 0;
static const int ACL_ERROR_NONE = 0;
static const int ACL_ERROR_INVALID_PARAM = 100000;
static const int ACL_ERROR_UNINITIALIZE = 100001;
static const int ACL_ERROR_REPEAT_INITIALIZE = 100002;
static const int ACL_ERROR_INVALID_FILE = 100003;
static const int ACL_ERROR_INVALID_FILE_SIZE = 100005;
static const int ACL_ERROR_PARSE_FILE = 100006;
static const int ACL_ERROR_INVALID_MODEL_ID = 100011;
static const int ACL_ERROR_DESERIALIZE_MODEL = 100012;
static const int ACL_ERROR_PARSE_MODEL = 100013;
static const int ACL_ERROR_READ_MODEL_FAILURE = 100014;
static const int ACL_ERROR_MODEL_SIZE_INVALID = 100015;
static const int ACL_ERROR_MODEL_MISSING_ATTR = 100016;
static const int ACL_ERROR_MODEL_INPUT_NOT_MATCH = 100017;
static const int ACL_ERROR_MODEL_OUTPUT_NOT_MATCH = 100018;
static const int ACL_ERROR_MODEL_NOT_DYNAMIC = 100019;
static const int ACL_ERROR_UNSUPPORTED_DATA_TYPE = 100026;
static const int ACL_ERROR_FORMAT_NOT_MATCH = 100027;
static const int ACL_ERROR_REPEAT_SUBSCRIBE = 100033;
static const int ACL_ERROR_STREAM_NOT_SUBSCRIBE = 100034;
static const int ACL_ERROR_THREAD_NOT_SUBSCRIBE = 100035;
static const int ACL_ERROR_WAIT_CALLBACK_TIMEOUT = 100036;
static const int ACL_ERROR_REPEAT_FINALIZE = 100037;
static const int ACL_ERROR_BAD_ALLOC = 200000;
static const int ACL_ERROR_API_NOT_SUPPORT = 200001;
static const int ACL_ERROR_INVALID_DEVICE = 200002;
static const int ACL_ERROR_INVALID_RESOURCE_HANDLE = 200005;
static const int ACL_ERROR_FEATURE_UNSUPPORTED = 200006;
static const int ACL_ERROR_INTERNAL_ERROR = 500000;
static const int ACL_ERROR_FAILURE = 500001;

#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_INVALID_DEVICEID 107001
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_STREAM_CONTEXT 107003
#define ACL_ERROR_RT_MODEL_CONTEXT 107004
#define ACL_ERROR_RT_STREAM_SUBSCRIBE 107011
#define ACL_ERROR_RT_THREAD_SUBSCRIBE 107012
#define ACL_ERROR_RT_STREAM_NO_CB_REG 107015
#define ACL_ERROR_RT_WAIT_TIMEOUT 107019
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001
#define ACL_ERROR_RT_MEMORY_FREE 207002
#define ACL_ERROR_RT_INTERNAL_ERROR 507000
#define ACL_ERROR_RT_MODEL_EXECUTE 507011
#define ACL_ERROR_RT_REPORT_TIMEOUT 507012
#define ACL_ERROR_RT_STREAM_SYNC_TIMEOUT 507046
#define ACL_ERROR_RT_EVENT_SYNC_TIMEOUT 507047

static const uint32_t ACL_ERROR_GE_PARAM_INVALID = 145000;
static const uint32_t ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID = 145002;
static const uint32_t ACL_ERROR_GE_EXEC_MODEL_ID_INVALID = 145003;
static const uint32_t ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID = 145013;
static const uint32_t ACL_ERROR_GE_SHAPE_INVALID = 145021;
static const uint32_t ACL_ERROR_GE_MEMORY_ALLOCATION = 245000;
static const uint32_t ACL_ERROR_GE_LOAD_MODEL = 545001;

// ---- exported functions ----
ACLSIM_API aclError aclInit(const char *configPath);
ACLSIM_API aclError aclFinalize();
ACLSIM_API aclError aclFinalizeReference(uint64_t *refCount);
ACLSIM_API const char *aclGetRecentErrMsg();
ACLSIM_API size_t aclDataTypeSize(aclDataType dataType);

ACLSIM_API aclError aclrtSetDevice(int32_t deviceId);
ACLSIM_API aclError aclrtResetDevice(int32_t deviceId);
ACLSIM_API aclError aclrtResetDeviceForce(int32_t deviceId);
ACLSIM_API aclError aclrtGetDevice(int32_t *deviceId);
ACLSIM_API aclError aclrtGetDeviceCount(uint32_t *count);
ACLSIM_API aclError aclrtGetRunMode(aclrtRunMode *runMode);
ACLSIM_API aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
ACLSIM_API aclError aclrtDestroyContext(aclrtContext context);
ACLSIM_API aclError aclrtSetCurrentContext(aclrtContext context);
ACLSIM_API aclError aclrtGetCurrentContext(aclrtContext *context);
ACLSIM_API aclError aclrtCreateStream(aclrtStream *stream);
ACLSIM_API aclError aclrtDestroyStream(aclrtStream stream);
ACLSIM_API aclError aclrtDestroyStreamForce(aclrtStream stream);
ACLSIM_API aclError aclrtSynchronizeStream(aclrtStream stream);
ACLSIM_API aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);
ACLSIM_API aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status);
ACLSIM_API aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode);
ACLSIM_API aclError aclrtSynchronizeDevice();
ACLSIM_API aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total);
ACLSIM_API aclError aclrtSetOpExecuteTimeOut(uint32_t timeout);
ACLSIM_API aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion,
                                    int32_t *patchVersion);

ACLSIM_API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
ACLSIM_API aclError aclrtMallocHost(void **hostPtr, size_t size);
ACLSIM_API aclError aclrtFree(void *devPtr);
ACLSIM_API aclError aclrtFreeHost(void *hostPtr);
ACLSIM_API aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
                                aclrtMemcpyKind kind);
ACLSIM_API aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
                                     aclrtMemcpyKind kind, aclrtStream stream);
ACLSIM_API aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);
ACLSIM_API aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
                                     aclrtStream stream);

ACLSIM_API aclError aclrtSubscribeReport(uint64_t threadId, aclrtStream stream);
ACLSIM_API aclError aclrtLaunchCallback(aclrtCallback fn, void *userData,
                                        aclrtCallbackBlockType blockType, aclrtStream stream);
ACLSIM_API aclError aclrtProcessReport(int32_t timeout);
ACLSIM_API aclError aclrtUnSubscribeReport(uint64_t threadId, aclrtStream stream);
ACLSIM_API aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void *args);
ACLSIM_API aclError aclrtCreateEvent(aclrtEvent *event);
ACLSIM_API aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag);
ACLSIM_API aclError aclrtDestroyEvent(aclrtEvent event);
ACLSIM_API aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
ACLSIM_API aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
ACLSIM_API aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status);
ACLSIM_API aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status);
ACLSIM_API aclError aclrtSynchronizeEvent(aclrtEvent event);
ACLSIM_API aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout);
ACLSIM_API aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);
ACLSIM_API aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent);

ACLSIM_API aclError aclmdlLoadFromFile(const char *modelPath, uint32_t *modelId);
ACLSIM_API aclError aclmdlLoadFromMem(const void *model, size_t modelSize, uint32_t *modelId);
ACLSIM_API aclError aclmdlQuerySize(const char *fileName, size_t *workSize, size_t *weightSize);
ACLSIM_API aclError aclmdlUnload(uint32_t modelId);
ACLSIM_API aclmdlDesc *aclmdlCreateDesc();
ACLSIM_API aclError aclmdlDestroyDesc(aclmdlDesc *modelDesc);
ACLSIM_API aclError aclmdlGetDesc(aclmdlDesc *modelDesc, uint32_t modelId);
ACLSIM_API size_t aclmdlGetNumInputs(aclmdlDesc *modelDesc);
ACLSIM_API size_t aclmdlGetNumOutputs(aclmdlDesc *modelDesc);
ACLSIM_API size_t aclmdlGetInputSizeByIndex(aclmdlDesc *modelDesc, size_t index);
ACLSIM_API size_t aclmdlGetOutputSizeByIndex(aclmdlDesc *modelDesc, size_t index);
ACLSIM_API aclError aclmdlGetInputDims(const aclmdlDesc *modelDesc, size_t index,
                                       aclmdlIODims *dims);
ACLSIM_API aclError aclmdlGetInputDimsV2(const aclmdlDesc *modelDesc, size_t index,
                                         aclmdlIODims *dims);
ACLSIM_API aclError aclmdlGetOutputDims(const aclmdlDesc *modelDesc, size_t index,
                                        aclmdlIODims *dims);
ACLSIM_API aclError aclmdlGetCurOutputDims(const aclmdlDesc *modelDesc, size_t index,
                                           aclmdlIODims *dims);
ACLSIM_API aclDataType aclmdlGetInputDataType(const aclmdlDesc *modelDesc, size_t index);
ACLSIM_API aclDataType aclmdlGetOutputDataType(const aclmdlDesc *modelDesc, size_t index);
ACLSIM_API aclFormat aclmdlGetInputFormat(const aclmdlDesc *modelDesc, size_t index);
ACLSIM_API aclFormat aclmdlGetOutputFormat(const aclmdlDesc *modelDesc, size_t index);
ACLSIM_API const char *aclmdlGetInputNameByIndex(const aclmdlDesc *modelDesc, size_t index);
ACLSIM_API const char *aclmdlGetOutputNameByIndex(const aclmdlDesc *modelDesc, size_t index);
ACLSIM_API aclError aclmdlGetInputIndexByName(const aclmdlDesc *modelDesc, const char *name,
                                              size_t *index);
ACLSIM_API aclError aclmdlGetOutputIndexByName(const aclmdlDesc *modelDesc, const char *name,
                                               size_t *index);
ACLSIM_API aclError aclmdlGetDynamicBatch(const aclmdlDesc *modelDesc, aclmdlBatch *batch);
ACLSIM_API aclError aclmdlSetDynamicBatchSize(uint32_t modelId, aclmdlDataset *dataset,
                                              size_t index, uint64_t batchSize);
ACLSIM_API aclError aclmdlGetDynamicHW(const aclmdlDesc *modelDesc, size_t index, aclmdlHW *hw);
ACLSIM_API aclError aclmdlGetInputDynamicGearCount(const aclmdlDesc *modelDesc, size_t index,
                                                   size_t *gearCount);
ACLSIM_API aclError aclmdlGetInputDimsRange(const aclmdlDesc *modelDesc, size_t index,
                                            aclmdlIODimsRange *dimsRange);
ACLSIM_API aclError aclmdlSetDatasetTensorDesc(aclmdlDataset *dataset, aclTensorDesc *tensorDesc,
                                               size_t index);
ACLSIM_API aclTensorDesc *aclmdlGetDatasetTensorDesc(const aclmdlDataset *dataset, size_t index);
ACLSIM_API aclmdlDataset *aclmdlCreateDataset();
ACLSIM_API aclError aclmdlDestroyDataset(const aclmdlDataset *dataset);
ACLSIM_API aclError aclmdlAddDatasetBuffer(aclmdlDataset *dataset, aclDataBuffer *dataBuffer);
ACLSIM_API aclDataBuffer *aclmdlGetDatasetBuffer(const aclmdlDataset *dataset, size_t index);
ACLSIM_API size_t aclmdlGetDatasetNumBuffers(const aclmdlDataset *dataset);
ACLSIM_API aclDataBuffer *aclCreateDataBuffer(void *data, size_t size);
ACLSIM_API aclError aclDestroyDataBuffer(const aclDataBuffer *dataBuffer);
ACLSIM_API aclError aclUpdateDataBuffer(aclDataBuffer *dataBuffer, void *data, size_t size);
ACLSIM_API void *aclGetDataBufferAddr(const aclDataBuffer *dataBuffer);
ACLSIM_API uint32_t aclGetDataBufferSize(const aclDataBuffer *dataBuffer);
ACLSIM_API size_t aclGetDataBufferSizeV2(const aclDataBuffer *dataBuffer);
ACLSIM_API aclTensorDesc *aclCreateTensorDesc(aclDataType dataType, int numDims,
                                              const int64_t *dims, aclFormat format);
ACLSIM_API void aclDestroyTensorDesc(const aclTensorDesc *desc);
ACLSIM_API aclDataType aclGetTensorDescType(const aclTensorDesc *desc);
ACLSIM_API aclFormat aclGetTensorDescFormat(const aclTensorDesc *desc);
ACLSIM_API size_t aclGetTensorDescSize(const aclTensorDesc *desc);
ACLSIM_API size_t aclGetTensorDescElementCount(const aclTensorDesc *desc);
ACLSIM_API size_t aclGetTensorDescNumDims(const aclTensorDesc *desc);
ACLSIM_API aclError aclGetTensorDescDimV2(const aclTensorDesc *desc, size_t index,
                                          int64_t *dimSize);
ACLSIM_API aclError aclmdlExecute(uint32_t modelId, const aclmdlDataset *input,
                                  aclmdlDataset *output);
ACLSIM_API aclError aclmdlExecuteAsync(uint32_t modelId, const aclmdlDataset *input,
                                       aclmdlDataset *output, aclrtStream stream);
ACLSIM_API aclmdlExecConfigHandle *aclmdlCreateExecConfigHandle();
ACLSIM_API aclError aclmdlDestroyExecConfigHandle(const aclmdlExecConfigHandle *handle);
ACLSIM_API aclError aclmdlSetExecConfigOpt(aclmdlExecConfigHandle *handle,
                                           aclmdlExecConfigAttr attr, const void *attrValue,
                                           size_t valueSize);
ACLSIM_API aclError aclmdlExecuteV2(uint32_t modelId, const aclmdlDataset *input,
                                    aclmdlDataset *output, aclrtStream stream,
                                    const aclmdlExecConfigHandle *handle);
ACLSIM_API aclError aclmdlExecuteAsyncV2(uint32_t modelId, const aclmdlDataset *input,
                                         aclmdlDataset *output, aclrtStream stream,
                                         const aclmdlExecConfigHandle *handle);

// ---- simulator-only extensions (absent from the real libascendcl) ----
// Gears for the next aclmdlLoadFromFile/LoadFromMem on the calling thread (consumed by it).
ACLSIM_API aclError aclsimSetNextLoadBatchGears(const uint64_t *gears, size_t count);
// Executions counted so far on a device (for fault-injection tests).
ACLSIM_API aclError aclsimGetExecutionCount(int32_t deviceId, uint64_t *count);
