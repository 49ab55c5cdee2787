// Tiny test harness + helpers to run a model through the simulator's ACL API.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "acl_sim.h"

extern int g_checks, g_failures;

#define CHECK(c)                                                                  \
  do {                                                                            \
    ++g_checks;                                                                   \
    if (!(c)) {                                                                   \
      ++g_failures;                                                               \
      std::fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
    }                                                                             \
  } while (0)

#define CHECK_CODE(expr, want)                                                                      \
  do {                                                                                              \
    ++g_checks;                                                                                     \
    const aclError got_ = (expr);                                                                   \
    if (got_ != aclError(want)) {                                                                   \
      ++g_failures;                                                                                 \
      const char *m_ = aclGetRecentErrMsg();                                                        \
      std::fprintf(stderr, "  %s:%d: %s returned %d, want %d (%s)\n", __FILE__, __LINE__, #expr, got_, \
                   int(want), m_ ? m_ : "no message");                                              \
    }                                                                                               \
  } while (0)

#define ACL_OK(expr) CHECK_CODE(expr, 0)

struct HostT {
  int type = 1;  // ONNX type: 1 float, 6 int32, 7 int64
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
  size_t numel() const {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    return n;
  }
  const float *f() const { return reinterpret_cast<const float *>(data.data()); }
  const int64_t *i64() const { return reinterpret_cast<const int64_t *>(data.data()); }
};

HostT makeF(const std::vector<int64_t> &shape, const std::vector<float> &v);
HostT randF(const std::vector<int64_t> &shape, uint32_t seed, float lo = -1.f, float hi = 1.f);
HostT makeI64(const std::vector<int64_t> &shape, const std::vector<int64_t> &v);
HostT makeI32(const std::vector<int64_t> &shape, const std::vector<int32_t> &v);
std::vector<float> randVec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f);

struct RunOpts {
  bool async = false;
  std::vector<uint64_t> gears;  // aclsimSetNextLoadBatchGears before load
  uint64_t batch = 0;           // dynamic-batch gear (0: the leading dim of input 0)
  bool setShapes = true;        // range-dynamic: set input tensor descs
  size_t outBytes = 0;          // output buffer size when the desc reports 0
};

struct RunResult {
  aclError loadErr = 0, execErr = 0;
  std::string msg;
  std::vector<HostT> outputs;
  std::vector<std::string> inNames;
};

// Loads `model` (bytes) on the current device, executes once with `ins`, unloads.
RunResult runModel(const std::string &model, const std::vector<HostT> &ins, const RunOpts &o = {});
bool allClose(const HostT &a, const HostT &b, float rtol = 1e-4f, float atol = 1e-5f);

// Case dump for the onnxruntime comparison (test/ort_compare.mjs).
void setDumpDir(const std::string &dir);
void dumpCase(const std::string &name, const std::string &model, const std::vector<HostT> &ins, const RunResult &r);

// Sets an env var for the next aclInit (nullptr unsets).
void setEnv(const char *k, const char *v);
