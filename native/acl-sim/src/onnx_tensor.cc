// TensorProto decoding (initializers, tensor attributes) into the executor's native layouts,
// and the ONNX element-type tables.
#include <cstring>

#include "onnx_wire.h"

namespace sim {
namespace wire {

namespace {

constexpr int64_t kMaxElements = int64_t(1) << 34;  // 16 Gi elements: far above any real model

int64_t checkedNumel(const std::vector<int64_t> &dims, const std::string &name) {
  if (dims.size() > kMaxRank) bad("tensor '" + name + "' has rank " + std::to_string(dims.size()));
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) bad("tensor '" + name + "' has negative dim " + std::to_string(d));
    if (d != 0 && n > kMaxElements / d) bad("tensor '" + name + "' is too large");
    n *= d;
  }
  return n;
}

}  // namespace

void parseTensor(Reader r, TensorData &t) {
  const uint8_t *raw = nullptr;
  size_t rawLen = 0;
  bool hasRaw = false;
  std::vector<float> fdata;
  std::vector<int64_t> i32data, i64data;
  std::vector<double> ddata;
  while (r.more()) {
    uint32_t f;
    int wt;
    r.tag(f, wt);
    switch (f) {
      case 1: readInts(r, wt, t.dims, "dims"); break;
      case 2: r.expect(wt, WT_VARINT, "data_type"); t.dtype = int(r.varint()); break;
      case 4: readFloats(r, wt, fdata, "float_data"); break;
      case 5: readInts(r, wt, i32data, "int32_data"); break;
      case 7: readInts(r, wt, i64data, "int64_data"); break;
      case 8: r.expect(wt, WT_LEN, "name"); t.name = r.str("TensorProto.name"); break;
      case 9: {
        r.expect(wt, WT_LEN, "raw_data");
        Reader s = r.sub("raw_data");
        raw = s.p;
        rawLen = s.left();
        hasRaw = true;
        break;
      }
      case 10: readDoubles(r, wt, ddata, "double_data"); break;
      case 14:
        r.expect(wt, WT_VARINT, "data_location");
        if (r.varint() != 0) bad("tensor '" + t.name + "' uses external data, which the simulator does not load");
        break;
      default: r.skip(wt);
    }
  }
  const int64_t n = checkedNumel(t.dims, t.name);
  const std::string label = "tensor '" + t.name + "'";
  auto needCount = [&](size_t have, const char *field) {
    if (int64_t(have) != n) {
      bad(label + " has " + std::to_string(have) + " " + field + " values for " + std::to_string(n) + " elements");
    }
  };
  auto fromRaw = [&](size_t esize) {
    if (uint64_t(rawLen) != uint64_t(n) * esize) {
      bad(label + " raw_data has " + std::to_string(rawLen) + " bytes, expected " + std::to_string(uint64_t(n) * esize));
    }
    t.bytes.assign(raw, raw + rawLen);
  };
  switch (t.dtype) {
    case ONNX_FLOAT:
      if (hasRaw) fromRaw(4);
      else {
        needCount(fdata.size(), "float_data");
        t.bytes.resize(size_t(n) * 4);
        if (n) std::memcpy(t.bytes.data(), fdata.data(), size_t(n) * 4);
      }
      break;
    case ONNX_DOUBLE: {  // stored as float32: the executor computes in float32
      std::vector<double> d;
      if (hasRaw) {
        if (uint64_t(rawLen) != uint64_t(n) * 8) bad(label + " raw_data size mismatch");
        d.resize(size_t(n));
        if (n) std::memcpy(d.data(), raw, rawLen);
      } else {
        needCount(ddata.size(), "double_data");
        d = std::move(ddata);
      }
      t.dtype = ONNX_FLOAT;
      t.bytes.resize(size_t(n) * 4);
      for (int64_t k = 0; k < n; ++k) {
        float v = float(d[size_t(k)]);
        std::memcpy(t.bytes.data() + k * 4, &v, 4);
      }
      break;
    }
    case ONNX_INT64:
      if (hasRaw) fromRaw(8);
      else {
        needCount(i64data.size(), "int64_data");
        t.bytes.resize(size_t(n) * 8);
        if (n) std::memcpy(t.bytes.data(), i64data.data(), size_t(n) * 8);
      }
      break;
    case ONNX_INT32:
      if (hasRaw) fromRaw(4);
      else {
        needCount(i32data.size(), "int32_data");
        t.bytes.resize(size_t(n) * 4);
        for (int64_t k = 0; k < n; ++k) {
          int32_t v = int32_t(i32data[size_t(k)]);
          std::memcpy(t.bytes.data() + k * 4, &v, 4);
        }
      }
      break;
    case ONNX_UINT8:
    case ONNX_INT8:
    case ONNX_BOOL:
      if (hasRaw) fromRaw(1);
      else {
        needCount(i32data.size(), "int32_data");
        t.bytes.resize(size_t(n));
        for (int64_t k = 0; k < n; ++k) t.bytes[size_t(k)] = uint8_t(i32data[size_t(k)]);
      }
      break;
    default:
      unsupported(label + " has data type " + onnxTypeName(t.dtype) + ", which the simulator does not support (float32, int64, int32, uint8, int8 and bool)");
  }
}

}  // namespace wire

size_t onnxElemSize(int t) {
  switch (t) {
    case ONNX_FLOAT: case ONNX_INT32: return 4;
    case ONNX_INT64: return 8;
    case ONNX_UINT8: case ONNX_INT8: case ONNX_BOOL: return 1;
    default: return 0;
  }
}

const char *onnxTypeName(int t) {
  static const char *names[] = {"undefined", "float32", "uint8", "int8", "uint16", "int16", "int32",
                                "int64", "string", "bool", "float16", "float64", "uint32", "uint64"};
  if (t >= 0 && t < int(sizeof(names) / sizeof(names[0]))) return names[t];
  return "unknown";
}

int64_t TensorData::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace sim
