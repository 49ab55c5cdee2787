// A BLIS-style cache-blocked SGEMM (packed panels, 6x16 register tile, AVX2/FMA micro-kernel
// chosen at run time with a portable fallback).
#if (defined(__x86_64__) || defined(__i386__)) && !defined(ACLSIM_NO_X86)
#define ACLSIM_X86 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compute.h"
#include "sim_common.h"

namespace sim {

// ---------------------------------------------------------------- sgemm
namespace {

constexpr int MR = 6;
constexpr int NR = kGemmNR;
constexpr int64_t KC = kGemmKC;
constexpr int64_t MC = 96;   // multiple of MR
constexpr int64_t NC = 2048; // multiple of NR

using Kernel = void (*)(int64_t kc, const float *Ap, const float *Bp, float *C, int64_t ldc,
                        float alpha, float beta, int mr, int nr);

void storeTile(const float *acc, float *C, int64_t ldc, float alpha, float beta, int mr, int nr) {
  for (int r = 0; r < mr; ++r) {
    float *c = C + r * ldc;
    const float *a = acc + r * NR;
    if (beta == 0.f) {
      for (int j = 0; j < nr; ++j) c[j] = alpha * a[j];
    } else {
      for (int j = 0; j < nr; ++j) c[j] = alpha * a[j] + beta * c[j];
    }
  }
}

// Portable micro-kernel with GCC/Clang vector extensions (SSE2 on x86-64, NEON on aarch64):
// two passes of 6x8 so the 12 accumulator vectors stay in the 16 SIMD registers of SSE2.
typedef float v4f __attribute__((vector_size(16)));

void kernelGeneric(int64_t kc, const float *Ap, const float *Bp, float *C, int64_t ldc,
                   float alpha, float beta, int mr, int nr) {
  alignas(64) float acc[MR * NR];
  for (int half = 0; half < NR; half += 8) {
    v4f c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {};
    v4f c30 = {}, c31 = {}, c40 = {}, c41 = {}, c50 = {}, c51 = {};
    const float *a = Ap;
    const float *b = Bp + half;
    for (int64_t k = 0; k < kc; ++k) {
      v4f b0, b1;
      std::memcpy(&b0, b, 16);
      std::memcpy(&b1, b + 4, 16);
      v4f av;
      av = v4f{} + a[0]; c00 += av * b0; c01 += av * b1;
      av = v4f{} + a[1]; c10 += av * b0; c11 += av * b1;
      av = v4f{} + a[2]; c20 += av * b0; c21 += av * b1;
      av = v4f{} + a[3]; c30 += av * b0; c31 += av * b1;
      av = v4f{} + a[4]; c40 += av * b0; c41 += av * b1;
      av = v4f{} + a[5]; c50 += av * b0; c51 += av * b1;
      a += MR;
      b += NR;
    }
    const v4f rows[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    for (int r = 0; r < MR; ++r) {
      std::memcpy(acc + r * NR + half, &rows[r][0], 16);
      std::memcpy(acc + r * NR + half + 4, &rows[r][1], 16);
    }
  }
  storeTile(acc, C, ldc, alpha, beta, mr, nr);
}

#ifdef ACLSIM_X86
__attribute__((target("avx2,fma"))) void kernelAvx2(int64_t kc, const float *Ap, const float *Bp,
                                                     float *C, int64_t ldc, float alpha,
                                                     float beta, int mr, int nr) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(Bp);
    const __m256 b1 = _mm256_load_ps(Bp + 8);
    __m256 a;
    a = _mm256_broadcast_ss(Ap + 0); c00 = _mm256_fmadd_ps(a, b0, c00); c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(Ap + 1); c10 = _mm256_fmadd_ps(a, b0, c10); c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(Ap + 2); c20 = _mm256_fmadd_ps(a, b0, c20); c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(Ap + 3); c30 = _mm256_fmadd_ps(a, b0, c30); c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(Ap + 4); c40 = _mm256_fmadd_ps(a, b0, c40); c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(Ap + 5); c50 = _mm256_fmadd_ps(a, b0, c50); c51 = _mm256_fmadd_ps(a, b1, c51);
    Ap += MR;
    Bp += NR;
  }
  const __m256 va = _mm256_set1_ps(alpha);
  if (mr == MR && nr == NR) {
    const __m256 vb = _mm256_set1_ps(beta);
    __m256 rows[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    for (int r = 0; r < MR; ++r) {
      float *c = C + r * ldc;
      __m256 v0 = _mm256_mul_ps(va, rows[r][0]);
      __m256 v1 = _mm256_mul_ps(va, rows[r][1]);
      if (beta != 0.f) {
        v0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c), v0);
        v1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + 8), v1);
      }
      _mm256_storeu_ps(c, v0);
      _mm256_storeu_ps(c + 8, v1);
    }
    return;
  }
  alignas(64) float acc[MR * NR];
  _mm256_store_ps(acc + 0, c00); _mm256_store_ps(acc + 8, c01);
  _mm256_store_ps(acc + 16, c10); _mm256_store_ps(acc + 24, c11);
  _mm256_store_ps(acc + 32, c20); _mm256_store_ps(acc + 40, c21);
  _mm256_store_ps(acc + 48, c30); _mm256_store_ps(acc + 56, c31);
  _mm256_store_ps(acc + 64, c40); _mm256_store_ps(acc + 72, c41);
  _mm256_store_ps(acc + 80, c50); _mm256_store_ps(acc + 88, c51);
  storeTile(acc, C, ldc, alpha, beta, mr, nr);
}

#endif

Kernel pickKernel() {
#ifdef ACLSIM_X86
  __builtin_cpu_init();
  if (std::getenv("NPU_FLEET_SIM_NO_AVX") == nullptr && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    return kernelAvx2;
  }
#endif
  return kernelGeneric;  // other architectures: portable code the compiler vectorises
}
const Kernel g_kernel = pickKernel();

// Packs op(A)[i0:i0+mc, k0:k0+kc] into MR-row slivers, zero-padded.
void packA(bool transA, const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
           int64_t kc, float *Ap) {
  for (int64_t s = 0; s < mc; s += MR) {
    const int rows = int(std::min<int64_t>(MR, mc - s));
    float *dst = Ap + s * kc;
    if (!transA) {
      for (int r = 0; r < MR; ++r) {
        if (r < rows) {
          const float *src = A + (i0 + s + r) * lda + k0;
          for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = src[k];
        } else {
          for (int64_t k = 0; k < kc; ++k) dst[k * MR + r] = 0.f;
        }
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const float *src = A + (k0 + k) * lda + i0 + s;
        int r = 0;
        for (; r < rows; ++r) dst[k * MR + r] = src[r];
        for (; r < MR; ++r) dst[k * MR + r] = 0.f;
      }
    }
  }
}

// Packs op(B)[k0:k0+kc, j0:j0+nc] into NR-column slivers, zero-padded.
void packB(bool transB, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
           int64_t nc, float *Bp) {
  for (int64_t s = 0; s < nc; s += NR) {
    const int cols = int(std::min<int64_t>(NR, nc - s));
    float *dst = Bp + s * kc;
    if (!transB) {
      for (int64_t k = 0; k < kc; ++k) {
        const float *src = B + (k0 + k) * ldb + j0 + s;
        float *d = dst + k * NR;
        if (cols == NR) {
          std::memcpy(d, src, NR * sizeof(float));
        } else {
          int c = 0;
          for (; c < cols; ++c) d[c] = src[c];
          for (; c < NR; ++c) d[c] = 0.f;
        }
      }
    } else {
      for (int c = 0; c < NR; ++c) {
        if (c < cols) {
          const float *src = B + (j0 + s + c) * ldb + k0;
          for (int64_t k = 0; k < kc; ++k) dst[k * NR + c] = src[k];
        } else {
          for (int64_t k = 0; k < kc; ++k) dst[k * NR + c] = 0.f;
        }
      }
    }
  }
}

thread_local AlignedBuf tl_packA, tl_packB;

// pre: B already packed for the whole matrix (packBAll layout, Npad columns); jOff: column of
// this call's first output column within that matrix.
void sgemmSerial(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc, const float *pre = nullptr, int64_t preNpad = 0, int64_t jOff = 0) {
  // alpha == 0 still runs the product: 0 * (A·B) is NaN where A·B is ±Inf or NaN, as in
  // onnxruntime (BLAS's "A and B are not referenced" would hide a poisoned input).
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i) {
      float *c = C + i * ldc;
      for (int64_t j = 0; j < N; ++j) c[j] = beta == 0.f ? 0.f : beta * c[j];
    }
    return;
  }
  const int64_t ncMax = std::min<int64_t>(NC, (N + NR - 1) / NR * NR);
  const int64_t kcMax = std::min<int64_t>(KC, K);
  const int64_t mcMax = std::min<int64_t>(MC, (M + MR - 1) / MR * MR);
  float *Bbuf = pre ? nullptr : static_cast<float *>(tl_packB.ensure(size_t(ncMax * kcMax) * sizeof(float)));
  float *Ap = static_cast<float *>(tl_packA.ensure(size_t(mcMax * kcMax) * sizeof(float)));
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min<int64_t>(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min<int64_t>(KC, K - pc);
      const float b = pc == 0 ? beta : 1.f;
      const float *Bp = Bbuf;
      if (pre) Bp = pre + pc * preNpad + (jOff + jc) * kc;
      else packB(transB, B, ldb, pc, kc, jc, nc, Bbuf);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min<int64_t>(MC, M - ic);
        packA(transA, A, lda, ic, mc, pc, kc, Ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int nr = int(std::min<int64_t>(NR, nc - jr));
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int mr = int(std::min<int64_t>(MR, mc - ir));
            g_kernel(kc, Ap + ir * kc, Bp + jr * kc, C + (ic + ir) * ldc + jc + jr, ldc, alpha, b,
                     mr, nr);
          }
        }
      }
    }
  }
}

// Splits C into a grid of tiles (column tiles aligned to NR), one serial blocked GEMM each.
void gridGemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int nt,
              const float *pre, int64_t preNpad) {
  const int64_t nBlocks = (N + NR - 1) / NR;
  const int64_t mBlocks = (M + MR - 1) / MR;
  int64_t nC = std::min<int64_t>(nBlocks, nt);
  int64_t mC = std::min<int64_t>(mBlocks, std::max<int64_t>(1, (nt * 2) / nC));
  if (nC * mC < nt * 2 && nBlocks > nC) nC = std::min<int64_t>(nBlocks, (nt * 2 + mC - 1) / mC);
  const int64_t nStep = (nBlocks + nC - 1) / nC * NR;
  const int64_t mStep = (mBlocks + mC - 1) / mC * MR;
  nC = (N + nStep - 1) / nStep;
  mC = (M + mStep - 1) / mStep;
  parallelFor(nC * mC, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t mi = t / nC, nj = t % nC;
      const int64_t i0 = mi * mStep, j0 = nj * nStep;
      const int64_t mm = std::min(mStep, M - i0), nn = std::min(nStep, N - j0);
      const float *Asub = transA ? A + i0 : A + i0 * lda;
      const float *Bsub = pre ? nullptr : (transB ? B + j0 * ldb : B + j0);
      sgemmSerial(transA, transB, mm, nn, K, alpha, Asub, lda, Bsub, ldb, beta, C + i0 * ldc + j0, ldc, pre, preNpad, j0);
    }
  });
}

// Dot product and axpy for the M == 1 case, where a 6-row tile wastes 5/6 of the work.
#ifdef ACLSIM_X86
__attribute__((target("avx2,fma"))) float dotAvx2(const float *a, const float *b, int64_t K) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 16), _mm256_loadu_ps(b + k + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 24), _mm256_loadu_ps(b + k + 24), s3);
  }
  for (; k + 8 <= K; k += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), s0);
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  float s = 0.f;
  for (; k < K; ++k) s += a[k] * b[k];
  for (float v : t) s += v;
  return s;
}
#endif
float dotGeneric(const float *a, const float *b, int64_t K) {
  float acc[16] = {};
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += a[k + l] * b[k + l];
  }
  float s = 0.f;
  for (; k < K; ++k) s += a[k] * b[k];
  for (float v : acc) s += v;
  return s;
}
#ifdef ACLSIM_X86
__attribute__((target("avx2,fma"))) void axpyAvx2(float av, const float *b, float *y, int64_t n) {
  const __m256 va = _mm256_set1_ps(av);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, _mm256_fmadd_ps(va, _mm256_loadu_ps(b + j), _mm256_loadu_ps(y + j)));
  for (; j < n; ++j) y[j] += av * b[j];
}
#endif
void axpyGeneric(float av, const float *b, float *y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += av * b[j];
}
#ifdef ACLSIM_X86
const bool g_avx2 = g_kernel == kernelAvx2;
#else
constexpr bool g_avx2 = false;
float dotAvx2(const float *a, const float *b, int64_t K) { return dotGeneric(a, b, K); }
void axpyAvx2(float av, const float *b, float *y, int64_t n) { axpyGeneric(av, b, y, n); }
#endif

void gemvRow(bool transB, int64_t K, float alpha, const float *a, const float *B, int64_t ldb, float beta,
             float *y, int64_t j0, int64_t j1) {
  if (transB) {
    for (int64_t j = j0; j < j1; ++j) {
      const float s = g_avx2 ? dotAvx2(a, B + j * ldb, K) : dotGeneric(a, B + j * ldb, K);
      y[j] = alpha * s + (beta == 0.f ? 0.f : beta * y[j]);
    }
  } else {
    for (int64_t j = j0; j < j1; ++j) y[j] = beta == 0.f ? 0.f : beta * y[j];
    for (int64_t k = 0; k < K; ++k) {
      if (g_avx2) axpyAvx2(alpha * a[k], B + k * ldb + j0, y + j0, j1 - j0);
      else axpyGeneric(alpha * a[k], B + k * ldb + j0, y + j0, j1 - j0);
    }
  }
}

}  // namespace

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
           const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
           int64_t ldc, bool parallel) {
  if (M <= 0 || N <= 0) return;
  const double flops = double(M) * double(N) * double(K);
  const int nt = parallel ? poolSize() : 1;
  if (M == 1 && K > 0) {
    std::vector<float> arow;
    const float *a = A;
    if (transA && lda != 1) {
      arow.resize(size_t(K));
      for (int64_t k = 0; k < K; ++k) arow[size_t(k)] = A[k * lda];
      a = arow.data();
    }
    if (nt > 1 && flops > 32768) {
      parallelFor(N, 64, [&](int64_t j0, int64_t j1) { gemvRow(transB, K, alpha, a, B, ldb, beta, C, j0, j1); });
    } else {
      gemvRow(transB, K, alpha, a, B, ldb, beta, C, 0, N);
    }
    return;
  }
  if (nt <= 1 || flops < 65536.0) {
    sgemmSerial(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  gridGemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nt, nullptr, 0);
}

size_t packedBFloats(int64_t K, int64_t N) { return size_t(K) * size_t((N + NR - 1) / NR * NR); }

void packBAll(bool transB, const float *B, int64_t ldb, int64_t K, int64_t N, float *out) {
  const int64_t Npad = (N + NR - 1) / NR * NR;
  for (int64_t pc = 0; pc < K; pc += KC) {
    const int64_t kc = std::min<int64_t>(KC, K - pc);
    packB(transB, B, ldb, pc, kc, 0, N, out + pc * Npad);
  }
}

void sgemmPackedB(bool transA, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const float *packed, float beta, float *C, int64_t ldc, bool parallel) {
  if (M <= 0 || N <= 0) return;
  const int64_t Npad = (N + NR - 1) / NR * NR;
  const int nt = !parallel || double(M) * double(N) * double(K) < 65536.0 ? 1 : poolSize();
  if (nt <= 1) {
    sgemmSerial(transA, false, M, N, K, alpha, A, lda, nullptr, 0, beta, C, ldc, packed, Npad, 0);
    return;
  }
  gridGemm(transA, false, M, N, K, alpha, A, lda, nullptr, 0, beta, C, ldc, nt, packed, Npad);
}

}  // namespace sim
