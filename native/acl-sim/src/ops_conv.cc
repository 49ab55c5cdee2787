// Conv: im2col (written straight into the packed GEMM layout where it pays) + SGEMM.
#include <algorithm>

#include "compute.h"
#include "ops_nn.h"

namespace sim {
namespace {

// Row k = (c*kh + i)*kw + j of the im2col matrix: d[oy*OW + ox] = x[c][oy*sh - pt + i*dh][ox*sw - pl + j*dw]
// (0 outside the input). Plain loops: the rows are short, so library calls per run cost more
// than the copies (and GCC must not turn the loops back into memcpy/memset calls).
__attribute__((optimize("no-tree-loop-distribute-patterns")))
void im2colRow(const float *xc, int64_t H, int64_t W, const Spatial &s, int64_t OH, int64_t OW, int64_t i, int64_t j, float *dst) {
  for (int64_t oy = 0; oy < OH; ++oy) {
    const int64_t iy = oy * s.sh - s.pt + i * s.dh;
    float *d = dst + oy * OW;
    if (iy < 0 || iy >= H) {
      for (int64_t ox = 0; ox < OW; ++ox) d[ox] = 0.f;
      continue;
    }
    const float *row = xc + iy * W;
    const int64_t off = j * s.dw - s.pl;
    if (s.sw == 1) {
      // valid ox range: 0 <= ox + off < W
      const int64_t lo = std::clamp<int64_t>(-off, 0, OW), hi = std::max(lo, std::clamp<int64_t>(W - off, 0, OW));
      for (int64_t ox = 0; ox < lo; ++ox) d[ox] = 0.f;
      const float *src = row + off;
      for (int64_t ox = lo; ox < hi; ++ox) d[ox] = src[ox];
      for (int64_t ox = hi; ox < OW; ++ox) d[ox] = 0.f;
    } else {
      for (int64_t ox = 0; ox < OW; ++ox) {
        const int64_t ix = ox * s.sw + off;
        d[ox] = ix >= 0 && ix < W ? row[ix] : 0.f;
      }
    }
  }
}

// Writes the im2col matrix [C*kh*kw, OH*OW] straight into the packed-B layout of packBAll
// (16-column slivers, KC-row panels), so the GEMM skips its packing pass. Column p of row k
// lives at panel(k) + (p / 16) * kc * 16 + (k - panelStart) * 16 + p % 16.
struct PackedRow {
  float *base;      // panel start + row offset within the sliver
  int64_t sliver;   // kc * 16: distance between consecutive slivers
  __attribute__((always_inline)) float *at(int64_t p) const { return base + (p >> 4) * sliver + (p & 15); }
  // Copies n values (src == nullptr: zeros) to columns p..p+n-1, one sliver fragment at a time.
  __attribute__((always_inline)) void put(int64_t p, const float *src, int64_t n) const {
    while (n > 0) {
      const int64_t m = std::min<int64_t>(n, 16 - (p & 15));
      float *d = at(p);
      if (src) {
        for (int64_t q = 0; q < m; ++q) d[q] = src[q];
        src += m;
      } else {
        for (int64_t q = 0; q < m; ++q) d[q] = 0.f;
      }
      p += m;
      n -= m;
    }
  }
};

__attribute__((optimize("no-tree-loop-distribute-patterns")))
void im2colPacked(const float *x, int64_t C, int64_t H, int64_t W, const Spatial &s, int64_t OH, int64_t OW, float *packed) {
  constexpr int64_t kNR = kGemmNR, kKC = kGemmKC;
  const int64_t P = OH * OW, K = C * s.kh * s.kw, Npad = (P + kNR - 1) / kNR * kNR;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t c = k / (s.kh * s.kw), i = (k / s.kw) % s.kh, j = k % s.kw;
    const int64_t pc = k / kKC * kKC, kc = std::min<int64_t>(kKC, K - pc);
    const PackedRow pr{packed + pc * Npad + (k - pc) * kNR, kc * kNR};
    const float *xc = x + c * H * W;
    const int64_t off = j * s.dw - s.pl;
    for (int64_t oy = 0; oy < OH; ++oy) {
      const int64_t iy = oy * s.sh - s.pt + i * s.dh;
      const int64_t p = oy * OW;
      if (iy < 0 || iy >= H) {
        pr.put(p, nullptr, OW);
        continue;
      }
      const float *row = xc + iy * W;
      if (s.sw == 1) {
        const int64_t lo = std::clamp<int64_t>(-off, 0, OW), hi = std::max(lo, std::clamp<int64_t>(W - off, 0, OW));
        pr.put(p, nullptr, lo);
        pr.put(p + lo, row + off + lo, hi - lo);
        pr.put(p + hi, nullptr, OW - hi);
      } else {
        for (int64_t ox = 0; ox < OW; ++ox) {
          const int64_t ix = ox * s.sw + off;
          *pr.at(p + ox) = ix >= 0 && ix < W ? row[ix] : 0.f;
        }
      }
    }
    pr.put(P, nullptr, Npad - P);
  }
}

thread_local AlignedBuf tl_col;

}  // namespace

void convK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0), &Wt = g.in(n, 1);
  const Tensor *Bt = g.optIn(n, 2);
  requireFloat(X, "X");
  requireFloat(Wt, "W");
  if (X.rank() != 4 || Wt.rank() != 4) execFail("only 2-D convolution (4-D X and W) is supported, got X " + shapeStr(X.shape));
  const int64_t N = X.shape[0], C = X.shape[1], H = X.shape[2], W = X.shape[3];
  const int64_t M = Wt.shape[0], Cg = Wt.shape[1];
  const int64_t group = attrInt(*n.proto, "group", 1);
  if (group < 1 || C != Cg * group || M % group) {
    execFail("channels do not match: X " + shapeStr(X.shape) + ", W " + shapeStr(Wt.shape) + ", group " + std::to_string(group));
  }
  std::vector<int64_t> ks = attrInts(*n.proto, "kernel_shape");
  if (!ks.empty() && (ks.size() != 2 || ks[0] != Wt.shape[2] || ks[1] != Wt.shape[3])) execFail("kernel_shape does not match W");
  Spatial s = readSpatial(*n.proto, Wt.shape[2], Wt.shape[3]);
  int64_t OH, OW;
  resolvePads(*n.proto, s, H, W, OH, OW, false);
  if (Bt) {
    requireFloat(*Bt, "B");
    if (Bt->numel() != M) execFail("bias has " + std::to_string(Bt->numel()) + " values for " + std::to_string(M) + " channels");
  }
  chargeWork(double(N) * double(M) * double(OH) * double(OW) * double(Cg) * double(s.kh) * double(s.kw));
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_FLOAT, {N, M, OH, OW});
  const int64_t Mg = M / group, Kd = Cg * s.kh * s.kw, P = OH * OW;
  const bool direct = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.pt == 0 && s.pl == 0 && s.pb == 0 && s.pr == 0;
  const float *x = X.f(), *w = Wt.f(), *b = Bt ? Bt->f() : nullptr;
  float *y = Y.f();
  const int64_t tasks = N * group;
  auto one = [&](int64_t t, bool parallelGemm) {
    const int64_t img = t / group, gi = t % group;
    const float *xg = x + (img * C + gi * Cg) * H * W;
    float *yg = y + (img * M + gi * Mg) * P;
    float beta = 0.f;
    if (b) {
      for (int64_t m = 0; m < Mg; ++m) std::fill(yg + m * P, yg + (m + 1) * P, b[gi * Mg + m]);
      beta = 1.f;
    }
    if (direct || Mg == 1) {
      const float *col = xg;
      if (!direct) {
        float *c = static_cast<float *>(tl_col.ensure(size_t(Kd * P) * sizeof(float)));
        for (int64_t k = 0; k < Kd; ++k) {
          im2colRow(xg + (k / (s.kh * s.kw)) * H * W, H, W, s, OH, OW, (k / s.kw) % s.kh, k % s.kw, c + k * P);
        }
        col = c;
      }
      sgemm(false, false, Mg, P, Kd, 1.f, w + gi * Mg * Kd, Kd, col, P, beta, yg, P, parallelGemm);
      return;
    }
    float *packed = static_cast<float *>(tl_col.ensure(packedBFloats(Kd, P) * sizeof(float)));
    im2colPacked(xg, Cg, H, W, s, OH, OW, packed);
    sgemmPackedB(false, Mg, P, Kd, 1.f, w + gi * Mg * Kd, Kd, packed, beta, yg, P, parallelGemm);
  };
  if (tasks >= poolSize() && tasks > 1) {
    parallelFor(tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) one(t, false);
    });
  } else {
    for (int64_t t = 0; t < tasks; ++t) one(t, true);
  }
}

void checkConv(const NodeProto &n, int64_t) {
  checkAutoPad(n);
  attrInt(n, "group", 1);
  attrInts(n, "kernel_shape");
}

}  // namespace sim
