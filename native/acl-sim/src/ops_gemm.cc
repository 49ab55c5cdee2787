// Gemm and MatMul on the blocked SGEMM. A constant B operand is packed once, at the validation
// run, and kept with its node.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "compute.h"
#include "ops.h"

namespace sim {
namespace {

// ------------------------------------------------------------ Gemm / MatMul
// Constant weights are packed once (first run, i.e. the validation run at load) and reused.
struct PackedWeights {
  AlignedBuf buf;
  int64_t K = 0, N = 0;
  bool transB = false;
  const void *src = nullptr;
};

const float *packedWeights(Node &n, Graph &g, const Tensor &B, bool transB, int64_t K, int64_t N) {
  if (!B.isConst) return nullptr;
  auto pw = std::static_pointer_cast<PackedWeights>(n.state);
  if (!pw || pw->K != K || pw->N != N || pw->transB != transB || pw->src != B.data) {
    pw = std::make_shared<PackedWeights>();
    const size_t floats = packedBFloats(K, N);
    packBAll(transB, B.f(), B.shape[1], K, N, static_cast<float *>(pw->buf.ensure(floats * sizeof(float))));
    pw->K = K;
    pw->N = N;
    pw->transB = transB;
    pw->src = B.data;
    if (!n.state) g.stateBytes += floats * sizeof(float);
    n.state = pw;
  }
  return static_cast<const float *>(pw->buf.data());
}

void gemmK(Node &n, Graph &g) {
  const Tensor &A = g.in(n, 0), &B = g.in(n, 1);
  const Tensor *C = g.optIn(n, 2);
  requireFloat(A, "A");
  requireFloat(B, "B");
  if (A.rank() != 2 || B.rank() != 2) execFail("A and B must be 2-D, got " + shapeStr(A.shape) + " and " + shapeStr(B.shape));
  const bool tA = attrInt(*n.proto, "transA", 0) != 0, tB = attrInt(*n.proto, "transB", 0) != 0;
  const float alpha = attrFloat(*n.proto, "alpha", 1.f);
  float beta = attrFloat(*n.proto, "beta", 1.f);
  const int64_t M = tA ? A.shape[1] : A.shape[0], K = tA ? A.shape[0] : A.shape[1];
  const int64_t KB = tB ? B.shape[1] : B.shape[0], N = tB ? B.shape[0] : B.shape[1];
  if (K != KB) execFail("inner dims differ: A " + shapeStr(A.shape) + " B " + shapeStr(B.shape));
  chargeWork(double(M) * double(N) * double(K));
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_FLOAT, {M, N});
  float *y = Y.f();
  if (C && beta != 0.f) {
    requireFloat(*C, "C");
    const std::vector<int64_t> &cs = C->shape;
    const int64_t cr = C->rank();
    if (cr > 2) execFail("C must have rank <= 2");
    const int64_t cm = cr == 2 ? cs[0] : 1, cn = cr >= 1 ? cs[size_t(cr - 1)] : 1;
    if ((cm != 1 && cm != M) || (cn != 1 && cn != N)) {
      execFail("C " + shapeStr(cs) + " does not broadcast to [" + std::to_string(M) + "," + std::to_string(N) + "]");
    }
    const float *c = C->f();
    for (int64_t i = 0; i < M; ++i) {
      const float *crow = c + (cm == 1 ? 0 : i * cn);
      float *yr = y + i * N;
      if (cn == 1) std::fill(yr, yr + N, crow[0]);
      else std::memcpy(yr, crow, size_t(N) * sizeof(float));
    }
  } else {
    beta = 0.f;
  }
  if (M >= 2) {
    if (const float *pk = packedWeights(n, g, B, tB, K, N)) {
      sgemmPackedB(tA, M, N, K, alpha, A.f(), A.shape[1], pk, beta, y, N);
      return;
    }
  }
  sgemm(tA, tB, M, N, K, alpha, A.f(), A.shape[1], B.f(), B.shape[1], beta, y, N);
}

void matmulK(Node &n, Graph &g) {
  const Tensor &A = g.in(n, 0), &B = g.in(n, 1);
  requireFloat(A, "A");
  requireFloat(B, "B");
  if (A.rank() == 0 || B.rank() == 0) execFail("MatMul inputs must have rank >= 1");
  std::vector<int64_t> as = A.shape, bs = B.shape;
  const bool aVec = as.size() == 1, bVec = bs.size() == 1;
  if (aVec) as.insert(as.begin(), 1);
  if (bVec) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), KB = bs[bs.size() - 2], N = bs.back();
  if (K != KB) execFail("inner dims differ: " + shapeStr(A.shape) + " x " + shapeStr(B.shape));
  std::vector<int64_t> ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t br = std::max(ab.size(), bb.size());
  std::vector<int64_t> batch(br);
  for (size_t i = 0; i < br; ++i) {
    const int64_t da = i < br - ab.size() ? 1 : ab[i - (br - ab.size())];
    const int64_t db = i < br - bb.size() ? 1 : bb[i - (br - bb.size())];
    if (da != db && da != 1 && db != 1) execFail("batch dims of " + shapeStr(A.shape) + " and " + shapeStr(B.shape) + " do not broadcast");
    batch[i] = std::max(da, db);
  }
  std::vector<int64_t> os = batch;
  if (!aVec) os.push_back(M);
  if (!bVec) os.push_back(N);
  int64_t nb = 1;
  for (int64_t d : batch) nb *= d;
  chargeWork(double(nb) * double(M) * double(N) * double(K));
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_FLOAT, os);
  int64_t aBatch = 1, bBatch = 1;
  for (int64_t d : ab) aBatch *= d;
  for (int64_t d : bb) bBatch *= d;
  if (bBatch == 1) {  // weights shared by every row: one GEMM with the batch folded into M
    const float *pk = aBatch * M >= 2 && B.rank() == 2 ? packedWeights(n, g, B, false, K, N) : nullptr;
    if (pk) sgemmPackedB(false, aBatch * M, N, K, 1.f, A.f(), K, pk, 0.f, Y.f(), N);
    else sgemm(false, false, aBatch * M, N, K, 1.f, A.f(), K, B.f(), N, 0.f, Y.f(), N);
    return;
  }
  std::vector<int64_t> sa(br, 0), sb(br, 0);
  {
    int64_t acc = 1;
    for (size_t k = ab.size(); k-- > 0;) {
      sa[k + (br - ab.size())] = ab[k] == 1 ? 0 : acc;
      acc *= ab[k];
    }
    acc = 1;
    for (size_t k = bb.size(); k-- > 0;) {
      sb[k + (br - bb.size())] = bb[k] == 1 ? 0 : acc;
      acc *= bb[k];
    }
  }
  for (int64_t t = 0; t < nb; ++t) {
    int64_t rem = t, ia = 0, ib = 0;
    for (size_t k = br; k-- > 0;) {
      const int64_t i = rem % batch[k];
      rem /= batch[k];
      ia += i * sa[k];
      ib += i * sb[k];
    }
    sgemm(false, false, M, N, K, 1.f, A.f() + ia * M * K, K, B.f() + ib * K * N, N, 0.f, Y.f() + t * M * N, N);
  }
}

// ------------------------------------------------------------ load-time checks
void checkGemm(const NodeProto &n, int64_t) {
  attrInt(n, "transA", 0);
  attrInt(n, "transB", 0);
  attrFloat(n, "alpha", 1.f);
  attrFloat(n, "beta", 1.f);
}

}  // namespace

const OpDef kGemmOps[] = {
    {"Gemm", 2, 3, 1, 1, checkGemm, gemmK},
    {"MatMul", 2, 2, 1, 1, nullptr, matmulK},
};
const size_t kGemmOpsCount = sizeof(kGemmOps) / sizeof(kGemmOps[0]);

}  // namespace sim
