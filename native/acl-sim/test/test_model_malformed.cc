// Malformed model input: truncations, random corruptions, hostile lengths and shapes must fail
// with the documented codes and never crash.
#include "onnx_builder.h"
#include "test_models.h"

using tb::DYN_BATCH;
using tb::DYN_SEQ;
using tb::FLOAT;
using tb::INT64;

namespace {

aclError loadBytes(const std::string &b, std::string *msg = nullptr) {
  uint32_t id = 0;
  aclError e = aclmdlLoadFromMem(b.data(), b.size(), &id);
  const char *m = aclGetRecentErrMsg();
  if (msg) *msg = m ? m : "";
  if (!e) aclmdlUnload(id);
  return e;
}

}  // namespace

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
  // A Reshape target whose dims multiply to the input's element count only modulo 2^64
  // (11 * 1676976733973595602 = 2^64 + 6) is refused, not turned into a [11, 1.7e18] view that
  // the next kernel walks past the end of its 6 floats.
  {
    tb::Model m;
    m.input("x", FLOAT, {1, 6});
    m.init(tb::tensorI64("shape", {2}, {11, int64_t(1676976733973595602)}));
    m.node("Reshape", {"x", "shape"}, {"r"});
    m.node("ReduceSum", {"r"}, {"y"}).i("keepdims", 0);
    m.output("y", FLOAT, {});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && msg.find("Reshape") != std::string::npos);
    tb::Model inf;  // the same through the inferred (-1) dim
    inf.input("x", FLOAT, {1, 6});
    inf.init(tb::tensorI64("shape", {3}, {-1, 11, int64_t(1676976733973595602)}));
    inf.node("Reshape", {"x", "shape"}, {"r"});
    inf.node("ReduceSum", {"r"}, {"y"}).i("keepdims", 0);
    inf.output("y", FLOAT, {});
    CHECK(loadBytes(inf.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && msg.find("Reshape") != std::string::npos);
  }
  // A Conv whose im2col matrix cannot be allocated on the host (16384 x 4M floats = 256 GiB for a
  // 64 KiB kernel over a 64 MiB input) fails the load; the failure inside a compute-pool task
  // must reach the caller rather than end the process (std::terminate) or wedge the pool.
  // Its 2.7e11 multiply-adds are over the default work budget of the validation run, which
  // refuses it first; a budget raised past them reaches the allocation.
  {
    tb::Model m;
    m.input("x", FLOAT, {4, 1, 2048, 2048});
    m.init(tb::tensorF("w", {1, 1, 128, 128}, std::vector<float>(128 * 128, 0.f)));
    m.node("Conv", {"x", "w"}, {"y"}).ints("pads", {64, 64, 63, 63});
    m.output("y", FLOAT, {});
    aclError e = loadBytes(m.bytes(), &msg);
    CHECK(e == ACL_ERROR_PARSE_MODEL && msg.find("Conv") != std::string::npos && msg.find("budget") != std::string::npos);
    aclFinalize();
    setEnv("NPU_FLEET_SIM_LOAD_WORK_BUDGET", "1000000000000000");
    ACL_OK(aclInit(nullptr));
    ACL_OK(aclrtSetDevice(0));
    e = loadBytes(m.bytes(), &msg);
    CHECK(e == ACL_ERROR_PARSE_MODEL && msg.find("Conv") != std::string::npos && msg.find("allocation") != std::string::npos);
    aclFinalize();
    setEnv("NPU_FLEET_SIM_LOAD_WORK_BUDGET", nullptr);
    ACL_OK(aclInit(nullptr));
    ACL_OK(aclrtSetDevice(0));
    // The pool still works afterwards: a parallel Conv runs and gives the right values.
    tb::Model ok;
    ok.input("x", FLOAT, {8, 1, 4, 4});
    ok.init(tb::tensorF("w", {1, 1, 3, 3}, std::vector<float>(9, 1.f)));
    ok.node("Conv", {"x", "w"}, {"y"}).ints("pads", {1, 1, 1, 1});
    ok.output("y", FLOAT, {});
    RunResult r = runModel(ok.bytes(), {makeF({8, 1, 4, 4}, std::vector<float>(128, 1.f))});
    CHECK(r.execErr == 0 && r.outputs.size() == 1 && r.outputs[0].f()[0] == 4.f && r.outputs[0].f()[5] == 9.f);
  }
  // The validation run at load feeds zeros; an integer input used as a divisor is a valid model
  // (a zero divisor at run time fails that execution, as documented), so it must load and run.
  {
    tb::Model m;
    m.input("a", INT64, {1, 4});
    m.input("b", INT64, {1, 4});
    m.node("Div", {"a", "b"}, {"q"});
    m.node("Cast", {"q"}, {"y"}).i("to", FLOAT);
    m.output("y", FLOAT, {1, 4});
    CHECK(loadBytes(m.bytes(), &msg) == 0);
    RunResult r = runModel(m.bytes(), {makeI64({1, 4}, {7, -7, 9, 5}), makeI64({1, 4}, {2, 2, -3, 5})});
    CHECK(r.loadErr == 0 && r.execErr == 0 && r.outputs.size() == 1 && r.outputs[0].f()[0] == 3.f &&
          r.outputs[0].f()[1] == -3.f && r.outputs[0].f()[2] == -3.f && r.outputs[0].f()[3] == 1.f);
    r = runModel(m.bytes(), {makeI64({1, 4}, {7, -7, 9, 5}), makeI64({1, 4}, {2, 0, -3, 5})});
    CHECK(r.loadErr == 0 && r.execErr == ACL_ERROR_RT_MODEL_EXECUTE && r.msg.find("division by zero") != std::string::npos);
    // INT64_MIN / -1 wraps to INT64_MIN like the other integer ops (no trap, no signed overflow).
    r = runModel(m.bytes(), {makeI64({1, 4}, {INT64_MIN, INT64_MIN, -1, 1}), makeI64({1, 4}, {-1, 1, -1, -1})});
    CHECK(r.execErr == 0 && r.outputs.size() == 1 && r.outputs[0].f()[0] == -9223372036854775808.f &&
          r.outputs[0].f()[1] == -9223372036854775808.f && r.outputs[0].f()[2] == 1.f && r.outputs[0].f()[3] == -1.f);
  }
  // A graph input listed twice is refused at load. Before, the load described two inputs for one
  // value slot and the execute read past the end of the graph's input-slot list.
  {
    tb::Model m;
    m.input("x", FLOAT, {1, 4});
    m.input("x", FLOAT, {1, 4});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", FLOAT, {1, 4});
    CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && msg.find("'x'") != std::string::npos);
    RunResult r = runModel(m.bytes(), {makeF({1, 4}, {1, -2, 3, -4}), makeF({1, 4}, {1, -2, 3, -4})});
    CHECK(r.loadErr == ACL_ERROR_PARSE_MODEL);
  }
  // Window attributes so large that the window extent wraps around int64 are refused. Before,
  // dilation 2^62+1 with a 5-wide kernel gave an extent of 4*(2^62+1)+1 = 5 (mod 2^64): the
  // model loaded and pooled as if the dilation were 1 (and the arithmetic is undefined).
  {
    for (const char *op : {"MaxPool", "AveragePool"}) {
      tb::Model m;
      m.opset = 19;
      m.input("x", FLOAT, {1, 1, 6, 6});
      m.node(op, {"x"}, {"y"}).ints("kernel_shape", {5, 1}).ints("dilations", {(int64_t(1) << 62) + 1, 1});
      m.output("y", FLOAT, {});
      CHECK(loadBytes(m.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && msg.find("out of range") != std::string::npos);
    }
    tb::Model c;
    c.input("x", FLOAT, {1, 1, 6, 6});
    c.init(tb::tensorF("w", {1, 1, 5, 1}, std::vector<float>(5, 1.f)));
    c.node("Conv", {"x", "w"}, {"y"}).ints("dilations", {(int64_t(1) << 62) + 1, 1});
    c.output("y", FLOAT, {});
    CHECK(loadBytes(c.bytes(), &msg) == ACL_ERROR_PARSE_MODEL && msg.find("out of range") != std::string::npos);
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
