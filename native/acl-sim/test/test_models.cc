// Whole-model tests: hand-built MLP / CNN / text classifier and the repository's example
// models, dynamic batch and range-dynamic protocols, malformed input, memory accounting,
// the device time model and fault injection.
#include <sys/stat.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.h"
#include "onnx_builder.h"

extern const char *g_argv0;

namespace {

using tb::DYN_BATCH;
using tb::DYN_SEQ;
using tb::FLOAT;
using tb::INT64;
using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

std::string mlpModel(int64_t in = 784, int64_t h1 = 256, int64_t h2 = 128, int64_t out = 10) {
  tb::Model m;
  m.input("input", FLOAT, {DYN_BATCH, in});
  m.init(tb::tensorF("w1", {h1, in}, randVec(size_t(h1 * in), 1, -0.1f, 0.1f)));
  m.init(tb::tensorF("b1", {h1}, randVec(size_t(h1), 2)));
  m.init(tb::tensorF("w2", {h2, h1}, randVec(size_t(h2 * h1), 3, -0.1f, 0.1f)));
  m.init(tb::tensorF("b2", {h2}, randVec(size_t(h2), 4)));
  m.init(tb::tensorF("w3", {out, h2}, randVec(size_t(out * h2), 5, -0.1f, 0.1f)));
  m.init(tb::tensorF("b3", {out}, randVec(size_t(out), 6)));
  m.node("Gemm", {"input", "w1", "b1"}, {"h1"}, "fc1").i("transB", 1);
  m.node("Relu", {"h1"}, {"a1"});
  m.node("Gemm", {"a1", "w2", "b2"}, {"h2"}, "fc2").i("transB", 1);
  m.node("Relu", {"h2"}, {"a2"});
  m.node("Gemm", {"a2", "w3", "b3"}, {"logits"}, "fc3").i("transB", 1);
  m.node("Softmax", {"logits"}, {"probs"}).i("axis", 1);
  m.output("probs", FLOAT, {DYN_BATCH, out});
  return m.bytes();
}

std::string cnnModel() {
  tb::Model m;
  m.input("image", FLOAT, {DYN_BATCH, 1, 28, 28});
  m.init(tb::tensorF("c1w", {8, 1, 3, 3}, randVec(72, 10, -0.5f, 0.5f)));
  m.init(tb::tensorF("c1b", {8}, randVec(8, 11)));
  m.init(tb::tensorF("bn_s", {8}, randVec(8, 12, 0.5f, 1.5f)));
  m.init(tb::tensorF("bn_b", {8}, randVec(8, 13)));
  m.init(tb::tensorF("bn_m", {8}, randVec(8, 14)));
  m.init(tb::tensorF("bn_v", {8}, randVec(8, 15, 0.5f, 2.f)));
  m.init(tb::tensorF("c2w", {16, 8, 3, 3}, randVec(16 * 72, 16, -0.2f, 0.2f)));
  m.init(tb::tensorF("c2b", {16}, randVec(16, 17)));
  m.init(tb::tensorF("c3w", {16, 16, 3, 3}, randVec(16 * 144, 18, -0.1f, 0.1f)));
  m.init(tb::tensorF("fcw", {10, 16}, randVec(160, 19)));
  m.init(tb::tensorF("fcb", {10}, randVec(10, 20)));
  m.node("Conv", {"image", "c1w", "c1b"}, {"c1"}).ints("pads", {1, 1, 1, 1});
  m.node("BatchNormalization", {"c1", "bn_s", "bn_b", "bn_m", "bn_v"}, {"bn"});
  m.node("Relu", {"bn"}, {"r1"});
  m.node("MaxPool", {"r1"}, {"p1"}).ints("kernel_shape", {2, 2}).ints("strides", {2, 2});
  m.node("Conv", {"p1", "c2w", "c2b"}, {"c2"}).ints("pads", {1, 1, 1, 1});
  m.node("Relu", {"c2"}, {"r2"});
  m.node("Conv", {"r2", "c3w"}, {"c3"}).ints("pads", {1, 1, 1, 1});
  m.node("Add", {"c3", "r2"}, {"res"});  // residual
  m.node("Relu", {"res"}, {"r3"});
  m.node("GlobalAveragePool", {"r3"}, {"gap"});
  m.node("Flatten", {"gap"}, {"flat"});
  m.node("Gemm", {"flat", "fcw", "fcb"}, {"logits"}).i("transB", 1);
  m.output("logits", FLOAT, {DYN_BATCH, 10});
  return m.bytes();
}

std::string textModel(int64_t opset = 13) {
  tb::Model m;
  m.opset = opset;
  m.input("tokens", INT64, {DYN_BATCH, DYN_SEQ});
  m.init(tb::tensorF("emb", {1000, 32}, randVec(32000, 30)));
  m.init(tb::tensorF("w", {4, 32}, randVec(128, 31)));
  m.init(tb::tensorF("b", {4}, randVec(4, 32)));
  m.node("Gather", {"emb", "tokens"}, {"e"}).i("axis", 0);
  if (opset >= 18) {
    m.init(tb::tensorI64("axes", {1}, {1}));
    m.node("ReduceMean", {"e", "axes"}, {"pooled"}).i("keepdims", 0);
  } else {
    m.node("ReduceMean", {"e"}, {"pooled"}).ints("axes", {1}).i("keepdims", 0);
  }
  m.node("Gemm", {"pooled", "w", "b"}, {"logits"}).i("transB", 1);
  m.node("Softmax", {"logits"}, {"probs"}).i("axis", -1);
  m.output("probs", FLOAT, {DYN_BATCH, 4});
  return m.bytes();
}

HostT tokens(int64_t b, int64_t s, uint32_t seed) {
  std::vector<int64_t> v(size_t(b * s));
  std::mt19937 rng(seed);
  for (auto &x : v) x = int64_t(rng() % 1000);
  return makeI64({b, s}, v);
}

void expectOk(const std::string &name, const std::string &model, const std::vector<HostT> &ins, const RunOpts &o,
              const std::vector<int64_t> &outShape) {
  RunResult r = runModel(model, ins, o);
  ++g_checks;
  if (r.loadErr || r.execErr || r.outputs.empty() || r.outputs[0].shape != outShape) {
    ++g_failures;
    std::fprintf(stderr, "  model %s failed: load %d exec %d %s\n", name.c_str(), r.loadErr, r.execErr, r.msg.c_str());
    return;
  }
  dumpCase(name, model, ins, r);
}

void builtModels() {
  const std::string mlp = mlpModel(), cnn = cnnModel();
  for (int64_t b : {1, 32}) {
    expectOk("mlp_b" + std::to_string(b), mlp, {randF({b, 784}, 40 + uint32_t(b))}, {}, {b, 10});
    RunOpts async;
    async.async = true;
    expectOk("cnn_b" + std::to_string(b), cnn, {randF({b, 1, 28, 28}, 50 + uint32_t(b))}, async, {b, 10});
    expectOk("text13_b" + std::to_string(b), textModel(13), {tokens(b, 17, 60)}, {}, {b, 4});
    expectOk("text18_b" + std::to_string(b), textModel(18), {tokens(b, 64, 61)}, async, {b, 4});
  }
  expectOk("mlp_b5_gear8", mlp, {randF({8, 784}, 70)}, RunOpts{false, {}, 8, true, 0}, {8, 10});
}

std::string readAll(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void exampleModels() {
  const char *root = "../../examples/models";
  struct stat st;
  if (stat(root, &st) != 0) {
    std::printf("  (examples/models not present: skipped)\n");
    return;
  }
  const std::string mlp = readAll(std::string(root) + "/mlp-classifier/1/model.onnx");
  const std::string cnn = readAll(std::string(root) + "/small-cnn/1/model.onnx");
  const std::string text = readAll(std::string(root) + "/text-classifier/1/model.onnx");
  CHECK(!mlp.empty() && !cnn.empty() && !text.empty());
  for (int64_t b : {1, 32}) {
    expectOk("example_mlp_b" + std::to_string(b), mlp, {randF({b, 64}, 80)}, {}, {b, 10});
    expectOk("example_cnn_b" + std::to_string(b), cnn, {randF({b, 1, 28, 28}, 81)}, RunOpts{true, {}, 0, true, 0}, {b, 10});
    expectOk("example_text_b" + std::to_string(b), text, {tokens(b, 16, 82)}, {}, {b, 4});
    expectOk("example_text_b" + std::to_string(b) + "_s128", text, {tokens(b, 128, 83)}, {}, {b, 4});
  }
}

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

aclError loadBytes(const std::string &b, std::string *msg = nullptr) {
  uint32_t id = 0;
  aclError e = aclmdlLoadFromMem(b.data(), b.size(), &id);
  const char *m = aclGetRecentErrMsg();
  if (msg) *msg = m ? m : "";
  if (!e) aclmdlUnload(id);
  return e;
}

void malformed() {
  std::string msg;
  CHECK(loadBytes("this is not an onnx model", &msg) == ACL_ERROR_DESERIALIZE_MODEL);
  CHECK(!msg.empty());
  CHECK(loadBytes(std::string(1, '\0')) != 0);
  uint32_t id;
  CHECK_CODE(aclmdlLoadFromMem(nullptr, 10, &id), ACL_ERROR_INVALID_PARAM);
  CHECK_CODE(aclmdlLoadFromFile("/nonexistent/model.onnx", &id), int(ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID));
  CHECK_CODE(aclmdlLoadFromFile("/tmp", &id), int(ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID));
  // Hostile lengths: a graph field claiming 2^62 bytes, a tensor claiming huge dims.
  {
    tb::PB m;
    m.tag(7, 2);
    m.varint(uint64_t(1) << 62);
    m.b += "xx";
    CHECK(loadBytes(m.b, &msg) == ACL_ERROR_DESERIALIZE_MODEL && msg.find("exceeds") != std::string::npos);
    tb::PB t;
    t.packedI64(1, {int64_t(1) << 40, int64_t(1) << 40});
    t.i64(2, 1);
    t.str(9, "abcd");
    tb::PB g;
    g.msg(5, t);
    tb::PB mm;
    mm.msg(7, g);
    CHECK(loadBytes(mm.b, &msg) == ACL_ERROR_DESERIALIZE_MODEL && msg.find("too large") != std::string::npos);
    tb::PB v;
    v.tag(1, 0);
    for (int i = 0; i < 11; ++i) v.b += char(0xff);  // over-long varint
    CHECK(loadBytes(v.b) == ACL_ERROR_DESERIALIZE_MODEL);
    tb::PB grp;
    grp.tag(7, 3);  // a group wire type
    CHECK(loadBytes(grp.b) == ACL_ERROR_DESERIALIZE_MODEL);
  }
  // Declared or intermediate shapes too large for the device fail without touching memory.
  {
    tb::Model m;
    m.input("x", FLOAT, {int64_t(1) << 40, int64_t(1) << 40});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", FLOAT, {});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && msg.find("too large") != std::string::npos);
    tb::Model big;
    big.input("x", FLOAT, {2, int64_t(1) << 28});  // 2 GiB of input on a 1 GiB device
    big.node("Relu", {"x"}, {"y"});
    big.output("y", FLOAT, {});
    CHECK(loadBytes(big.bytes(), &msg) == int(ACL_ERROR_GE_MEMORY_ALLOCATION));
    tb::Model outer;  // [65536,1] x [1,65536] would be a 16 GiB intermediate
    outer.input("x", FLOAT, {65536, 1});
    outer.init(tb::tensorF("w", {1, 65536}, std::vector<float>(65536, 1.f)));
    outer.node("MatMul", {"x", "w"}, {"y"});
    outer.output("y", FLOAT, {});
    CHECK(loadBytes(outer.bytes(), &msg) == int(ACL_ERROR_GE_MEMORY_ALLOCATION) && msg.find("MatMul") != std::string::npos);
  }
  // Every truncation of a valid model fails cleanly (the graph field comes last).
  const std::string small = mlpModel(8, 4, 4, 3);
  int ok = 0, truncFailed = 0;
  for (size_t n = 0; n < small.size(); ++n) {
    aclError e = loadBytes(small.substr(0, n));
    if (e) ++truncFailed;
    else ++ok;
  }
  CHECK(ok == 0 && truncFailed == int(small.size()));
  CHECK(loadBytes(small) == 0);
  // Random corruption: any outcome but a crash (ASan/UBSan watch the reads).
  std::mt19937 rng(7);
  // Loads 1500 copies of `model` with 1-4 random bytes flipped; returns how many still loaded.
  auto fuzzLoads = [&](const std::string &model) {
    int loaded = 0;
    for (int it = 0; it < 1500; ++it) {
      std::string b = model;
      const int flips = 1 + int(rng() % 4);
      for (int f = 0; f < flips; ++f) b[rng() % b.size()] = char(rng() & 0xff);
      if (loadBytes(b) == 0) ++loaded;
    }
    return loaded;
  };
  std::printf("  fuzz: %d of 1500 corrupted models still loaded\n", fuzzLoads(small));
  // The same on a model using every attribute kind, typed and raw initializers, int inputs.
  {
    tb::Model m;
    m.input("x", FLOAT, {DYN_BATCH, 2, 6, 6});
    m.input("ids", INT64, {DYN_BATCH, DYN_SEQ});
    m.init(tb::tensorF("w", {3, 2, 3, 3}, randVec(54, 1), false));
    m.init(tb::tensorI64("shape", {2}, {0, -1}, false));
    m.init(tb::tensorI32("idx", {2}, {0, 1}));
    m.node("Conv", {"x", "w"}, {"c"}).ints("pads", {1, 1, 1, 1}).s("auto_pad", "NOTSET").i("group", 1);
    m.node("LeakyRelu", {"c"}, {"l"}).f("alpha", 0.1f);
    m.node("Reshape", {"l", "shape"}, {"r"});
    m.node("Constant", {}, {"k"}).t("value", tb::tensorF("", {1}, {2.f}));
    m.node("Constant", {}, {"kf"}).floats("value_floats", {1.f, 2.f});
    m.node("Mul", {"r", "k"}, {"y"});
    m.node("Gather", {"y", "idx"}, {"g"}).i("axis", 1);
    m.node("Cast", {"ids"}, {"idsf"}).i("to", FLOAT);
    m.output("g", FLOAT, {});
    m.output("idsf", FLOAT, {});
    const std::string rich = m.bytes();
    CHECK(loadBytes(rich, &msg) == 0);
    int truncOk = 0;
    for (size_t n = 0; n < rich.size(); n += 3) truncOk += loadBytes(rich.substr(0, n)) != 0;
    CHECK(truncOk == int((rich.size() + 2) / 3));
    std::printf("  fuzz (rich model): %d of 1500 corrupted models still loaded\n", fuzzLoads(rich));
  }
  // Semantic errors name the problem.
  {
    tb::Model m;
    m.input("x", FLOAT, {1, 4});
    m.node("Relu", {"x"}, {"a"});
    m.node("FancyOp", {"a"}, {"y"}, "my_fancy_node");
    m.output("y", FLOAT, {1, 4});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL);
    CHECK(msg.find("FancyOp") != std::string::npos && msg.find("my_fancy_node") != std::string::npos);
  }
  {
    tb::Model m;
    m.input("x", FLOAT, {1, 4});
    m.node("Add", {"x", "b"}, {"a"});
    m.node("Relu", {"a"}, {"b"});
    m.output("b", FLOAT, {1, 4});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && msg.find("cycle") != std::string::npos);
  }
  {
    tb::Model m;
    m.input("x", FLOAT, {1, 4});
    m.node("Add", {"x", "ghost"}, {"y"});
    m.output("y", FLOAT, {1, 4});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && msg.find("ghost") != std::string::npos);
  }
  {
    tb::Model m;  // nodes listed out of order are sorted
    m.input("x", FLOAT, {1, 4});
    m.node("Relu", {"a"}, {"y"});
    m.node("Neg", {"x"}, {"a"});
    m.output("y", FLOAT, {1, 4});
    RunResult r = runModel(m.bytes(), {makeF({1, 4}, {1, -2, 3, -4})});
    CHECK(r.execErr == 0 && r.outputs.size() == 1 && r.outputs[0].f()[1] == 2.f && r.outputs[0].f()[0] == 0.f);
  }
  {
    tb::Model m;
    m.input("x", FLOAT, {2, 2});
    m.node("MaxPool", {"x"}, {"y"});
    m.output("y", FLOAT, {});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_MODEL_MISSING_ATTR && msg.find("kernel_shape") != std::string::npos);
  }
  {
    tb::Model m;  // shape error found by the validation run at load
    m.input("x", FLOAT, {2, 3});
    m.init(tb::tensorF("w", {4, 5}, randVec(20, 1)));
    m.node("MatMul", {"x", "w"}, {"y"});
    m.output("y", FLOAT, {});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && msg.find("MatMul") != std::string::npos);
  }
  {
    tb::Model m;
    m.input("x", FLOAT, {2, 3});
    tb::PB t = tb::tensorF("w", {3}, {1, 2});  // 2 values for 3 elements
    m.init(t);
    m.node("Add", {"x", "w"}, {"y"});
    m.output("y", FLOAT, {});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_DESERIALIZE_MODEL && msg.find("raw_data") != std::string::npos);
  }
}

void memoryAccounting() {
  size_t free0, total, free1, free2;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total));
  const std::string mlp = mlpModel();
  uint32_t id;
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total));
  const size_t weights = (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10) * 4;
  CHECK(free0 - free1 >= weights);
  size_t work = 0, weight = 0;
  const char *path = "/tmp/acl_sim_test_mlp.onnx";
  {
    std::ofstream f(path, std::ios::binary);
    f << mlp;
  }
  ACL_OK(aclmdlQuerySize(path, &work, &weight));
  CHECK(weight == weights && work > 0 && free0 - free1 == work + weight);
  ACL_OK(aclmdlUnload(id));
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free2, &total));
  CHECK(free2 == free0);
  // Loading from file works the same way.
  ACL_OK(aclmdlLoadFromFile(path, &id));
  ACL_OK(aclmdlUnload(id));
  std::remove(path);
}

void memoryCapacity() {
  setEnv("NPU_FLEET_SIM_DEVICE_MEMORY_BYTES", "600000");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  const std::string mlp = mlpModel();  // ~0.96 MB of weights
  uint32_t id;
  CHECK_CODE(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id), int(ACL_ERROR_GE_MEMORY_ALLOCATION));
  const char *m = aclGetRecentErrMsg();
  CHECK(m && std::strstr(m, "out of memory"));
  size_t freeB, total;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &freeB, &total));
  CHECK(freeB == total);
  ACL_OK(aclFinalize());
  setEnv("NPU_FLEET_SIM_DEVICE_MEMORY_BYTES", nullptr);
}

void timeModelAndFaults() {
  const std::string mlp = mlpModel(64, 32, 16, 10);
  setEnv("NPU_FLEET_SIM_PROFILE", "base=30ms,perItem=2ms");
  // nosyncwait comes first: it is not an execution fault, so it must not shadow the others.
  setEnv("NPU_FLEET_SIM_FAULTS", "nosyncwait,dev0:fail@2,dev1:slow@1:x3,dev1:hang@2:150ms,dev0:slow@4:100ms");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  auto t0 = Clock::now();
  RunResult r = runModel(mlp, {randF({8, 64}, 1)}, RunOpts{false, {}, 8, true, 0});  // exec 1
  double ms = msSince(t0);
  CHECK(r.execErr == 0);
  CHECK(ms >= 45 && ms < 400);  // 30 + 2*8
  r = runModel(mlp, {randF({1, 64}, 2)}, RunOpts{true, {}, 1, true, 0});  // exec 2: injected failure, async
  CHECK(r.execErr == ACL_ERROR_RT_MODEL_EXECUTE && r.msg.find("fail@2") != std::string::npos);
  t0 = Clock::now();
  r = runModel(mlp, {randF({1, 64}, 3)}, RunOpts{false, {}, 1, true, 0});  // exec 3
  ms = msSince(t0);
  CHECK(r.execErr == 0 && ms >= 30 && ms < 300);
  t0 = Clock::now();
  r = runModel(mlp, {randF({1, 64}, 3)}, RunOpts{false, {}, 1, true, 0});  // exec 4: +100 ms
  ms = msSince(t0);
  CHECK(r.execErr == 0 && ms >= 130 && ms < 500);
  uint64_t count = 0;
  ACL_OK(aclsimGetExecutionCount(0, &count));
  CHECK(count == 4);
  ACL_OK(aclrtSetDevice(1));
  t0 = Clock::now();
  r = runModel(mlp, {randF({2, 64}, 4)}, RunOpts{false, {}, 2, true, 0});  // dev1 exec 1: x3
  ms = msSince(t0);
  CHECK(r.execErr == 0 && ms >= 100 && ms < 600);  // (30 + 4) * 3
  t0 = Clock::now();
  r = runModel(mlp, {randF({2, 64}, 4)}, RunOpts{true, {}, 2, true, 0});  // dev1 exec 2: hang 150 ms, then ok
  ms = msSince(t0);
  CHECK(r.execErr == 0 && ms >= 170 && ms < 700);
  ACL_OK(aclFinalize());

  // A hang without a duration lasts until the device is reset; the stream wait times out.
  setEnv("NPU_FLEET_SIM_PROFILE", nullptr);
  setEnv("NPU_FLEET_SIM_FAULTS", "hang@1");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  uint32_t id;
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  aclmdlDesc *d = aclmdlCreateDesc();
  ACL_OK(aclmdlGetDesc(d, id));
  void *a, *b, *c;
  ACL_OK(aclrtMalloc(&a, aclmdlGetInputSizeByIndex(d, 0), ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtMalloc(&b, 8, ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtMalloc(&c, aclmdlGetOutputSizeByIndex(d, 0), ACL_MEM_MALLOC_HUGE_FIRST));
  aclmdlDataset *in = aclmdlCreateDataset(), *out = aclmdlCreateDataset();
  aclmdlAddDatasetBuffer(in, aclCreateDataBuffer(a, aclmdlGetInputSizeByIndex(d, 0)));
  aclmdlAddDatasetBuffer(in, aclCreateDataBuffer(b, 8));
  aclmdlAddDatasetBuffer(out, aclCreateDataBuffer(c, aclmdlGetOutputSizeByIndex(d, 0)));
  ACL_OK(aclmdlSetDynamicBatchSize(id, in, 1, 1));
  aclrtStream s;
  ACL_OK(aclrtCreateStream(&s));
  ACL_OK(aclmdlExecuteAsync(id, in, out, s));
  t0 = Clock::now();
  CHECK_CODE(aclrtSynchronizeStreamWithTimeout(s, 100), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  CHECK(msSince(t0) >= 90);
  aclrtStreamStatus st;
  ACL_OK(aclrtStreamQuery(s, &st));
  CHECK(st == ACL_STREAM_STATUS_NOT_READY);
  // ExecuteV2 with a stream timeout behaves like execute + synchronize-with-timeout.
  aclmdlExecConfigHandle *h = aclmdlCreateExecConfigHandle();
  int32_t tmo = 30;
  ACL_OK(aclmdlSetExecConfigOpt(h, ACL_MDL_STREAM_SYNC_TIMEOUT, &tmo, sizeof tmo));
  CHECK_CODE(aclmdlExecuteV2(id, in, out, s, h), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  aclmdlDestroyExecConfigHandle(h);
  t0 = Clock::now();
  ACL_OK(aclrtResetDevice(0));  // wakes the hang, drops everything on the device
  CHECK(msSince(t0) < 1000);
  aclDestroyDataBuffer(aclmdlGetDatasetBuffer(in, 0));
  aclDestroyDataBuffer(aclmdlGetDatasetBuffer(in, 1));
  aclDestroyDataBuffer(aclmdlGetDatasetBuffer(out, 0));
  aclmdlDestroyDataset(in);
  aclmdlDestroyDataset(out);
  aclmdlDestroyDesc(d);
  ACL_OK(aclFinalize());
  setEnv("NPU_FLEET_SIM_FAULTS", nullptr);
}

void manyExecutions() {
  // Steady-state executions neither leak nor change accounting.
  const std::string mlp = mlpModel(64, 32, 16, 10);
  size_t free0, total, free1;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total));
  for (int i = 0; i < 200; ++i) {
    RunResult r = runModel(mlp, {randF({2, 64}, uint32_t(i))}, RunOpts{i % 2 == 0, {}, 2, true, 0});
    if (r.execErr) {
      CHECK(r.execErr == 0);
      break;
    }
  }
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total));
  CHECK(free1 == free0);
}

// The process exits (no aclFinalize) while an execution hangs on a stream: exit must not wait.
void exitWhileHung() {
  const std::string cmd = std::string("ASAN_OPTIONS=detect_leaks=0 NPU_FLEET_SIM_FAULTS=hang@1 timeout 20 ") + g_argv0 + " --exit-child";
  const auto t0 = Clock::now();
  const int rc = std::system(cmd.c_str());
  CHECK(rc == 0);
  CHECK(msSince(t0) < 10000);
}

/** Device buffers and datasets for a loaded dynamic-batch model: input 0, the 8-byte batch input, output 0. */
struct DynBatchIO {
  aclmdlDesc *d;
  void *a, *b, *c;
  aclmdlDataset *in, *out;
};

DynBatchIO dynBatchIO(uint32_t id) {
  DynBatchIO io{aclmdlCreateDesc(), nullptr, nullptr, nullptr, nullptr, nullptr};
  aclmdlGetDesc(io.d, id);
  aclrtMalloc(&io.a, aclmdlGetInputSizeByIndex(io.d, 0), ACL_MEM_MALLOC_HUGE_FIRST);
  aclrtMalloc(&io.b, 8, ACL_MEM_MALLOC_HUGE_FIRST);
  aclrtMalloc(&io.c, aclmdlGetOutputSizeByIndex(io.d, 0), ACL_MEM_MALLOC_HUGE_FIRST);
  io.in = aclmdlCreateDataset();
  io.out = aclmdlCreateDataset();
  aclmdlAddDatasetBuffer(io.in, aclCreateDataBuffer(io.a, aclmdlGetInputSizeByIndex(io.d, 0)));
  aclmdlAddDatasetBuffer(io.in, aclCreateDataBuffer(io.b, 8));
  aclmdlAddDatasetBuffer(io.out, aclCreateDataBuffer(io.c, aclmdlGetOutputSizeByIndex(io.d, 0)));
  return io;
}

}  // namespace

int exitChildMain() {
  if (aclInit(nullptr) || aclrtSetDevice(0)) return 2;
  const std::string mlp = mlpModel(16, 8, 8, 4);
  uint32_t id;
  if (aclmdlLoadFromMem(mlp.data(), mlp.size(), &id)) return 3;
  const DynBatchIO io = dynBatchIO(id);
  aclmdlDataset *in = io.in, *out = io.out;
  aclmdlSetDynamicBatchSize(id, in, 1, 1);
  aclrtStream s;
  aclrtCreateStream(&s);
  if (aclmdlExecuteAsync(id, in, out, s)) return 4;
  if (aclrtSynchronizeStreamWithTimeout(s, 50) != ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) return 5;
  std::exit(0);  // static destructors run; the hung stream thread must not be joined
}

void modelTests(const char *filter) {
  struct {
    const char *name;
    void (*fn)();
    bool ownInit;
  } tests[] = {{"models_built", builtModels, false},       {"models_examples", exampleModels, false},
               {"dynamic_batch", dynamicBatch, false},     {"range_dynamic", rangeDynamic, false},
               {"malformed", malformed, false},            {"mem_accounting", memoryAccounting, false},
               {"mem_capacity", memoryCapacity, true},     {"time_faults", timeModelAndFaults, true},
               {"many_executions", manyExecutions, false}, {"exit_while_hung", exitWhileHung, true}};
  for (auto &t : tests) {
    if (filter && !std::strstr(t.name, filter)) continue;
    std::printf("models/%s\n", t.name);
    if (t.ownInit) {
      t.fn();
      continue;
    }
    aclInit(nullptr);
    aclrtSetDevice(0);
    t.fn();
    aclFinalize();
  }
}

void benchMain() {
  aclInit(nullptr);
  aclrtSetDevice(0);
  const std::string mlp = mlpModel();
  {
    std::ofstream f("/tmp/acl_sim_bench_mlp.onnx", std::ios::binary);
    f << mlp;
  }
  const std::string cnn = cnnModel();
  {
    std::ofstream f("/tmp/acl_sim_bench_cnn.onnx", std::ios::binary);
    f << cnn;
  }
  struct B {
    const char *name;
    std::string model;
    std::vector<int64_t> shape;
  } benches[] = {{"mlp784_b32", mlp, {32, 784}}, {"mlp784_b1", mlp, {1, 784}}, {"cnn_b32", cnn, {32, 1, 28, 28}}};
  const char *only = std::getenv("ACL_SIM_BENCH_ONLY");
  for (auto &bm : benches) {
    if (only && !std::strstr(bm.name, only)) continue;
    uint32_t id;
    aclmdlLoadFromMem(bm.model.data(), bm.model.size(), &id);
    const DynBatchIO io = dynBatchIO(id);
    aclmdlDesc *d = io.d;
    aclmdlDataset *in = io.in, *out = io.out;
    HostT x = randF(bm.shape, 1);
    aclrtMemcpy(io.a, x.data.size(), x.data.data(), x.data.size(), ACL_MEMCPY_HOST_TO_DEVICE);
    aclmdlSetDynamicBatchSize(id, in, 1, uint64_t(bm.shape[0]));
    for (int i = 0; i < 20; ++i) aclmdlExecute(id, in, out);
    int iters = 0;
    const auto t0 = Clock::now();
    const std::clock_t c0 = std::clock();
    while (msSince(t0) < 2000) {
      aclmdlExecute(id, in, out);
      ++iters;
    }
    const double cpuUs = double(std::clock() - c0) * 1e6 / CLOCKS_PER_SEC / iters;
    std::printf("%s: %.1f us/execute wall, %.1f us CPU (%d iterations)\n", bm.name, msSince(t0) * 1000.0 / iters, cpuUs, iters);
    aclDestroyDataBuffer(aclmdlGetDatasetBuffer(in, 0));
    aclDestroyDataBuffer(aclmdlGetDatasetBuffer(in, 1));
    aclDestroyDataBuffer(aclmdlGetDatasetBuffer(out, 0));
    aclmdlDestroyDataset(in);
    aclmdlDestroyDataset(out);
    aclmdlUnload(id);
    aclmdlDestroyDesc(d);
  }
  aclFinalize();
}
