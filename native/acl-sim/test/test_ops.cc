// Single-operator models: each runs through the ACL API; outputs are checked here against
// hand-computed values where that is short, and all are dumped for test/ort_compare.mjs.
#include <cmath>
#include <functional>

#include "harness.h"
#include "onnx_builder.h"

namespace {

using tb::FLOAT;
using tb::INT64;

struct Case {
  std::string name;
  tb::Model m;
  std::vector<HostT> ins;
};

// Declares graph inputs named x0, x1, ... with the tensors' static shapes.
void declareInputs(tb::Model &m, const std::vector<HostT> &ins) {
  for (size_t i = 0; i < ins.size(); ++i) m.input("x" + std::to_string(i), ins[i].type, ins[i].shape);
}

RunResult runCase(const std::string &name, tb::Model &m, const std::vector<HostT> &ins) {
  const std::string bytes = m.bytes();
  RunResult r = runModel(bytes, ins);
  ++g_checks;
  if (r.loadErr || r.execErr) {
    ++g_failures;
    std::fprintf(stderr, "  op case %s failed: load %d exec %d: %s\n", name.c_str(), r.loadErr, r.execErr, r.msg.c_str());
  }
  dumpCase(name, bytes, ins, r);
  return r;
}

// One-node model: inputs x0..xn (plus initializers added by `extra`), output y.
RunResult unary(const std::string &name, const std::string &op, const std::vector<HostT> &ins,
                const std::function<void(tb::NodeB &)> &attrs = {}, int64_t opset = 17,
                const std::vector<std::string> &extraIn = {}, const std::function<void(tb::Model &)> &extra = {}) {
  tb::Model m;
  m.opset = opset;
  declareInputs(m, ins);
  std::vector<std::string> in;
  for (size_t i = 0; i < ins.size(); ++i) in.push_back("x" + std::to_string(i));
  for (const auto &e : extraIn) in.push_back(e);
  tb::NodeB &n = m.node(op, in, {"y"});
  if (attrs) attrs(n);
  if (extra) extra(m);
  m.output("y", FLOAT, {}, false);
  return runCase(name, m, ins);
}

void checkVals(const RunResult &r, const std::vector<int64_t> &shape, const std::vector<float> &want) {
  ++g_checks;
  if (r.outputs.empty()) {
    ++g_failures;
    return;
  }
  HostT w = makeF(shape, want);
  if (!allClose(r.outputs[0], w, 1e-5f, 1e-6f)) {
    ++g_failures;
    std::fprintf(stderr, "  value check failed\n");
  }
}

void elementwise() {
  RunResult r = unary("add_same", "Add", {makeF({2, 2}, {1, 2, 3, 4}), makeF({2, 2}, {10, 20, 30, 40})});
  checkVals(r, {2, 2}, {11, 22, 33, 44});
  r = unary("sub_bcast_row", "Sub", {makeF({2, 3}, {1, 2, 3, 4, 5, 6}), makeF({3}, {1, 1, 2})});
  checkVals(r, {2, 3}, {0, 1, 1, 3, 4, 4});
  r = unary("mul_bcast_col", "Mul", {makeF({2, 3}, {1, 2, 3, 4, 5, 6}), makeF({2, 1}, {2, 3})});
  checkVals(r, {2, 3}, {2, 4, 6, 12, 15, 18});
  r = unary("div_scalar", "Div", {makeF({3}, {2, 4, 6}), makeF({}, {2})});
  checkVals(r, {3}, {1, 2, 3});
  unary("add_3d_bcast", "Add", {randF({2, 1, 4}, 1), randF({1, 3, 1}, 2)});
  unary("mul_4d_bcast", "Mul", {randF({2, 3, 4, 5}, 3), randF({3, 1, 1}, 4)});
  unary("div_left_bcast", "Div", {randF({4}, 5), randF({3, 4}, 6, 0.5f, 2.f)});
  unary("sub_scalar_left", "Sub", {makeF({}, {1.5f}), randF({2, 3}, 7)});
  unary("pow", "Pow", {randF({2, 5}, 8, 0.1f, 2.f), randF({5}, 9)});
  r = unary("relu", "Relu", {makeF({4}, {-1, 0, 2, -3})});
  checkVals(r, {4}, {0, 0, 2, 0});
  unary("relu_big", "Relu", {randF({3, 50}, 10, -5, 5)});
  unary("sigmoid", "Sigmoid", {randF({3, 50}, 11, -20, 20)});
  unary("tanh", "Tanh", {randF({3, 50}, 12, -5, 5)});
  unary("exp", "Exp", {randF({20}, 13, -5, 5)});
  unary("log", "Log", {randF({20}, 14, 0.01f, 5)});
  unary("sqrt", "Sqrt", {randF({20}, 15, 0, 5)});
  unary("neg", "Neg", {randF({20}, 16)});
  unary("abs", "Abs", {randF({20}, 17)});
  unary("erf", "Erf", {randF({20}, 18, -3, 3)});
  unary("leaky_relu", "LeakyRelu", {randF({20}, 19)}, [](tb::NodeB &n) { n.f("alpha", 0.2f); });
  unary("elu", "Elu", {randF({20}, 20)}, [](tb::NodeB &n) { n.f("alpha", 0.7f); });
  unary("clip13", "Clip", {randF({20}, 21, -3, 3)}, {}, 13, {"lo", "hi"}, [](tb::Model &m) {
    m.init(tb::tensorF("lo", {}, {-0.5f}));
    m.init(tb::tensorF("hi", {}, {1.f}));
  });
  unary("clip6", "Clip", {randF({20}, 22, -3, 3)}, [](tb::NodeB &n) { n.f("min", -1.f).f("max", 0.25f); }, 6);
}

void softmaxes() {
  RunResult r = unary("softmax_small", "Softmax", {makeF({1, 3}, {1, 2, 3})});
  const float e1 = std::exp(1.f), e2 = std::exp(2.f), e3 = std::exp(3.f), s = e1 + e2 + e3;
  checkVals(r, {1, 3}, {e1 / s, e2 / s, e3 / s});
  unary("softmax_axis1_op13", "Softmax", {randF({2, 3, 4}, 30, -5, 5)}, [](tb::NodeB &n) { n.i("axis", 1); }, 13);
  unary("softmax_default_op13", "Softmax", {randF({2, 3, 4}, 31, -5, 5)}, {}, 13);
  unary("softmax_axis1_op11", "Softmax", {randF({2, 3, 4}, 32, -5, 5)}, [](tb::NodeB &n) { n.i("axis", 1); }, 11);
  unary("logsoftmax", "LogSoftmax", {randF({2, 7}, 33, -5, 5)}, {}, 13);
}

void gemms() {
  // Gemm with transB, alpha, beta, C broadcast: hand-checked on a small case.
  {
    tb::Model m;
    m.input("x0", FLOAT, {2, 3});
    m.init(tb::tensorF("w", {2, 3}, {1, 0, 1, 0, 1, 0}));
    m.init(tb::tensorF("c", {2}, {1, -1}));
    m.node("Gemm", {"x0", "w", "c"}, {"y"}).i("transB", 1).f("alpha", 2.f).f("beta", 3.f);
    m.output("y", FLOAT, {2, 2});
    RunResult r = runCase("gemm_small", m, {makeF({2, 3}, {1, 2, 3, 4, 5, 6})});
    checkVals(r, {2, 2}, {2 * 4 + 3, 2 * 2 - 3, 2 * 10 + 3, 2 * 5 - 3});
  }
  auto gemm = [](const std::string &name, int64_t M, int64_t K, int64_t N, int tA, int tB, float alpha, float beta,
                 std::vector<int64_t> cShape, bool rawInit) {
    tb::Model m;
    m.input("x0", FLOAT, tA ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K});
    std::vector<int64_t> bs = tB ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
    m.init(tb::tensorF("w", bs, randVec(size_t(N * K), 40), rawInit));
    std::vector<std::string> in = {"x0", "w"};
    if (!cShape.empty() || beta != 0.f) {
      size_t cn = 1;
      for (int64_t d : cShape) cn *= size_t(d);
      m.init(tb::tensorF("c", cShape, randVec(cn, 41), rawInit));
      in.push_back("c");
    }
    m.node("Gemm", in, {"y"}).i("transA", tA).i("transB", tB).f("alpha", alpha).f("beta", beta);
    m.output("y", FLOAT, {M, N});
    runCase(name, m, {randF(tA ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K}, 42)});
  };
  gemm("gemm_tb", 5, 7, 9, 0, 1, 0.5f, 2.f, {9}, true);
  gemm("gemm_ta_cbcast", 5, 7, 9, 1, 0, 1.f, 1.f, {5, 1}, false);
  gemm("gemm_ta_tb_scalar_c", 13, 300, 37, 1, 1, 1.f, 0.5f, {}, true);
  gemm("gemm_large_blocks", 100, 600, 2100, 0, 1, 1.f, 1.f, {2100}, true);  // crosses KC/MC/NC blocks
  gemm("gemm_m1", 1, 333, 70, 0, 1, 1.f, 1.f, {70}, true);
  gemm("gemm_m1_nt", 1, 333, 70, 0, 0, 1.5f, 1.f, {1, 70}, true);

  auto matmul = [](const std::string &name, std::vector<int64_t> a, std::vector<int64_t> b, bool bInit) {
    tb::Model m;
    m.input("x0", FLOAT, a);
    size_t bn = 1;
    for (int64_t d : b) bn *= size_t(d);
    std::vector<HostT> ins = {randF(a, 50)};
    if (bInit) {
      m.init(tb::tensorF("w", b, randVec(bn, 51)));
      m.node("MatMul", {"x0", "w"}, {"y"});
    } else {
      m.input("x1", FLOAT, b);
      ins.push_back(randF(b, 52));
      m.node("MatMul", {"x0", "x1"}, {"y"});
    }
    m.output("y", FLOAT, {}, false);
    runCase(name, m, ins);
  };
  matmul("matmul_2d", {7, 33}, {33, 20}, true);
  matmul("matmul_nd_weights", {2, 3, 4, 5}, {5, 6}, true);
  matmul("matmul_batch_bcast", {2, 1, 4, 5}, {3, 5, 6}, false);
  matmul("matmul_vec_left", {5}, {5, 6}, false);
  matmul("matmul_vec_right", {3, 4, 5}, {5}, false);
}

void convs() {
  auto conv = [](const std::string &name, std::vector<int64_t> x, std::vector<int64_t> w, bool bias,
                 const std::function<void(tb::NodeB &)> &attrs) {
    tb::Model m;
    m.input("x0", FLOAT, x);
    size_t wn = 1;
    for (int64_t d : w) wn *= size_t(d);
    m.init(tb::tensorF("w", w, randVec(wn, 60)));
    std::vector<std::string> in = {"x0", "w"};
    if (bias) {
      m.init(tb::tensorF("b", {w[0]}, randVec(size_t(w[0]), 61)));
      in.push_back("b");
    }
    tb::NodeB &n = m.node("Conv", in, {"y"});
    attrs(n);
    m.output("y", FLOAT, {}, false);
    runCase(name, m, {randF(x, 62)});
  };
  {  // hand-checked: 1x1x3x3 input, 2x2 ones kernel, no pad
    tb::Model m;
    m.input("x0", FLOAT, {1, 1, 3, 3});
    m.init(tb::tensorF("w", {1, 1, 2, 2}, {1, 1, 1, 1}));
    m.node("Conv", {"x0", "w"}, {"y"});
    m.output("y", FLOAT, {1, 1, 2, 2});
    RunResult r = runCase("conv_small", m, {makeF({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})});
    checkVals(r, {1, 1, 2, 2}, {12, 16, 24, 28});
  }
  conv("conv_basic_pad1", {2, 3, 8, 8}, {4, 3, 3, 3}, true, [](tb::NodeB &n) { n.ints("pads", {1, 1, 1, 1}); });
  conv("conv_group_stride_dil_asym", {2, 4, 9, 9}, {6, 2, 3, 3}, true, [](tb::NodeB &n) {
    n.i("group", 2).ints("pads", {1, 0, 2, 1}).ints("strides", {2, 1}).ints("dilations", {1, 2});
  });
  conv("conv_depthwise", {1, 8, 10, 10}, {8, 1, 3, 3}, true, [](tb::NodeB &n) { n.i("group", 8).ints("pads", {1, 1, 1, 1}); });
  conv("conv_1x1", {3, 16, 7, 7}, {32, 16, 1, 1}, true, [](tb::NodeB &) {});
  conv("conv_same_upper_s2", {1, 3, 11, 11}, {5, 3, 3, 3}, false, [](tb::NodeB &n) { n.s("auto_pad", "SAME_UPPER").ints("strides", {2, 2}); });
  conv("conv_same_lower", {1, 2, 6, 6}, {3, 2, 4, 4}, false, [](tb::NodeB &n) { n.s("auto_pad", "SAME_LOWER"); });
  conv("conv_valid_kshape", {1, 2, 6, 7}, {3, 2, 2, 3}, true, [](tb::NodeB &n) { n.s("auto_pad", "VALID").ints("kernel_shape", {2, 3}); });
  conv("conv_k_gt_kc", {2, 32, 12, 12}, {24, 32, 3, 3}, true, [](tb::NodeB &n) { n.ints("pads", {1, 1, 1, 1}); });  // K=288
}

void pools() {
  auto pool = [](const std::string &name, const std::string &op, std::vector<int64_t> x, const std::function<void(tb::NodeB &)> &attrs) {
    unary(name, op, {randF(x, 70, -3, 3)}, attrs);
  };
  {
    RunResult r = unary("maxpool_small", "MaxPool", {makeF({1, 1, 3, 3}, {1, 5, 2, 8, 3, 4, 0, 9, 7})},
                        [](tb::NodeB &n) { n.ints("kernel_shape", {2, 2}); });
    checkVals(r, {1, 1, 2, 2}, {8, 5, 9, 9});
  }
  pool("maxpool_k3s2p1", "MaxPool", {2, 3, 7, 7}, [](tb::NodeB &n) { n.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).ints("pads", {1, 1, 1, 1}); });
  pool("maxpool_ceil", "MaxPool", {1, 2, 8, 8}, [](tb::NodeB &n) { n.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).i("ceil_mode", 1); });
  pool("maxpool_dilated", "MaxPool", {1, 2, 9, 9}, [](tb::NodeB &n) { n.ints("kernel_shape", {2, 2}).ints("dilations", {2, 2}); });
  pool("maxpool_same_upper", "MaxPool", {1, 2, 7, 7}, [](tb::NodeB &n) { n.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).s("auto_pad", "SAME_UPPER"); });
  {
    RunResult r = unary("avgpool_pad_exclude", "AveragePool", {makeF({1, 1, 2, 2}, {1, 2, 3, 4})},
                        [](tb::NodeB &n) { n.ints("kernel_shape", {2, 2}).ints("pads", {1, 1, 0, 0}); });
    checkVals(r, {1, 1, 2, 2}, {1, 1.5f, 2, 2.5f});
    r = unary("avgpool_pad_include", "AveragePool", {makeF({1, 1, 2, 2}, {1, 2, 3, 4})},
              [](tb::NodeB &n) { n.ints("kernel_shape", {2, 2}).ints("pads", {1, 1, 0, 0}).i("count_include_pad", 1); });
    checkVals(r, {1, 1, 2, 2}, {0.25f, 0.75f, 1, 2.5f});
  }
  pool("avgpool_k3s2p1_incl", "AveragePool", {2, 3, 7, 7}, [](tb::NodeB &n) {
    n.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).ints("pads", {1, 1, 1, 1}).i("count_include_pad", 1);
  });
  pool("avgpool_k3s2p1_excl", "AveragePool", {2, 3, 7, 7}, [](tb::NodeB &n) { n.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).ints("pads", {1, 1, 1, 1}); });
  pool("avgpool_ceil_incl", "AveragePool", {1, 2, 8, 8}, [](tb::NodeB &n) {
    n.ints("kernel_shape", {3, 3}).ints("strides", {2, 2}).ints("pads", {1, 1, 1, 1}).i("ceil_mode", 1).i("count_include_pad", 1);
  });
  pool("globalavgpool", "GlobalAveragePool", {2, 3, 5, 5}, {});
  pool("globalmaxpool", "GlobalMaxPool", {2, 3, 5, 5}, {});
  {
    tb::Model m;
    m.input("x0", FLOAT, {2, 3, 4, 4});
    m.init(tb::tensorF("s", {3}, {1.f, 0.5f, 2.f}));
    m.init(tb::tensorF("b", {3}, {0.1f, -0.2f, 0.f}));
    m.init(tb::tensorF("mean", {3}, {0.5f, -1.f, 0.2f}));
    m.init(tb::tensorF("var", {3}, {1.f, 0.25f, 4.f}));
    m.node("BatchNormalization", {"x0", "s", "b", "mean", "var"}, {"y"}).f("epsilon", 1e-3f);
    m.output("y", FLOAT, {2, 3, 4, 4});
    runCase("batchnorm", m, {randF({2, 3, 4, 4}, 71)});
  }
}

void shapes() {
  unary("flatten_axis2", "Flatten", {randF({2, 3, 4, 5}, 80)}, [](tb::NodeB &n) { n.i("axis", 2); });
  unary("flatten_axis0", "Flatten", {randF({2, 3, 4}, 81)}, [](tb::NodeB &n) { n.i("axis", 0); });
  unary("flatten_neg", "Flatten", {randF({2, 3, 4}, 82)}, [](tb::NodeB &n) { n.i("axis", -1); });
  auto reshape = [](const std::string &name, std::vector<int64_t> x, std::vector<int64_t> shape) {
    unary(name, "Reshape", {randF(x, 83)}, {}, 17, {"shape"},
          [&](tb::Model &m) { m.init(tb::tensorI64("shape", {int64_t(shape.size())}, shape)); });
  };
  reshape("reshape_zero_neg", {2, 3, 4}, {0, -1});
  reshape("reshape_neg_first", {2, 3, 4}, {-1, 4});
  reshape("reshape_expand", {6, 4}, {2, 3, 2, 2});
  unary("transpose_perm", "Transpose", {randF({2, 3, 4, 5}, 84)}, [](tb::NodeB &n) { n.ints("perm", {0, 2, 3, 1}); });
  unary("transpose_default", "Transpose", {randF({2, 3, 4}, 85)});
  unary("concat_axis1", "Concat", {randF({2, 1, 3}, 86), randF({2, 4, 3}, 87), randF({2, 2, 3}, 88)}, [](tb::NodeB &n) { n.i("axis", 1); });
  unary("concat_neg", "Concat", {randF({2, 3}, 89), randF({2, 5}, 90)}, [](tb::NodeB &n) { n.i("axis", -1); });
  unary("identity", "Identity", {randF({3, 3}, 91)});
  {  // Gather int64 indices (2-D) along axis 0, checked by hand.
    RunResult r = unary("gather_i64_axis0", "Gather", {makeF({3, 2}, {1, 2, 3, 4, 5, 6}), makeI64({2, 2}, {2, 0, -1, 1})});
    checkVals(r, {2, 2, 2}, {5, 6, 1, 2, 5, 6, 3, 4});
  }
  unary("gather_i32_axis1_neg", "Gather", {randF({3, 5, 2}, 92), makeI32({3}, {-1, 0, 3})}, [](tb::NodeB &n) { n.i("axis", 1); });
  unary("gather_scalar_index", "Gather", {randF({4, 6}, 93), makeI64({}, {2})});
  unary("reducemean_attr_op13", "ReduceMean", {randF({2, 3, 4}, 94)}, [](tb::NodeB &n) { n.ints("axes", {1}).i("keepdims", 0); }, 13);
  unary("reducemean_input_op18", "ReduceMean", {randF({2, 3, 4}, 95)}, [](tb::NodeB &n) { n.i("keepdims", 1); }, 18, {"axes"},
        [](tb::Model &m) { m.init(tb::tensorI64("axes", {2}, {-1, 0})); });
  unary("reducemean_all", "ReduceMean", {randF({2, 3, 4}, 96)}, {}, 13);
  unary("reducesum_op13", "ReduceSum", {randF({2, 3, 4}, 97)}, [](tb::NodeB &n) { n.i("keepdims", 0); }, 13, {"axes"},
        [](tb::Model &m) { m.init(tb::tensorI64("axes", {1}, {2})); });
  unary("reducemax", "ReduceMax", {randF({2, 3, 4}, 98)}, [](tb::NodeB &n) { n.ints("axes", {0, 2}); }, 13);
  unary("unsqueeze13", "Unsqueeze", {randF({3, 4}, 99)}, {}, 13, {"axes"}, [](tb::Model &m) { m.init(tb::tensorI64("axes", {2}, {0, -1})); });
  unary("squeeze13", "Squeeze", {randF({1, 3, 1, 4}, 100)}, {}, 13, {"axes"}, [](tb::Model &m) { m.init(tb::tensorI64("axes", {1}, {2})); });
  unary("squeeze_all", "Squeeze", {randF({1, 3, 1, 4}, 101)}, {}, 13);
  {  // torch-style dynamic reshape: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, and Cast.
    tb::Model m;
    m.input("x0", FLOAT, {2, 3, 4});
    m.node("Shape", {"x0"}, {"s"});
    m.node("Constant", {}, {"zero"}).t("value", tb::tensorI64("", {}, {0}));
    m.node("Gather", {"s", "zero"}, {"n"}).i("axis", 0);
    m.node("Constant", {}, {"ax"}).t("value", tb::tensorI64("", {1}, {0}));
    m.node("Unsqueeze", {"n", "ax"}, {"n1"});
    m.node("Constant", {}, {"rest"}).ints("value_ints", {-1});
    m.node("Concat", {"n1", "rest"}, {"shape"}).i("axis", 0);
    m.node("Reshape", {"x0", "shape"}, {"r"});
    m.node("Cast", {"s"}, {"sf"}).i("to", FLOAT);
    m.node("ReduceSum", {"sf"}, {"tot"}).i("keepdims", 1);
    m.node("Add", {"r", "tot"}, {"y"});
    m.output("y", FLOAT, {}, false);
    m.opset = 13;
    runCase("torch_style_reshape_chain", m, {randF({2, 3, 4}, 102)});
  }
}

}  // namespace

void opTests(const char *filter) {
  struct {
    const char *name;
    void (*fn)();
  } tests[] = {{"elementwise", elementwise}, {"softmax", softmaxes}, {"gemm", gemms},
               {"conv", convs},              {"pool", pools},        {"shape", shapes}};
  for (auto &t : tests) {
    if (filter && !std::strstr(t.name, filter)) continue;
    std::printf("ops/%s\n", t.name);
    aclInit(nullptr);
    aclrtSetDevice(0);
    t.fn();
    aclFinalize();
  }
}
