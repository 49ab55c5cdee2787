// Dynamic-shape model protocols: dynamic batch (gears, aclmdlSetDynamicBatchSize, the
// ascend_mbatch_shape_data input) and range-dynamic inputs (dataset tensor descs).
#include "onnx_builder.h"
#include "test_models.h"

using tb::FLOAT;

void dynamicBatch() {
  const std::string mlp = mlpModel(64, 32, 16, 10);
  uint32_t id = 0;
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  aclmdlDesc *d = aclmdlCreateDesc();
  ACL_OK(aclmdlGetDesc(d, id));
  CHECK(aclmdlGetNumInputs(d) == 2 && aclmdlGetNumOutputs(d) == 1);
  CHECK(std::string(aclmdlGetInputNameByIndex(d, 1)) == ACL_DYNAMIC_TENSOR_NAME);
  CHECK(std::string(aclmdlGetInputNameByIndex(d, 0)) == "input");
  size_t idx = 99;
  ACL_OK(aclmdlGetInputIndexByName(d, ACL_DYNAMIC_TENSOR_NAME, &idx));
  CHECK(idx == 1);
  CHECK_CODE(aclmdlGetInputIndexByName(d, "nope", &idx), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclmdlGetOutputIndexByName(d, "probs", &idx));
  CHECK(idx == 0);
  aclmdlIODims dims;
  ACL_OK(aclmdlGetInputDims(d, 0, &dims));
  CHECK(dims.dimCount == 2 && dims.dims[0] == -1 && dims.dims[1] == 64 && std::string(dims.name) == "input");
  ACL_OK(aclmdlGetOutputDims(d, 0, &dims));
  CHECK(dims.dimCount == 2 && dims.dims[0] == -1 && dims.dims[1] == 10);
  CHECK(aclmdlGetInputSizeByIndex(d, 0) == 32 * 64 * 4);
  CHECK(aclmdlGetInputSizeByIndex(d, 1) == 8);
  CHECK(aclmdlGetOutputSizeByIndex(d, 0) == 32 * 10 * 4);
  CHECK(aclmdlGetInputDataType(d, 0) == ACL_FLOAT && aclmdlGetOutputDataType(d, 0) == ACL_FLOAT);
  CHECK(aclmdlGetInputFormat(d, 0) == ACL_FORMAT_ND);
  aclmdlBatch batch;
  ACL_OK(aclmdlGetDynamicBatch(d, &batch));
  CHECK(batch.batchCount == 6 && batch.batch[0] == 1 && batch.batch[5] == 32);
  aclmdlIODimsRange range;
  ACL_OK(aclmdlGetInputDimsRange(d, 0, &range));
  CHECK(range.rangeCount == 2 && range.range[0][0] == 1 && range.range[0][1] == 32 && range.range[1][0] == 64);
  CHECK_CODE(aclmdlGetInputDims(d, 5, &dims), ACL_ERROR_INVALID_PARAM);

  void *inDev, *mbDev, *outDev;
  ACL_OK(aclrtMalloc(&inDev, aclmdlGetInputSizeByIndex(d, 0), ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtMalloc(&mbDev, 8, ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtMalloc(&outDev, aclmdlGetOutputSizeByIndex(d, 0), ACL_MEM_MALLOC_HUGE_FIRST));
  // aclrtMalloc memory is not cleared (as on a real device): stale heap bytes there can be NaN and
  // make the softmax sum below NaN, so the input gets defined values first.
  const std::vector<float> x = randVec(32 * 64, 89);
  ACL_OK(aclrtMemcpy(inDev, x.size() * 4, x.data(), x.size() * 4, ACL_MEMCPY_HOST_TO_DEVICE));
  aclmdlDataset *in = aclmdlCreateDataset(), *out = aclmdlCreateDataset();
  aclDataBuffer *b0 = aclCreateDataBuffer(inDev, aclmdlGetInputSizeByIndex(d, 0));
  aclDataBuffer *b1 = aclCreateDataBuffer(mbDev, 8);
  aclDataBuffer *b2 = aclCreateDataBuffer(outDev, aclmdlGetOutputSizeByIndex(d, 0));
  ACL_OK(aclmdlAddDatasetBuffer(in, b0));
  CHECK_CODE(aclmdlExecute(id, in, out), ACL_ERROR_MODEL_INPUT_NOT_MATCH);
  ACL_OK(aclmdlAddDatasetBuffer(in, b1));
  CHECK_CODE(aclmdlExecute(id, in, out), ACL_ERROR_MODEL_OUTPUT_NOT_MATCH);
  ACL_OK(aclmdlAddDatasetBuffer(out, b2));
  CHECK_CODE(aclmdlExecute(id, in, out), int(ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID));  // no batch set
  CHECK_CODE(aclmdlSetDynamicBatchSize(id, in, 1, 3), int(ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID));
  const char *m = aclGetRecentErrMsg();
  CHECK(m && std::strstr(m, "{1,2,4,8,16,32}"));
  CHECK_CODE(aclmdlSetDynamicBatchSize(id, in, 0, 4), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclmdlSetDynamicBatchSize(id, in, 1, 4));
  CHECK(*static_cast<uint64_t *>(mbDev) == 4);
  ACL_OK(aclmdlGetCurOutputDims(d, 0, &dims));
  CHECK(dims.dimCount == 2 && dims.dims[0] == 4 && dims.dims[1] == 10);
  ACL_OK(aclmdlExecute(id, in, out));
  float probs[40];
  ACL_OK(aclrtMemcpy(probs, sizeof probs, outDev, sizeof probs, ACL_MEMCPY_DEVICE_TO_HOST));
  float s = 0;
  for (int i = 0; i < 10; ++i) s += probs[i];
  CHECK(std::fabs(s - 1.f) < 1e-5f);
  aclTensorDesc *od = aclmdlGetDatasetTensorDesc(out, 0);
  int64_t d0 = 0;
  CHECK(od && aclGetTensorDescNumDims(od) == 2 && aclGetTensorDescDimV2(od, 0, &d0) == 0 && d0 == 4);
  // Input buffer that is host memory is refused.
  std::vector<float> host(32 * 64);
  ACL_OK(aclUpdateDataBuffer(b0, host.data(), host.size() * 4));
  CHECK_CODE(aclmdlExecute(id, in, out), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclUpdateDataBuffer(b0, inDev, 10));
  CHECK_CODE(aclmdlExecute(id, in, out), ACL_ERROR_INVALID_PARAM);  // too small for batch 4
  ACL_OK(aclUpdateDataBuffer(b0, inDev, aclmdlGetInputSizeByIndex(d, 0)));
  // Executing on another device's context fails.
  ACL_OK(aclrtSetDevice(1));
  CHECK_CODE(aclmdlExecute(id, in, out), ACL_ERROR_RT_MODEL_CONTEXT);
  CHECK_CODE(aclmdlUnload(id), ACL_ERROR_RT_MODEL_CONTEXT);
  ACL_OK(aclrtSetDevice(0));
  ACL_OK(aclmdlUnload(id));
  CHECK_CODE(aclmdlUnload(id), ACL_ERROR_INVALID_MODEL_ID);
  CHECK_CODE(aclmdlExecute(id, in, out), ACL_ERROR_INVALID_MODEL_ID);
  aclDestroyDataBuffer(b0);
  aclDestroyDataBuffer(b1);
  aclDestroyDataBuffer(b2);
  aclmdlDestroyDataset(in);
  aclmdlDestroyDataset(out);
  aclrtFree(inDev);
  aclrtFree(mbDev);
  aclrtFree(outDev);

  // Gears from the extension, consumed by the next load on this thread only.
  const uint64_t gears[] = {3, 1, 5};
  ACL_OK(aclsimSetNextLoadBatchGears(gears, 3));
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  ACL_OK(aclmdlGetDesc(d, id));
  ACL_OK(aclmdlGetDynamicBatch(d, &batch));
  CHECK(batch.batchCount == 3 && batch.batch[0] == 1 && batch.batch[1] == 3 && batch.batch[2] == 5);
  CHECK(aclmdlGetInputSizeByIndex(d, 0) == 5 * 64 * 4);
  ACL_OK(aclmdlUnload(id));
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  ACL_OK(aclmdlGetDesc(d, id));
  ACL_OK(aclmdlGetDynamicBatch(d, &batch));
  CHECK(batch.batchCount == 6);
  ACL_OK(aclmdlUnload(id));
  // A failed load uses the gears up as well.
  ACL_OK(aclsimSetNextLoadBatchGears(gears, 3));
  CHECK_CODE(aclmdlLoadFromMem("junk", 4, &id), ACL_ERROR_DESERIALIZE_MODEL);
  aclGetRecentErrMsg();
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  ACL_OK(aclmdlGetDesc(d, id));
  ACL_OK(aclmdlGetDynamicBatch(d, &batch));
  CHECK(batch.batchCount == 6);
  ACL_OK(aclmdlUnload(id));
  CHECK_CODE(aclsimSetNextLoadBatchGears(gears, 0), ACL_ERROR_INVALID_PARAM);
  const uint64_t dup[] = {2, 2};
  CHECK_CODE(aclsimSetNextLoadBatchGears(dup, 2), ACL_ERROR_INVALID_PARAM);
  RunResult r = runModel(mlp, {randF({3, 64}, 90)}, RunOpts{false, {1, 3, 5}, 3, true, 0});
  CHECK(r.execErr == 0 && !r.outputs.empty() && r.outputs[0].shape == std::vector<int64_t>({3, 10}));

  // A static model has no dynamic batch.
  tb::Model sm;
  sm.input("x", FLOAT, {2, 3});
  sm.node("Relu", {"x"}, {"y"});
  sm.output("y", FLOAT, {2, 3});
  const std::string sb = sm.bytes();
  ACL_OK(aclmdlLoadFromMem(sb.data(), sb.size(), &id));
  ACL_OK(aclmdlGetDesc(d, id));
  CHECK(aclmdlGetNumInputs(d) == 1 && aclmdlGetInputSizeByIndex(d, 0) == 24);
  ACL_OK(aclmdlGetDynamicBatch(d, &batch));
  CHECK(batch.batchCount == 0);
  aclmdlDataset *ds = aclmdlCreateDataset();
  CHECK_CODE(aclmdlSetDynamicBatchSize(id, ds, 0, 1), ACL_ERROR_MODEL_NOT_DYNAMIC);
  aclmdlDestroyDataset(ds);
  ACL_OK(aclmdlUnload(id));
  aclmdlDestroyDesc(d);
}

void rangeDynamic() {
  const std::string text = textModel(13);
  uint32_t id = 0;
  ACL_OK(aclmdlLoadFromMem(text.data(), text.size(), &id));
  aclmdlDesc *d = aclmdlCreateDesc();
  ACL_OK(aclmdlGetDesc(d, id));
  CHECK(aclmdlGetNumInputs(d) == 1);  // no ascend_mbatch_shape_data
  aclmdlIODims dims;
  ACL_OK(aclmdlGetInputDims(d, 0, &dims));
  CHECK(dims.dimCount == 2 && dims.dims[0] == -1 && dims.dims[1] == -1);
  CHECK(aclmdlGetInputSizeByIndex(d, 0) == 0);
  CHECK(aclmdlGetInputDataType(d, 0) == ACL_INT64);
  CHECK(aclmdlGetOutputSizeByIndex(d, 0) == 32 * 4 * 4);
  ACL_OK(aclmdlGetOutputDims(d, 0, &dims));
  CHECK(dims.dimCount == 2 && dims.dims[0] == -1 && dims.dims[1] == 4);
  aclmdlBatch batch;
  ACL_OK(aclmdlGetDynamicBatch(d, &batch));
  CHECK(batch.batchCount == 0);
  RunResult r = runModel(text, {tokens(3, 9, 5)}, RunOpts{false, {}, 0, false, 0});
  CHECK(r.execErr == ACL_ERROR_INVALID_PARAM && r.msg.find("aclmdlSetDatasetTensorDesc") != std::string::npos);
  r = runModel(text, {tokens(3, 9, 5)});
  CHECK(r.execErr == 0 && r.outputs.size() == 1 && r.outputs[0].shape == std::vector<int64_t>({3, 4}));
  // GetCurOutputDims reports the last execution's shape.
  void *inDev, *outDev;
  ACL_OK(aclrtMalloc(&inDev, 2 * 5 * 8, ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtMalloc(&outDev, aclmdlGetOutputSizeByIndex(d, 0), ACL_MEM_MALLOC_HUGE_FIRST));
  HostT tk = tokens(2, 5, 6);
  ACL_OK(aclrtMemcpy(inDev, 80, tk.data.data(), 80, ACL_MEMCPY_HOST_TO_DEVICE));
  aclmdlDataset *in = aclmdlCreateDataset(), *out = aclmdlCreateDataset();
  ACL_OK(aclmdlAddDatasetBuffer(in, aclCreateDataBuffer(inDev, 80)));
  ACL_OK(aclmdlAddDatasetBuffer(out, aclCreateDataBuffer(outDev, aclmdlGetOutputSizeByIndex(d, 0))));
  const int64_t wrongRank[] = {2};
  aclTensorDesc *td = aclCreateTensorDesc(ACL_INT64, 1, wrongRank, ACL_FORMAT_ND);
  ACL_OK(aclmdlSetDatasetTensorDesc(in, td, 0));
  aclDestroyTensorDesc(td);
  CHECK_CODE(aclmdlExecute(id, in, out), ACL_ERROR_INVALID_PARAM);
  const int64_t shp[] = {2, 5};
  td = aclCreateTensorDesc(ACL_FLOAT, 2, shp, ACL_FORMAT_ND);
  ACL_OK(aclmdlSetDatasetTensorDesc(in, td, 0));
  aclDestroyTensorDesc(td);
  CHECK_CODE(aclmdlExecute(id, in, out), ACL_ERROR_INVALID_PARAM);  // wrong dtype
  td = aclCreateTensorDesc(ACL_INT64, 2, shp, ACL_FORMAT_ND);
  CHECK_CODE(aclmdlSetDatasetTensorDesc(in, td, 1), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclmdlSetDatasetTensorDesc(in, td, 0));
  aclDestroyTensorDesc(td);
  ACL_OK(aclmdlExecute(id, in, out));
  ACL_OK(aclmdlGetCurOutputDims(d, 0, &dims));
  CHECK(dims.dimCount == 2 && dims.dims[0] == 2 && dims.dims[1] == 4);
  // A token id out of the vocabulary fails the execution with a message, no crash.
  int64_t badTok = 5000;
  ACL_OK(aclrtMemcpy(inDev, 80, &badTok, 8, ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_CODE(aclmdlExecute(id, in, out), ACL_ERROR_RT_MODEL_EXECUTE);
  const char *m = aclGetRecentErrMsg();
  CHECK(m && std::strstr(m, "out of range") && std::strstr(m, "Gather"));
  aclDestroyDataBuffer(aclmdlGetDatasetBuffer(in, 0));
  aclDestroyDataBuffer(aclmdlGetDatasetBuffer(out, 0));
  aclmdlDestroyDataset(in);
  aclmdlDestroyDataset(out);
  aclrtFree(inDev);
  aclrtFree(outDev);
  ACL_OK(aclmdlUnload(id));
  aclmdlDestroyDesc(d);
}

namespace {
void freeDynBatchIO(const DynBatchIO &io) {
  for (aclmdlDataset *ds : {io.in, io.out}) {
    for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(ds); ++i) aclDestroyDataBuffer(aclmdlGetDatasetBuffer(ds, i));
    aclmdlDestroyDataset(ds);
  }
  aclrtFree(io.a);
  aclrtFree(io.b);
  aclrtFree(io.c);
  aclmdlDestroyDesc(io.d);
}
}  // namespace

// `[devN:]curdimsatrun`: aclmdlSetDynamicBatchSize leaves the model's current output dims alone on
// that device, only an execution updates them (a library that reads them at execution, not at the
// setter); the other device keeps the setter's update, and executions count as usual.
void curDimsAtRun() {
  const std::string mlp = mlpModel(64, 32, 16, 10);
  setEnv("NPU_FLEET_SIM_FAULTS", "dev1:curdimsatrun");
  ACL_OK(aclInit(nullptr));
  for (int dev = 0; dev < 2; ++dev) {
    ACL_OK(aclrtSetDevice(dev));
    uint32_t id = 0;
    ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
    const DynBatchIO io = dynBatchIO(id);
    aclmdlIODims dims;
    ACL_OK(aclmdlSetDynamicBatchSize(id, io.in, 1, 4));
    ACL_OK(aclmdlGetCurOutputDims(io.d, 0, &dims));
    CHECK(dims.dimCount == 2 && dims.dims[0] == (dev == 1 ? -1 : 4) && dims.dims[1] == 10);
    ACL_OK(aclmdlExecute(id, io.in, io.out));
    ACL_OK(aclmdlGetCurOutputDims(io.d, 0, &dims));
    CHECK(dims.dimCount == 2 && dims.dims[0] == 4);
    ACL_OK(aclmdlSetDynamicBatchSize(id, io.in, 1, 2));
    ACL_OK(aclmdlGetCurOutputDims(io.d, 0, &dims));
    CHECK(dims.dimCount == 2 && dims.dims[0] == (dev == 1 ? 4 : 2));
    ACL_OK(aclmdlExecute(id, io.in, io.out));
    ACL_OK(aclmdlGetCurOutputDims(io.d, 0, &dims));
    CHECK(dims.dimCount == 2 && dims.dims[0] == 2);
    uint64_t count = 0;
    ACL_OK(aclsimGetExecutionCount(dev, &count));
    CHECK(count == 2);
    ACL_OK(aclmdlUnload(id));
    freeDynBatchIO(io);
  }
  // Without the fault, a model whose only gear is 1 (batch-driven dims cannot be told from fixed
  // ones by the validation runs) still gets its dims at the setter: those of the largest gear.
  ACL_OK(aclrtSetDevice(0));
  const uint64_t one[] = {1};
  ACL_OK(aclsimSetNextLoadBatchGears(one, 1));
  uint32_t id = 0;
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  const DynBatchIO io = dynBatchIO(id);
  aclmdlIODims dims;
  ACL_OK(aclmdlGetOutputDims(io.d, 0, &dims));
  CHECK(dims.dimCount == 2 && dims.dims[0] == -1 && dims.dims[1] == 10);
  ACL_OK(aclmdlSetDynamicBatchSize(id, io.in, 1, 1));
  ACL_OK(aclmdlGetCurOutputDims(io.d, 0, &dims));
  CHECK(dims.dimCount == 2 && dims.dims[0] == 1 && dims.dims[1] == 10);
  ACL_OK(aclmdlUnload(id));
  freeDynBatchIO(io);
  ACL_OK(aclFinalize());
  setEnv("NPU_FLEET_SIM_FAULTS", nullptr);
}
