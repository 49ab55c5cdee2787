// Whole-model tests: hand-built MLP / CNN / text classifier and the repository's example
// models; the test list (modelTests) and the bench. The dynamic-shape protocols, malformed input
// and resources (memory, time model, faults) are in the other test_model_*.cc files.
#include <sys/stat.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>

#include "onnx_builder.h"
#include "test_models.h"

using tb::DYN_BATCH;
using tb::DYN_SEQ;
using tb::FLOAT;
using tb::INT64;

namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

std::string mlpModel(int64_t in, int64_t h1, int64_t h2, int64_t out) {
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

std::string textModel(int64_t opset) {
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

namespace {

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

}  // namespace

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


void modelTests(const char *filter) {
  struct {
    const char *name;
    void (*fn)();
    bool ownInit;
  } tests[] = {{"models_built", builtModels, false},       {"models_examples", exampleModels, false},
               {"dynamic_batch", dynamicBatch, false},     {"range_dynamic", rangeDynamic, false},
               {"malformed", malformed, false},            {"mem_accounting", memoryAccounting, false},
               {"mem_capacity", memoryCapacity, true},     {"time_faults", timeModelAndFaults, true},
               {"many_executions", manyExecutions, false}, {"exit_while_hung", exitWhileHung, true},
               {"concurrency", concurrency, true},         {"validation_data", validationDataDependent, false},
               {"validation_budget", validationBudget, false},
               {"validation_budget_scales", validationBudgetScales, false},
               {"cur_dims_at_run", curDimsAtRun, true}};
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
