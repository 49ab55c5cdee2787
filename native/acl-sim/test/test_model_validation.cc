// The validation run at load: models whose zero-filled run fails only because of the zeros load
// (their data-dependent outputs are described as dynamic), real defects are still refused, and a
// hostile model cannot hold the loading thread past the run's work budget.
#include <chrono>

#include "onnx_builder.h"
#include "test_models.h"

using tb::DYN_SEQ;
using tb::FLOAT;
using tb::INT64;

namespace {

aclError loadBytes(const std::string &b, std::string *msg, uint32_t *idOut = nullptr) {
  uint32_t id = 0;
  aclError e = aclmdlLoadFromMem(b.data(), b.size(), &id);
  const char *m = aclGetRecentErrMsg();
  *msg = m ? m : "";
  if (!e && idOut) *idOut = id;
  else if (!e) aclmdlUnload(id);
  return e;
}

bool has(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

// x [1,12] reshaped to [rows, 4], rows from an int64 input: zeros give [0 -> 1, 4], 4 elements
// for 12, which no real input with rows = 3 would. z = Relu(x) does not depend on rows.
tb::Model reshapeByInput() {
  tb::Model m;
  m.input("x", FLOAT, {1, 12});
  m.input("rows", INT64, {1});
  m.init(tb::tensorI64("four", {1}, {4}));
  m.node("Concat", {"rows", "four"}, {"shape"}).i("axis", 0);
  m.node("Reshape", {"x", "shape"}, {"r"});
  m.node("Relu", {"r"}, {"y"});
  m.node("Relu", {"x"}, {"z"});
  m.output("y", FLOAT, {DYN_SEQ, 4});
  m.output("z", FLOAT, {1, 12});
  return m;
}

}  // namespace

void validationDataDependent() {
  std::string msg;
  {
    const tb::Model m = reshapeByInput();
    uint32_t id = 0;
    CHECK_CODE(loadBytes(m.bytes(), &msg, &id), 0);
    if (id) {
      aclmdlDesc *d = aclmdlCreateDesc();
      ACL_OK(aclmdlGetDesc(d, id));
      aclmdlIODims dims;
      ACL_OK(aclmdlGetOutputDims(d, 0, &dims));  // data-dependent: as declared, dynamic dims -1
      CHECK(dims.dimCount == 2 && dims.dims[0] == -1 && dims.dims[1] == 4);
      CHECK(aclmdlGetOutputSizeByIndex(d, 0) == 0);
      ACL_OK(aclmdlGetOutputDims(d, 1, &dims));  // the independent branch is still measured
      CHECK(dims.dimCount == 2 && dims.dims[0] == 1 && dims.dims[1] == 12);
      CHECK(aclmdlGetOutputSizeByIndex(d, 1) == 48);
      CHECK(aclmdlGetOutputDataType(d, 0) == ACL_FLOAT);
      aclmdlDestroyDesc(d);
      ACL_OK(aclmdlUnload(id));
    }
    std::vector<float> xs(12);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(i) - 5.f;
    RunOpts o;
    o.outBytes = 48;
    const std::vector<HostT> ins = {makeF({1, 12}, xs), makeI64({1}, {3})};
    RunResult r = runModel(m.bytes(), ins, o);
    CHECK(r.loadErr == 0 && r.execErr == 0 && r.outputs.size() == 2);
    dumpCase("reshape_by_input", m.bytes(), ins, r);
    if (r.outputs.size() == 2) {
      CHECK((r.outputs[0].shape == std::vector<int64_t>{3, 4}) && r.outputs[0].f()[0] == 0.f && r.outputs[0].f()[11] == 6.f);
      CHECK((r.outputs[1].shape == std::vector<int64_t>{1, 12}) && r.outputs[1].f()[11] == 6.f);
    }
    // Real data that gives an impossible shape fails that execution, not the load.
    r = runModel(m.bytes(), {makeF({1, 12}, xs), makeI64({1}, {5})}, o);
    CHECK(r.loadErr == 0 && r.execErr == ACL_ERROR_RT_MODEL_EXECUTE && has(r.msg, "Reshape"));
  }
  {
    // Gather index computed from an input: zeros give -5, out of range for 3 values; 6 gives 1.
    tb::Model m;
    m.input("i", INT64, {1});
    m.init(tb::tensorF("table", {3}, {10, 20, 30}));
    m.init(tb::tensorI64("five", {1}, {5}));
    m.node("Sub", {"i", "five"}, {"j"});
    m.node("Gather", {"table", "j"}, {"y"}).i("axis", 0);
    m.output("y", FLOAT, {1});
    const std::vector<HostT> ins = {makeI64({1}, {6})};
    RunResult r = runModel(m.bytes(), ins);
    CHECK(r.loadErr == 0 && r.execErr == 0 && r.outputs.size() == 1 && r.outputs[0].f()[0] == 20.f);
    dumpCase("gather_by_input", m.bytes(), ins, r);
    if (r.loadErr) std::fprintf(stderr, "  load: %s\n", r.msg.c_str());
  }
  // Real defects are still refused at load, with the node and the reason.
  {
    tb::Model m = reshapeByInput();  // plus a branch whose shapes never fit, whatever the data
    m.init(tb::tensorF("w", {5, 2}, randVec(10, 3)));
    m.node("MatMul", {"z", "w"}, {"bad"});
    m.output("bad", FLOAT, {1, 2});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && has(msg, "MatMul") && has(msg, "inner dims"));
  }
  {
    tb::Model m;  // token ids choose rows, never the shape: a MatMul after the Gather is judged
    m.input("tokens", INT64, {1, 5});
    m.init(tb::tensorF("emb", {10, 8}, randVec(80, 4)));
    m.init(tb::tensorF("w", {7, 2}, randVec(14, 5)));
    m.node("Gather", {"emb", "tokens"}, {"e"}).i("axis", 0);
    m.node("MatMul", {"e", "w"}, {"y"});
    m.output("y", FLOAT, {1, 5, 2});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && has(msg, "MatMul") && has(msg, "inner dims"));
  }
  {
    tb::Model m;  // a Reshape target computed from shapes only is judged too
    m.input("x", FLOAT, {1, 12});
    m.init(tb::tensorI64("five", {1}, {5}));
    m.node("Shape", {"x"}, {"s"});
    m.node("Concat", {"s", "five"}, {"shape"}).i("axis", 0);
    m.node("Reshape", {"x", "shape"}, {"y"});
    m.output("y", FLOAT, {1, 12, 5});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && has(msg, "Reshape") && has(msg, "cannot reshape"));
  }
  {
    tb::Model m = reshapeByInput();  // a data-dependent output needs a declared shape (its rank)
    m.outputs[0] = tb::Model::valueInfo("y", FLOAT, {}, false);
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && has(msg, "'y'") && has(msg, "declares no shape"));
  }
}

void validationBudget() {
  std::string msg;
  {
    // 32 KiB of input broadcast to [8192, 8192], then multiplied by itself: 5.5e11 multiply-adds.
    tb::Model m;
    m.input("x", FLOAT, {8192, 1});
    m.node("Transpose", {"x"}, {"xt"});
    m.node("Add", {"x", "xt"}, {"sq"});
    m.node("MatMul", {"sq", "sq"}, {"p"});
    m.output("p", FLOAT, {8192, 8192});
    const auto t0 = std::chrono::steady_clock::now();
    const aclError e = loadBytes(m.bytes(), &msg);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  hostile MatMul model: load %s after %.2f s\n", e ? "refused" : "accepted", s);
    CHECK(e == ACL_ERROR_PARSE_MODEL && has(msg, "MatMul") && has(msg, "budget") && has(msg, "NPU_FLEET_SIM_LOAD_WORK_BUDGET"));
  }
  {
    // Many cheap ops over one large value (no large output each, so the run's memory stays small):
    // 400 ReduceSum nodes reading the same 2^26 elements.
    tb::Model m;
    m.input("x", FLOAT, {8192, 1});
    m.node("Transpose", {"x"}, {"xt"});
    m.node("Add", {"x", "xt"}, {"sq"});
    for (int i = 0; i < 400; ++i) m.node("ReduceSum", {"sq"}, {"s" + std::to_string(i)});
    m.output("s399", FLOAT, {1, 1});
    const auto t0 = std::chrono::steady_clock::now();
    const aclError e = loadBytes(m.bytes(), &msg);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  hostile chain model: load %s after %.2f s\n", e ? "refused" : "accepted", s);
    CHECK(e == ACL_ERROR_PARSE_MODEL && has(msg, "ReduceSum") && has(msg, "budget"));
  }
}

// The default budget grows with the model's weights: real models do work in proportion to their
// weights (ResNet-50 ~110 ops per weight byte per sample, MobileNetV2 ~260, as counted here).
void validationBudgetScales() {
  std::string msg;
  // A recurrent layer unrolled over 20 steps that share one 2048 x 2048 weight (16 MiB), at
  // dynamic batch (gears up to 32): each step reads the weight and does 4.2M multiply-adds per
  // sample, ~3.6e10 ops for the three validation runs (more than the 2^35 floor) but ~60 ops per
  // weight byte per sample, and fast to run (it is mostly the weight reads that are counted).
  tb::Model m;
  m.input("x", FLOAT, {tb::DYN_BATCH, 2048});
  m.init(tb::tensorF("u", {2048, 2048}, std::vector<float>(size_t(2048) * 2048, 1.f / 2048)));
  std::string h = "x";
  for (int t = 0; t < 20; ++t) {
    const std::string p = "p" + std::to_string(t), nh = "h" + std::to_string(t);
    m.node("MatMul", {h, "u"}, {p});
    m.node("Tanh", {p}, {nh});
    h = nh;
  }
  m.output(h, FLOAT, {tb::DYN_BATCH, 2048});
  const auto t0 = std::chrono::steady_clock::now();
  const aclError e = loadBytes(m.bytes(), &msg);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  unrolled recurrent model (16 MiB weights): load %s after %.2f s\n", e ? "refused" : "accepted", s);
  CHECK(e == ACL_ERROR_NONE);
  if (e) std::printf("  %s\n", msg.c_str());
  // The variable overrides the scaled default: at the floor's value the same model is refused.
  aclFinalize();
  setEnv("NPU_FLEET_SIM_LOAD_WORK_BUDGET", "34359738368");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && has(msg, "budget of 34359738368 ops"));
  aclFinalize();
  setEnv("NPU_FLEET_SIM_LOAD_WORK_BUDGET", nullptr);
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
}
