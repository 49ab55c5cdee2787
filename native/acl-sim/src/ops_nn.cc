// Neural-network operators: pooling, BatchNormalization, the 2-D window geometry they share with
// Conv, and the kNnOps table (Conv itself: ops_conv.cc).
#include <algorithm>
#include <cmath>
#include <limits>

#include "compute.h"
#include "ops_nn.h"

namespace sim {

// ------------------------------------------------------------ spatial helpers
void resolvePads(const NodeProto &p, Spatial &s, int64_t H, int64_t W, int64_t &OH, int64_t &OW, bool ceilMode) {
  const std::string autoPad = attrStr(p, "auto_pad", "NOTSET");
  const int64_t ekh = s.dh * (s.kh - 1) + 1, ekw = s.dw * (s.kw - 1) + 1;
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    OH = (H + s.sh - 1) / s.sh;
    OW = (W + s.sw - 1) / s.sw;
    const int64_t th = std::max<int64_t>(0, (OH - 1) * s.sh + ekh - H);
    const int64_t tw = std::max<int64_t>(0, (OW - 1) * s.sw + ekw - W);
    const bool upper = autoPad == "SAME_UPPER";
    s.pt = upper ? th / 2 : th - th / 2;
    s.pb = th - s.pt;
    s.pl = upper ? tw / 2 : tw - tw / 2;
    s.pr = tw - s.pl;
    return;
  }
  if (autoPad == "VALID") {
    s.pt = s.pl = s.pb = s.pr = 0;
  }
  auto outDim = [&](int64_t in, int64_t pa, int64_t pb2, int64_t ek, int64_t st) {
    const int64_t span = in + pa + pb2 - ek;
    if (span < 0) execFail("the window is larger than the padded input");
    int64_t o = ceilMode ? (span + st - 1) / st + 1 : span / st + 1;
    if (ceilMode && (o - 1) * st >= in + pa) --o;  // the last window must start inside the input
    return o;
  };
  OH = outDim(H, s.pt, s.pb, ekh, s.sh);
  OW = outDim(W, s.pl, s.pr, ekw, s.sw);
}

Spatial readSpatial(const NodeProto &p, int64_t kh, int64_t kw) {
  Spatial s{kh, kw, 1, 1, 1, 1, 0, 0, 0, 0};
  std::vector<int64_t> st = attrInts(p, "strides"), dl = attrInts(p, "dilations"), pd = attrInts(p, "pads");
  if (!st.empty()) {
    if (st.size() != 2) execFail("strides must have 2 values");
    s.sh = st[0];
    s.sw = st[1];
  }
  if (!dl.empty()) {
    if (dl.size() != 2) execFail("dilations must have 2 values");
    s.dh = dl[0];
    s.dw = dl[1];
  }
  if (!pd.empty()) {
    if (pd.size() != 4) execFail("pads must have 4 values");
    s.pt = pd[0];
    s.pl = pd[1];
    s.pb = pd[2];
    s.pr = pd[3];
  }
  if (s.sh < 1 || s.sw < 1 || s.dh < 1 || s.dw < 1 || s.pt < 0 || s.pl < 0 || s.pb < 0 || s.pr < 0 || s.kh < 1 || s.kw < 1) {
    execFail("invalid strides, dilations, pads or kernel");
  }
  // Below 2^31 each, the window arithmetic (dilation * (kernel - 1), input + pads, ...) cannot
  // wrap int64; a larger value is no real window, and wrapping would silently change it.
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  for (int64_t v : {s.sh, s.sw, s.dh, s.dw, s.pt, s.pl, s.pb, s.pr, s.kh, s.kw}) {
    if (v > kMax) execFail("strides, dilations, pads or kernel out of range (over 2^31 - 1)");
  }
  return s;
}

void checkAutoPad(const NodeProto &n) {
  const std::string ap = attrStr(n, "auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "VALID" && ap != "SAME_UPPER" && ap != "SAME_LOWER") {
    loadFail("auto_pad '" + ap + "' is not supported");
  }
  attrInts(n, "strides");
  attrInts(n, "pads");
  attrInts(n, "dilations");
}

namespace {

// ------------------------------------------------------------ pooling
template <bool MAX>
void poolK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  requireFloat(X, "X");
  if (X.rank() != 4) execFail("only 2-D pooling (4-D input) is supported, got " + shapeStr(X.shape));
  const std::vector<int64_t> ks = attrInts(*n.proto, "kernel_shape");
  if (ks.size() != 2) execFail("kernel_shape must have 2 values");
  Spatial s = readSpatial(*n.proto, ks[0], ks[1]);
  if (!MAX && (s.dh != 1 || s.dw != 1) && g.opset() < 19) execFail("AveragePool dilations need opset 19");
  const bool ceilMode = attrInt(*n.proto, "ceil_mode", 0) != 0;
  const bool includePad = attrInt(*n.proto, "count_include_pad", 0) != 0;
  const int64_t N = X.shape[0], C = X.shape[1], H = X.shape[2], W = X.shape[3];
  int64_t OH, OW;
  resolvePads(*n.proto, s, H, W, OH, OW, ceilMode);
  chargeWork(double(N) * double(C) * double(OH) * double(OW) * double(s.kh) * double(s.kw));
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_FLOAT, {N, C, OH, OW});
  const float *x = X.f();
  float *y = Y.f();
  parallelFor(N * C, 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float *xp = x + p * H * W;
      float *yp = y + p * OH * OW;
      for (int64_t oy = 0; oy < OH; ++oy) {
        for (int64_t ox = 0; ox < OW; ++ox) {
          const int64_t hs = oy * s.sh - s.pt, ws = ox * s.sw - s.pl;
          if (MAX) {
            // Pads are not taps: a window of -Inf gives -Inf, and one NaN makes the window NaN.
            float m = -std::numeric_limits<float>::infinity();
            for (int64_t i = 0; i < s.kh; ++i) {
              const int64_t iy = hs + i * s.dh;
              if (iy < 0 || iy >= H) continue;
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t ix = ws + j * s.dw;
                if (ix < 0 || ix >= W) continue;
                m = nanMax(m, xp[iy * W + ix]);
              }
            }
            yp[oy * OW + ox] = m;
          } else {
            // ORT semantics: with count_include_pad the divisor covers explicit pads but not
            // the extra cells a ceil_mode window hangs past them.
            const int64_t he = std::min(hs + (s.kh - 1) * s.dh + 1, H + s.pb);
            const int64_t we = std::min(ws + (s.kw - 1) * s.dw + 1, W + s.pr);
            double sum = 0;
            int64_t cnt = 0, cntPad = 0;
            for (int64_t i = 0; i < s.kh; ++i) {
              const int64_t iy = hs + i * s.dh;
              if (iy >= he) break;
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t ix = ws + j * s.dw;
                if (ix >= we) break;
                ++cntPad;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                sum += xp[iy * W + ix];
                ++cnt;
              }
            }
            const int64_t div = includePad ? cntPad : cnt;
            yp[oy * OW + ox] = div ? float(sum / double(div)) : 0.f;
          }
        }
      }
    }
  });
}

template <bool MAX>
void globalPoolK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  requireFloat(X, "X");
  if (X.rank() < 3) execFail("input must have rank >= 3, got " + shapeStr(X.shape));
  const int64_t N = X.shape[0], C = X.shape[1];
  int64_t S = 1;
  std::vector<int64_t> os = {N, C};
  for (int64_t k = 2; k < X.rank(); ++k) {
    S *= X.shape[size_t(k)];
    os.push_back(1);
  }
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_FLOAT, os);
  const float *x = X.f();
  float *y = Y.f();
  for (int64_t p = 0; p < N * C; ++p) {
    const float *xp = x + p * S;
    if (MAX) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < S; ++i) m = nanMax(m, xp[i]);
      y[p] = m;
    } else {
      double sum = 0;
      for (int64_t i = 0; i < S; ++i) sum += xp[i];
      y[p] = S ? float(sum / double(S)) : 0.f;
    }
  }
}

// ------------------------------------------------------------ BatchNormalization
void batchNormK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  requireFloat(X, "X");
  if (X.rank() < 2) execFail("input must have rank >= 2");
  const int64_t N = X.shape[0], C = X.shape[1];
  int64_t S = 1;
  for (int64_t k = 2; k < X.rank(); ++k) S *= X.shape[size_t(k)];
  const char *names[4] = {"scale", "B", "mean", "var"};
  const float *p[4];
  for (int i = 0; i < 4; ++i) {
    const Tensor &t = g.in(n, i + 1);
    requireFloat(t, names[i]);
    if (t.numel() != C) execFail(std::string(names[i]) + " has " + std::to_string(t.numel()) + " values for " + std::to_string(C) + " channels");
    p[i] = t.f();
  }
  const float eps = attrFloat(*n.proto, "epsilon", 1e-5f);
  std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    a[size_t(c)] = p[0][c] / std::sqrt(p[3][c] + eps);
    b[size_t(c)] = p[1][c] - p[2][c] * a[size_t(c)];
  }
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_FLOAT, X.shape);
  const float *x = X.f();
  float *y = Y.f();
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      const float *xs = x + (i * C + c) * S;
      float *ys = y + (i * C + c) * S;
      const float av = a[size_t(c)], bv = b[size_t(c)];
      for (int64_t k = 0; k < S; ++k) ys[k] = xs[k] * av + bv;
    }
  }
}

// ------------------------------------------------------------ load-time checks
void checkPool(const NodeProto &n, int64_t) {
  checkAutoPad(n);
  if (attrInts(n, "kernel_shape").size() != 2) {
    fail(ACL_ERROR_MODEL_MISSING_ATTR, "kernel_shape with 2 values is required (2-D pooling only)");
  }
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) loadFail("the MaxPool Indices output is not supported");
  attrInt(n, "ceil_mode", 0);
  attrInt(n, "count_include_pad", 0);
}
void checkBatchNorm(const NodeProto &n, int64_t) {
  if (attrInt(n, "training_mode", 0) != 0) loadFail("training_mode=1 is not supported");
  for (size_t i = 1; i < n.outputs.size(); ++i) {
    if (!n.outputs[i].empty()) loadFail("training outputs (running mean/var) are not supported");
  }
  attrFloat(n, "epsilon", 1e-5f);
}

}  // namespace

const OpDef kNnOps[] = {
    {"Conv", 2, 3, 1, 1, checkConv, convK},
    {"MaxPool", 1, 1, 1, 2, checkPool, poolK<true>},
    {"AveragePool", 1, 1, 1, 1, checkPool, poolK<false>},
    {"GlobalAveragePool", 1, 1, 1, 1, nullptr, globalPoolK<false>},
    {"GlobalMaxPool", 1, 1, 1, 1, nullptr, globalPoolK<true>},
    {"BatchNormalization", 5, 5, 1, 5, checkBatchNorm, batchNormK},
};
const size_t kNnOpsCount = sizeof(kNnOps) / sizeof(kNnOps[0]);

}  // namespace sim
