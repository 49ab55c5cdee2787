// Compute primitives: a persistent thread pool and a cache-blocked SGEMM.
#pragma once
#include <cstdint>
#include <functional>

#pragma GCC visibility push(hidden)
namespace sim {

// Runs fn(begin, end) over [0, n) split into chunks of at least grain items on the pool.
// The caller participates; if the pool is busy (another model running) it runs inline.
void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> &fn);
int poolSize();
// Joins the pool threads (aclFinalize); the pool is re-created on next use.
void shutdownPool();

// Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
// op(A) = transA ? A^T : A, A stored with leading dimension lda (same for B).
// beta == 0 overwrites C without reading it. parallel=false keeps it on the calling thread.
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
           const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
           int64_t ldc, bool parallel = true);

// Pre-packing of a constant B operand (weights) so repeated GEMMs skip the packing pass.
size_t packedBFloats(int64_t K, int64_t N);
void packBAll(bool transB, const float *B, int64_t ldb, int64_t K, int64_t N, float *out);
// C = alpha * op(A) * B + beta * C with B given by packBAll (M >= 2).
void sgemmPackedB(bool transA, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const float *packed, float beta, float *C, int64_t ldc, bool parallel = true);
// Blocking constants the packed layout depends on (im2col writes that layout directly).
constexpr int kGemmNR = 16;
constexpr int64_t kGemmKC = 256;

}  // namespace sim
#pragma GCC visibility pop
