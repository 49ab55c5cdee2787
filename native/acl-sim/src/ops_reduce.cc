// ReduceMean / ReduceSum / ReduceMax (listed in kTensorOps, ops_tensor.cc).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops_tensor.h"

namespace sim {
namespace {

enum RedOp { R_MEAN, R_SUM, R_MAX };
template <int OP>
void reduceK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  requireFloat(X, "input");
  const int64_t r = X.rank();
  bool given = false;
  std::vector<int64_t> axes = axesOf(n, g, OP == R_SUM ? 13 : 18, given);
  const bool keep = attrInt(*n.proto, "keepdims", 1) != 0;
  const bool noop = attrInt(*n.proto, "noop_with_empty_axes", 0) != 0;
  std::vector<bool> red(size_t(r), false);
  if (axes.empty()) {
    if (noop) {
      g.out(n, 0).view(X, X.shape);
      return;
    }
    std::fill(red.begin(), red.end(), true);
  }
  for (int64_t a : axes) red[size_t(normAxis(a, r, "axis"))] = true;
  std::vector<int64_t> os, keptShape(static_cast<size_t>(r));
  int64_t count = 1;
  for (int64_t k = 0; k < r; ++k) {
    keptShape[size_t(k)] = red[size_t(k)] ? 1 : X.shape[size_t(k)];
    if (red[size_t(k)]) {
      count *= X.shape[size_t(k)];
      if (keep) os.push_back(1);
    } else {
      os.push_back(X.shape[size_t(k)]);
    }
  }
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_FLOAT, os);
  const int64_t on = Y.numel();
  std::vector<double> acc(size_t(on), OP == R_MAX ? -std::numeric_limits<double>::infinity() : 0.0);
  // Output strides laid over the input axes (0 on reduced axes).
  std::vector<int64_t> ost(size_t(r), 0);
  int64_t s = 1;
  for (int64_t k = r - 1; k >= 0; --k) {
    ost[size_t(k)] = red[size_t(k)] ? 0 : s;
    s *= keptShape[size_t(k)];
  }
  const float *x = X.f();
  const int64_t total = X.numel();
  if (total > 0) {
    if (r == 0) {
      acc[0] = x[0];
    } else {
      const int64_t inner = X.shape[size_t(r - 1)], is = ost[size_t(r - 1)];
      std::vector<int64_t> idx(size_t(r), 0);
      int64_t off = 0;
      for (int64_t o = 0; o < total; o += inner) {
        const float *xo = x + o;
        for (int64_t j = 0; j < inner; ++j) {
          double &a = acc[size_t(off + j * is)];
          if (OP == R_MAX) a = nanMax(a, double(xo[j]));  // one NaN makes the result NaN
          else a += xo[j];
        }
        for (int64_t k = r - 2; k >= 0; --k) {
          ++idx[size_t(k)];
          off += ost[size_t(k)];
          if (idx[size_t(k)] < X.shape[size_t(k)]) break;
          off -= ost[size_t(k)] * X.shape[size_t(k)];
          idx[size_t(k)] = 0;
        }
      }
    }
  }
  float *y = Y.f();
  for (int64_t i = 0; i < on; ++i) {
    y[i] = float(OP == R_MEAN ? (count ? acc[size_t(i)] / double(count) : std::nan("")) : acc[size_t(i)]);
  }
}

}  // namespace

void reduceMeanK(Node &n, Graph &g) { reduceK<R_MEAN>(n, g); }
void reduceSumK(Node &n, Graph &g) { reduceK<R_SUM>(n, g); }
void reduceMaxK(Node &n, Graph &g) { reduceK<R_MAX>(n, g); }

void checkReduce(const NodeProto &n, int64_t) {
  attrInts(n, "axes");
  attrInt(n, "keepdims", 1);
}

}  // namespace sim
