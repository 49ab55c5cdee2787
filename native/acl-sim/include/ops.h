// Operator tables (defined in ops_*.cc) and helpers shared by the kernels.
#pragma once
#include <string>
#include <vector>

#include "graph.h"

#pragma GCC visibility push(hidden)
namespace sim {

extern const OpDef kElementwiseOps[];
extern const size_t kElementwiseOpsCount;
extern const OpDef kTensorOps[];
extern const size_t kTensorOpsCount;
extern const OpDef kGemmOps[];
extern const size_t kGemmOpsCount;
extern const OpDef kNnOps[];
extern const size_t kNnOpsCount;

// Throws SimError(ACL_ERROR_RT_MODEL_EXECUTE, msg): a run-time shape/type problem.
[[noreturn]] void execFail(const std::string &msg);
// Throws SimError(ACL_ERROR_PARSE_MODEL, msg): a problem detected at load.
[[noreturn]] void loadFail(const std::string &msg);

std::string shapeStr(const std::vector<int64_t> &s);
// Normalises a possibly negative axis for rank r (valid range [-r, r-1], or [-r, r] if inclusive).
int64_t normAxis(int64_t axis, int64_t r, const char *what, bool inclusive = false);
// Reads an int64/int32 tensor as int64 values.
std::vector<int64_t> readInts(const Tensor &t, const char *what);
void requireFloat(const Tensor &t, const char *what);
// Load-time check of the optional int attribute 'axis' (ops_tensor.cc).
void checkAxis(const NodeProto &n, int64_t opset);

// max(a, b) that propagates a NaN in either operand (IEEE 754-2019 maximum), so one NaN makes a
// max reduction or pooling window NaN whatever its position. std::max keeps `a` when `b` is NaN.
template <class T>
inline T nanMax(T a, T b) {
  return a != a ? a : (b != b || b > a) ? b : a;
}

}  // namespace sim
#pragma GCC visibility pop
