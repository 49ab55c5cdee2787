// Element-wise operators: numpy-broadcasting binary arithmetic (float32; Add/Sub/Mul/Div also
// int64 and int32), unary activations, Clip, Softmax and LogSoftmax.
#include <algorithm>
#include <cmath>
#include <limits>

#include "compute.h"
#include "ops.h"

namespace sim {
namespace {

// ------------------------------------------------------------ broadcasting binary ops
std::vector<int64_t> broadcastShape(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> o(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      execFail("shapes " + shapeStr(a) + " and " + shapeStr(b) + " are not broadcastable");
    }
    o[i] = da == 1 ? db : da;
  }
  return o;
}

// Strides of `s` (right-aligned to rank r) with 0 on broadcast axes.
std::vector<int64_t> bstrides(const std::vector<int64_t> &s, const std::vector<int64_t> &out) {
  const size_t r = out.size();
  std::vector<int64_t> st(r, 0);
  int64_t acc = 1;
  for (size_t k = s.size(); k-- > 0;) {
    const size_t oi = k + (r - s.size());
    st[oi] = s[k] == 1 && out[oi] != 1 ? 0 : acc;
    acc *= s[k];
  }
  return st;
}

template <class T, class F>
void binaryLoop(const Tensor &A, const Tensor &B, Tensor &Y, F f) {
  const std::vector<int64_t> os = broadcastShape(A.shape, B.shape);
  // Y may alias neither input: kernels never write their own inputs.
  Y.alloc(A.dtype, os);
  const T *a = A.as<T>();
  const T *b = B.as<T>();
  T *y = Y.as<T>();
  const int64_t n = Y.numel();
  if (n == 0) return;
  if (A.shape == B.shape) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
    return;
  }
  if (B.numel() == 1 && A.numel() == n) {
    const T bv = b[0];
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
    return;
  }
  if (A.numel() == 1 && B.numel() == n) {
    const T av = a[0];
    for (int64_t i = 0; i < n; ++i) y[i] = f(av, b[i]);
    return;
  }
  const size_t r = os.size();
  const std::vector<int64_t> sa = bstrides(A.shape, os), sb = bstrides(B.shape, os);
  const int64_t inner = os[r - 1];
  const int64_t ia = sa[r - 1], ib = sb[r - 1];
  std::vector<int64_t> idx(r, 0);
  int64_t offA = 0, offB = 0;
  for (int64_t o = 0; o < n; o += inner) {
    T *yo = y + o;
    if (ia == 1 && ib == 1) {
      for (int64_t j = 0; j < inner; ++j) yo[j] = f(a[offA + j], b[offB + j]);
    } else if (ia == 1 && ib == 0) {
      const T bv = b[offB];
      for (int64_t j = 0; j < inner; ++j) yo[j] = f(a[offA + j], bv);
    } else if (ia == 0 && ib == 1) {
      const T av = a[offA];
      for (int64_t j = 0; j < inner; ++j) yo[j] = f(av, b[offB + j]);
    } else {
      for (int64_t j = 0; j < inner; ++j) yo[j] = f(a[offA + j * ia], b[offB + j * ib]);
    }
    for (size_t k = r - 1; k-- > 0;) {  // odometer over the outer axes
      ++idx[k];
      offA += sa[k];
      offB += sb[k];
      if (idx[k] < os[k]) break;
      offA -= sa[k] * os[k];
      offB -= sb[k] * os[k];
      idx[k] = 0;
    }
  }
}

enum BinOp { B_ADD, B_SUB, B_MUL, B_DIV, B_POW };

template <int OP>
void binaryKernel(Node &n, Graph &g) {
  const Tensor &A = g.in(n, 0), &B = g.in(n, 1);
  Tensor &Y = g.out(n, 0);
  if (A.dtype != B.dtype) {
    execFail(std::string("input types differ: ") + onnxTypeName(A.dtype) + " vs " + onnxTypeName(B.dtype));
  }
  if (A.dtype == ONNX_FLOAT) {
    switch (OP) {
      case B_ADD: binaryLoop<float>(A, B, Y, [](float x, float y) { return x + y; }); break;
      case B_SUB: binaryLoop<float>(A, B, Y, [](float x, float y) { return x - y; }); break;
      case B_MUL: binaryLoop<float>(A, B, Y, [](float x, float y) { return x * y; }); break;
      case B_DIV: binaryLoop<float>(A, B, Y, [](float x, float y) { return x / y; }); break;
      case B_POW: binaryLoop<float>(A, B, Y, [](float x, float y) { return std::pow(x, y); }); break;
    }
    return;
  }
  auto intOps = [&](auto tag) {
    using T = decltype(tag);
    switch (OP) {
      case B_ADD: binaryLoop<T>(A, B, Y, [](T x, T y) { return T(uint64_t(x) + uint64_t(y)); }); break;
      case B_SUB: binaryLoop<T>(A, B, Y, [](T x, T y) { return T(uint64_t(x) - uint64_t(y)); }); break;
      case B_MUL: binaryLoop<T>(A, B, Y, [](T x, T y) { return T(uint64_t(x) * uint64_t(y)); }); break;
      case B_DIV:
        binaryLoop<T>(A, B, Y, [](T x, T y) -> T {
          if (y == 0) {
            if (validationRun()) return T(0);  // the load-time run's zero inputs, not real data
            execFail("integer division by zero");
          }
          if (y == -1) return T(uint64_t(0) - uint64_t(x));  // wraps MIN to MIN: no trap, no signed overflow
          return x / y;
        });
        break;
      default: execFail("Pow supports float32 only");
    }
  };
  if (A.dtype == ONNX_INT64) intOps(int64_t{});
  else if (A.dtype == ONNX_INT32) intOps(int32_t{});
  else execFail(std::string("unsupported type ") + onnxTypeName(A.dtype));
}

// ------------------------------------------------------------ unary ops
template <class F>
void unaryFloat(Node &n, Graph &g, F f) {
  const Tensor &X = g.in(n, 0);
  requireFloat(X, "input");
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_FLOAT, X.shape);
  const float *x = X.f();
  float *y = Y.f();
  const int64_t cnt = X.numel();
  if (cnt >= (1 << 17)) {
    parallelFor(cnt, 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
    });
  } else {
    for (int64_t i = 0; i < cnt; ++i) y[i] = f(x[i]);
  }
}

inline float sigmoid(float v) {
  if (v >= 0) return 1.f / (1.f + std::exp(-v));
  const float e = std::exp(v);
  return e / (1.f + e);
}

// NaN stays NaN, as in onnxruntime (max(x, 0) propagating NaN).
void reluK(Node &n, Graph &g) { unaryFloat(n, g, [](float v) { return v < 0.f ? 0.f : v; }); }
void sigmoidK(Node &n, Graph &g) { unaryFloat(n, g, sigmoid); }
void tanhK(Node &n, Graph &g) { unaryFloat(n, g, [](float v) { return std::tanh(v); }); }
void expK(Node &n, Graph &g) { unaryFloat(n, g, [](float v) { return std::exp(v); }); }
void logK(Node &n, Graph &g) { unaryFloat(n, g, [](float v) { return std::log(v); }); }
void sqrtK(Node &n, Graph &g) { unaryFloat(n, g, [](float v) { return std::sqrt(v); }); }
void negK(Node &n, Graph &g) { unaryFloat(n, g, [](float v) { return -v; }); }
void absK(Node &n, Graph &g) { unaryFloat(n, g, [](float v) { return std::fabs(v); }); }
void erfK(Node &n, Graph &g) { unaryFloat(n, g, [](float v) { return std::erf(v); }); }
void reciprocalK(Node &n, Graph &g) { unaryFloat(n, g, [](float v) { return 1.f / v; }); }
void leakyReluK(Node &n, Graph &g) {
  const float alpha = attrFloat(*n.proto, "alpha", 0.01f);
  unaryFloat(n, g, [alpha](float v) { return v >= 0.f ? v : alpha * v; });
}
void eluK(Node &n, Graph &g) {
  const float alpha = attrFloat(*n.proto, "alpha", 1.f);
  unaryFloat(n, g, [alpha](float v) { return v >= 0.f ? v : alpha * (std::exp(v) - 1.f); });
}
void clipK(Node &n, Graph &g) {
  // A missing bound is the largest finite float (the spec's defaults, as in onnxruntime), so
  // Clip without a bound still turns ±Inf into ±FLT_MAX.
  float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
  if (g.opset() < 11) {
    lo = attrFloat(*n.proto, "min", lo);
    hi = attrFloat(*n.proto, "max", hi);
  } else {
    if (const Tensor *t = g.optIn(n, 1)) {
      requireFloat(*t, "min");
      if (t->numel() != 1) execFail("min must be a scalar");
      lo = t->f()[0];
    }
    if (const Tensor *t = g.optIn(n, 2)) {
      requireFloat(*t, "max");
      if (t->numel() != 1) execFail("max must be a scalar");
      hi = t->f()[0];
    }
  }
  unaryFloat(n, g, [lo, hi](float v) { return std::min(std::max(v, lo), hi); });
}

// ------------------------------------------------------------ softmax
void softmaxImpl(Node &n, Graph &g, bool logMode) {
  const Tensor &X = g.in(n, 0);
  requireFloat(X, "input");
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_FLOAT, X.shape);
  const int64_t r = X.rank();
  if (r == 0) execFail("softmax of a scalar");
  int64_t outer = 1, dim = 1, inner = 1;
  if (g.opset() < 13) {  // coerced to 2-D [prod(d[:axis]), prod(d[axis:])]
    const int64_t axis = normAxis(attrInt(*n.proto, "axis", 1), r, "axis", true);
    for (int64_t i = 0; i < axis; ++i) outer *= X.shape[size_t(i)];
    for (int64_t i = axis; i < r; ++i) dim *= X.shape[size_t(i)];
  } else {
    const int64_t axis = normAxis(attrInt(*n.proto, "axis", -1), r, "axis");
    for (int64_t i = 0; i < axis; ++i) outer *= X.shape[size_t(i)];
    dim = X.shape[size_t(axis)];
    for (int64_t i = axis + 1; i < r; ++i) inner *= X.shape[size_t(i)];
  }
  const float *x = X.f();
  float *y = Y.f();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const float *xs = x + o * dim * inner + in;
      float *ys = y + o * dim * inner + in;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t d = 0; d < dim; ++d) mx = std::max(mx, xs[d * inner]);
      double sum = 0;
      for (int64_t d = 0; d < dim; ++d) {
        const float e = std::exp(xs[d * inner] - mx);
        ys[d * inner] = e;
        sum += e;
      }
      if (logMode) {
        const float ls = float(std::log(sum));
        for (int64_t d = 0; d < dim; ++d) ys[d * inner] = xs[d * inner] - mx - ls;
      } else {
        const float inv = float(1.0 / sum);
        for (int64_t d = 0; d < dim; ++d) ys[d * inner] *= inv;
      }
    }
  }
}
void softmaxK(Node &n, Graph &g) { softmaxImpl(n, g, false); }
void logSoftmaxK(Node &n, Graph &g) { softmaxImpl(n, g, true); }

}  // namespace

const OpDef kElementwiseOps[] = {
    {"Add", 2, 2, 1, 1, nullptr, binaryKernel<B_ADD>},
    {"Sub", 2, 2, 1, 1, nullptr, binaryKernel<B_SUB>},
    {"Mul", 2, 2, 1, 1, nullptr, binaryKernel<B_MUL>},
    {"Div", 2, 2, 1, 1, nullptr, binaryKernel<B_DIV>},
    {"Pow", 2, 2, 1, 1, nullptr, binaryKernel<B_POW>},
    {"Relu", 1, 1, 1, 1, nullptr, reluK},
    {"Sigmoid", 1, 1, 1, 1, nullptr, sigmoidK},
    {"Tanh", 1, 1, 1, 1, nullptr, tanhK},
    {"Exp", 1, 1, 1, 1, nullptr, expK},
    {"Log", 1, 1, 1, 1, nullptr, logK},
    {"Sqrt", 1, 1, 1, 1, nullptr, sqrtK},
    {"Neg", 1, 1, 1, 1, nullptr, negK},
    {"Abs", 1, 1, 1, 1, nullptr, absK},
    {"Erf", 1, 1, 1, 1, nullptr, erfK},
    {"Reciprocal", 1, 1, 1, 1, nullptr, reciprocalK},
    {"LeakyRelu", 1, 1, 1, 1, nullptr, leakyReluK},
    {"Elu", 1, 1, 1, 1, nullptr, eluK},
    {"Clip", 1, 3, 1, 1, nullptr, clipK},
    {"Softmax", 1, 1, 1, 1, checkAxis, softmaxK},
    {"LogSoftmax", 1, 1, 1, 1, checkAxis, logSoftmaxK},
};
const size_t kElementwiseOpsCount = sizeof(kElementwiseOps) / sizeof(kElementwiseOps[0]);

}  // namespace sim
