// Shape and data-movement operators (Identity, Dropout, Flatten, Reshape, Transpose, Concat,
// Gather, Shape, Unsqueeze, Squeeze, Cast), and the kTensorOps table, which also lists
// ReduceMean / ReduceSum / ReduceMax (their kernels: ops_reduce.cc).
#include <algorithm>
#include <cstring>

#include "ops_tensor.h"

namespace sim {

// Shared with the element-wise table (Softmax, LogSoftmax).
void checkAxis(const NodeProto &n, int64_t) { attrInt(n, "axis", 0); }

std::vector<int64_t> axesOf(Node &n, Graph &g, int64_t inputSince, bool &given) {
  given = false;
  if (g.opset() >= inputSince) {
    if (const Tensor *t = g.optIn(n, 1)) {
      given = true;
      return readInts(*t, "axes");
    }
  }
  if (hasAttr(*n.proto, "axes")) {
    given = true;
    return attrInts(*n.proto, "axes");
  }
  return {};
}

namespace {

// ------------------------------------------------------------ shape / movement
void identityK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  g.out(n, 0).view(X, X.shape);
}

void flattenK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  const int64_t r = X.rank();
  const int64_t axis = normAxis(attrInt(*n.proto, "axis", 1), r, "axis", true);
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? a : b) *= X.shape[size_t(i)];
  g.out(n, 0).view(X, {a, b});
}

void reshapeK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  std::vector<int64_t> req;
  if (const Tensor *s = g.optIn(n, 1)) {
    req = readInts(*s, "shape");
  } else {
    req = attrInts(*n.proto, "shape");
  }
  const bool allowZero = attrInt(*n.proto, "allowzero", 0) != 0;
  std::vector<int64_t> out(req.size());
  int64_t known = 1, inferAt = -1;
  for (size_t i = 0; i < req.size(); ++i) {
    int64_t d = req[i];
    if (d == 0 && !allowZero) {
      if (i >= X.shape.size()) execFail("shape " + shapeStr(req) + " copies dim " + std::to_string(i) + " that input " + shapeStr(X.shape) + " lacks");
      d = X.shape[i];
    }
    if (d == -1) {
      if (inferAt >= 0) execFail("shape " + shapeStr(req) + " has two -1 dims");
      inferAt = int64_t(i);
      out[i] = 1;
      continue;
    }
    if (d < 0) execFail("shape " + shapeStr(req) + " has a negative dim");
    out[i] = d;
    // Checked: dims whose product wraps modulo 2^64 to the input's count must not pass.
    if (d != 0 && known > (int64_t(1) << 34) / d) execFail("shape " + shapeStr(req) + " is too large (over 2^34 elements)");
    known *= d;
  }
  const int64_t total = X.numel();
  if (inferAt >= 0) {
    if (known == 0 || total % known) execFail("cannot reshape " + shapeStr(X.shape) + " to " + shapeStr(req));
    out[size_t(inferAt)] = total / known;
  } else if (known != total) {
    execFail("cannot reshape " + shapeStr(X.shape) + " to " + shapeStr(req));
  }
  g.out(n, 0).view(X, out);
}

template <class T>
void transposeCopy(const T *x, T *y, const std::vector<int64_t> &inShape, const std::vector<int64_t> &perm) {
  const size_t r = perm.size();
  if (r == 0) return;
  std::vector<int64_t> inStride(r), outShape(r), st(r);
  int64_t acc = 1;
  for (size_t k = r; k-- > 0;) {
    inStride[k] = acc;
    acc *= inShape[k];
  }
  int64_t total = acc;
  for (size_t k = 0; k < r; ++k) {
    outShape[k] = inShape[size_t(perm[k])];
    st[k] = inStride[size_t(perm[k])];
  }
  if (total == 0) return;
  const int64_t inner = outShape[r - 1], is = st[r - 1];
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  for (int64_t o = 0; o < total; o += inner) {
    T *yo = y + o;
    for (int64_t j = 0; j < inner; ++j) yo[j] = x[off + j * is];
    for (size_t k = r - 1; k-- > 0;) {
      ++idx[k];
      off += st[k];
      if (idx[k] < outShape[k]) break;
      off -= st[k] * outShape[k];
      idx[k] = 0;
    }
  }
}

void transposeK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  const int64_t r = X.rank();
  std::vector<int64_t> perm = attrInts(*n.proto, "perm");
  if (perm.empty()) {
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  }
  if (int64_t(perm.size()) != r) execFail("perm " + shapeStr(perm) + " does not match rank " + std::to_string(r));
  std::vector<bool> seen(size_t(r), false);
  std::vector<int64_t> os(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    const int64_t p = perm[size_t(i)];
    if (p < 0 || p >= r || seen[size_t(p)]) execFail("perm " + shapeStr(perm) + " is not a permutation");
    seen[size_t(p)] = true;
    os[size_t(i)] = X.shape[size_t(p)];
  }
  Tensor &Y = g.out(n, 0);
  Y.alloc(X.dtype, os);
  if (r == 0) {
    std::memcpy(Y.data, X.data, X.bytes());
    return;
  }
  switch (onnxElemSize(X.dtype)) {
    case 1: transposeCopy(X.as<uint8_t>(), Y.as<uint8_t>(), X.shape, perm); break;
    case 4: transposeCopy(X.as<uint32_t>(), Y.as<uint32_t>(), X.shape, perm); break;
    case 8: transposeCopy(X.as<uint64_t>(), Y.as<uint64_t>(), X.shape, perm); break;
    default: execFail("unsupported element type");
  }
}

void concatK(Node &n, Graph &g) {
  const Tensor &X0 = g.in(n, 0);
  const int64_t r = X0.rank();
  if (r == 0) execFail("cannot concatenate scalars");
  const int64_t axis = normAxis(attrInt(*n.proto, "axis", 1), r, "axis");
  std::vector<int64_t> os = X0.shape;
  os[size_t(axis)] = 0;
  std::vector<const Tensor *> ins;
  for (size_t i = 0; i < n.in.size(); ++i) {
    const Tensor *t = g.optIn(n, int(i));
    if (!t) continue;
    if (t->dtype != X0.dtype || t->rank() != r) execFail("inputs differ in type or rank");
    for (int64_t k = 0; k < r; ++k) {
      if (k != axis && t->shape[size_t(k)] != X0.shape[size_t(k)]) {
        execFail("input shapes " + shapeStr(X0.shape) + " and " + shapeStr(t->shape) + " differ off the axis");
      }
    }
    os[size_t(axis)] += t->shape[size_t(axis)];
    ins.push_back(t);
  }
  Tensor &Y = g.out(n, 0);
  Y.alloc(X0.dtype, os);
  const size_t es = onnxElemSize(X0.dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= os[size_t(k)];
  for (int64_t k = axis + 1; k < r; ++k) inner *= os[size_t(k)];
  const size_t rowOut = size_t(os[size_t(axis)] * inner) * es;
  size_t colOff = 0;
  for (const Tensor *t : ins) {
    const size_t rowIn = size_t(t->shape[size_t(axis)] * inner) * es;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(static_cast<uint8_t *>(Y.data) + size_t(o) * rowOut + colOff,
                  static_cast<const uint8_t *>(t->data) + size_t(o) * rowIn, rowIn);
    }
    colOff += rowIn;
  }
}

void gatherK(Node &n, Graph &g) {
  const Tensor &D = g.in(n, 0), &I = g.in(n, 1);
  const int64_t r = D.rank();
  if (r == 0) execFail("data must have rank >= 1");
  const int64_t axis = normAxis(attrInt(*n.proto, "axis", 0), r, "axis");
  const std::vector<int64_t> idx = readInts(I, "indices");
  const int64_t dimA = D.shape[size_t(axis)];
  std::vector<int64_t> os(D.shape.begin(), D.shape.begin() + axis);
  os.insert(os.end(), I.shape.begin(), I.shape.end());
  os.insert(os.end(), D.shape.begin() + axis + 1, D.shape.end());
  Tensor &Y = g.out(n, 0);
  Y.alloc(D.dtype, os);
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= D.shape[size_t(k)];
  for (int64_t k = axis + 1; k < r; ++k) inner *= D.shape[size_t(k)];
  const size_t es = onnxElemSize(D.dtype);
  const size_t block = size_t(inner) * es;
  const int64_t ni = int64_t(idx.size());
  auto *y = static_cast<uint8_t *>(Y.data);
  const auto *d = static_cast<const uint8_t *>(D.data);
  for (int64_t i = 0; i < ni; ++i) {
    int64_t v = idx[size_t(i)];
    if (v < -dimA || v >= dimA) {
      execFail("index " + std::to_string(v) + " is out of range for axis size " + std::to_string(dimA));
    }
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < ni; ++i) {
      int64_t v = idx[size_t(i)];
      if (v < 0) v += dimA;
      std::memcpy(y + (size_t(o * ni + i)) * block, d + size_t(o * dimA + v) * block, block);
    }
  }
}

void shapeK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  const int64_t r = X.rank();
  int64_t start = attrInt(*n.proto, "start", 0), end = attrInt(*n.proto, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  const int64_t len = std::max<int64_t>(0, end - start);
  Tensor &Y = g.out(n, 0);
  Y.alloc(ONNX_INT64, {len});
  for (int64_t i = 0; i < len; ++i) Y.as<int64_t>()[i] = X.shape[size_t(start + i)];
}

void unsqueezeK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  bool given = false;
  std::vector<int64_t> axes = axesOf(n, g, 13, given);
  if (!given) execFail("axes are required");
  const int64_t outRank = X.rank() + int64_t(axes.size());
  std::vector<bool> ins(size_t(outRank), false);
  for (int64_t a : axes) {
    const int64_t k = normAxis(a, outRank, "axis");
    if (ins[size_t(k)]) execFail("axis repeated");
    ins[size_t(k)] = true;
  }
  std::vector<int64_t> os;
  size_t src = 0;
  for (int64_t k = 0; k < outRank; ++k) os.push_back(ins[size_t(k)] ? 1 : X.shape[src++]);
  g.out(n, 0).view(X, os);
}

void squeezeK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  bool given = false;
  std::vector<int64_t> axes = axesOf(n, g, 13, given);
  const int64_t r = X.rank();
  std::vector<bool> drop(size_t(r), false);
  if (axes.empty()) {
    for (int64_t k = 0; k < r; ++k) drop[size_t(k)] = X.shape[size_t(k)] == 1;
  }
  for (int64_t a : axes) {
    const int64_t k = normAxis(a, r, "axis");
    if (X.shape[size_t(k)] != 1) execFail("cannot squeeze axis " + std::to_string(a) + " of " + shapeStr(X.shape));
    drop[size_t(k)] = true;
  }
  std::vector<int64_t> os;
  for (int64_t k = 0; k < r; ++k) {
    if (!drop[size_t(k)]) os.push_back(X.shape[size_t(k)]);
  }
  g.out(n, 0).view(X, os);
}

template <class S, class D>
void castLoop(const Tensor &X, Tensor &Y) {
  const S *x = X.as<S>();
  D *y = Y.as<D>();
  for (int64_t i = 0, e = X.numel(); i < e; ++i) y[i] = D(x[i]);
}

void castK(Node &n, Graph &g) {
  const Tensor &X = g.in(n, 0);
  const int to = int(attrInt(*n.proto, "to", ONNX_FLOAT));
  Tensor &Y = g.out(n, 0);
  if (to == X.dtype) {
    Y.view(X, X.shape);
    return;
  }
  Y.alloc(to, X.shape);
  auto from = [&](auto dst) {
    using D = decltype(dst);
    switch (X.dtype) {
      case ONNX_FLOAT: castLoop<float, D>(X, Y); break;
      case ONNX_INT64: castLoop<int64_t, D>(X, Y); break;
      case ONNX_INT32: castLoop<int32_t, D>(X, Y); break;
      case ONNX_UINT8: case ONNX_BOOL: castLoop<uint8_t, D>(X, Y); break;
      case ONNX_INT8: castLoop<int8_t, D>(X, Y); break;
      default: execFail(std::string("cannot cast from ") + onnxTypeName(X.dtype));
    }
  };
  switch (to) {
    case ONNX_FLOAT: from(float{}); break;
    case ONNX_INT64: from(int64_t{}); break;
    case ONNX_INT32: from(int32_t{}); break;
    default: execFail(std::string("cannot cast to ") + onnxTypeName(to));
  }
}

// ------------------------------------------------------------ load-time checks
void checkCast(const NodeProto &n, int64_t) {
  const int64_t to = attrInt(n, "to", -1);
  if (to != ONNX_FLOAT && to != ONNX_INT64 && to != ONNX_INT32) {
    fail(ACL_ERROR_UNSUPPORTED_DATA_TYPE, "Cast 'to' must be float32, int64 or int32");
  }
}
void checkConcat(const NodeProto &n, int64_t opset) {
  if (opset >= 4 && !hasAttr(n, "axis")) fail(ACL_ERROR_MODEL_MISSING_ATTR, "attribute 'axis' is required");
  attrInt(n, "axis", 1);
}
void checkTranspose(const NodeProto &n, int64_t) { attrInts(n, "perm"); }
void checkReshape(const NodeProto &n, int64_t) {
  if (n.inputs.size() < 2 && !hasAttr(n, "shape")) fail(ACL_ERROR_MODEL_MISSING_ATTR, "Reshape needs a shape input");
  attrInt(n, "allowzero", 0);
}
void checkUnsqueeze(const NodeProto &n, int64_t opset) {
  if (opset < 13 && !hasAttr(n, "axes")) fail(ACL_ERROR_MODEL_MISSING_ATTR, "attribute 'axes' is required");
  if (opset >= 13 && n.inputs.size() < 2) fail(ACL_ERROR_MODEL_MISSING_ATTR, "input 'axes' is required");
}
void checkDropout(const NodeProto &n, int64_t) {
  if (n.outputs.size() > 1 && !n.outputs[1].empty()) loadFail("Dropout mask output is not supported");
}

}  // namespace

const OpDef kTensorOps[] = {
    {"Identity", 1, 1, 1, 1, nullptr, identityK},
    {"Dropout", 1, 3, 1, 2, checkDropout, identityK},
    {"Flatten", 1, 1, 1, 1, checkAxis, flattenK},
    {"Reshape", 1, 2, 1, 1, checkReshape, reshapeK, 0b10, 0b10},
    {"Transpose", 1, 1, 1, 1, checkTranspose, transposeK},
    {"Concat", 1, 64, 1, 1, checkConcat, concatK},
    {"Gather", 2, 2, 1, 1, checkAxis, gatherK, 0, 0b10},
    {"ReduceMean", 1, 2, 1, 1, checkReduce, reduceMeanK, 0b10, 0b10},
    {"ReduceSum", 1, 2, 1, 1, checkReduce, reduceSumK, 0b10, 0b10},
    {"ReduceMax", 1, 2, 1, 1, checkReduce, reduceMaxK, 0b10, 0b10},
    {"Shape", 1, 1, 1, 1, nullptr, shapeK},
    {"Unsqueeze", 1, 2, 1, 1, checkUnsqueeze, unsqueezeK, 0b10, 0b10},
    {"Squeeze", 1, 2, 1, 1, nullptr, squeezeK, 0b10, 0b10},
    {"Cast", 1, 1, 1, 1, checkCast, castK},
};
const size_t kTensorOpsCount = sizeof(kTensorOps) / sizeof(kTensorOps[0]);

}  // namespace sim