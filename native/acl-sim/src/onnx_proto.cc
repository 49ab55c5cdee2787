// Protobuf wire-format decoder for the ONNX ModelProto subset in onnx_proto.h.
// Every length is checked against the bytes that remain, so hostile input can only fail.
#include "onnx_proto.h"

#include <cstring>
#include <limits>

namespace sim {

namespace {

struct ParseError {
  std::string msg;
};
[[noreturn]] void bad(const std::string &m) { throw ParseError{m}; }

constexpr int64_t kMaxElements = int64_t(1) << 34;  // 16 Gi elements: far above any real model
constexpr size_t kMaxRank = 64;

enum WireType { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_FIXED32 = 5 };

struct Reader {
  const uint8_t *p;
  const uint8_t *e;
  const char *what;  // message being decoded, for error text

  bool more() const { return p < e; }
  size_t left() const { return size_t(e - p); }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p >= e) bad(std::string("truncated varint in ") + what);
      uint8_t b = *p++;
      if (shift == 63 && (b & 0x7e)) bad(std::string("varint overflow in ") + what);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad(std::string("varint too long in ") + what);
  }
  uint32_t fixed32() {
    if (left() < 4) bad(std::string("truncated fixed32 in ") + what);
    uint32_t v;
    std::memcpy(&v, p, 4);
    p += 4;
    return v;
  }
  uint64_t fixed64() {
    if (left() < 8) bad(std::string("truncated fixed64 in ") + what);
    uint64_t v;
    std::memcpy(&v, p, 8);
    p += 8;
    return v;
  }
  Reader sub(const char *w) {
    uint64_t len = varint();
    if (len > left()) {
      bad(std::string("length ") + std::to_string(len) + " exceeds the " + std::to_string(left()) +
          " bytes left in " + what);
    }
    Reader r{p, p + len, w};
    p += len;
    return r;
  }
  std::string str(const char *w) {
    Reader r = sub(w);
    return std::string(reinterpret_cast<const char *>(r.p), r.left());
  }
  void tag(uint32_t &field, int &wt) {
    uint64_t t = varint();
    field = uint32_t(t >> 3);
    wt = int(t & 7);
    if (field == 0 || (t >> 3) > 0x1fffffffu) bad(std::string("invalid field tag in ") + what);
  }
  void skip(int wt) {
    switch (wt) {
      case WT_VARINT: varint(); break;
      case WT_FIXED64: fixed64(); break;
      case WT_LEN: sub(what); break;
      case WT_FIXED32: fixed32(); break;
      default: bad(std::string("unsupported wire type ") + std::to_string(wt) + " in " + what);
    }
  }
  void expect(int wt, int want, const char *field) {
    if (wt != want) bad(std::string("field ") + field + " of " + what + " has wire type " + std::to_string(wt));
  }
};

// Repeated scalar fields arrive packed (one LEN record) or one record per element.
void readInts(Reader &r, int wt, std::vector<int64_t> &out, const char *field) {
  if (wt == WT_LEN) {
    Reader s = r.sub(field);
    while (s.more()) out.push_back(int64_t(s.varint()));
  } else {
    r.expect(wt, WT_VARINT, field);
    out.push_back(int64_t(r.varint()));
  }
}
void readFloats(Reader &r, int wt, std::vector<float> &out, const char *field) {
  auto one = [&](Reader &s) {
    uint32_t u = s.fixed32();
    float f;
    std::memcpy(&f, &u, 4);
    out.push_back(f);
  };
  if (wt == WT_LEN) {
    Reader s = r.sub(field);
    if (s.left() % 4) bad(std::string("packed ") + field + " length is not a multiple of 4");
    out.reserve(out.size() + s.left() / 4);
    while (s.more()) one(s);
  } else {
    r.expect(wt, WT_FIXED32, field);
    one(r);
  }
}
void readDoubles(Reader &r, int wt, std::vector<double> &out, const char *field) {
  auto one = [&](Reader &s) {
    uint64_t u = s.fixed64();
    double d;
    std::memcpy(&d, &u, 8);
    out.push_back(d);
  };
  if (wt == WT_LEN) {
    Reader s = r.sub(field);
    if (s.left() % 8) bad(std::string("packed ") + field + " length is not a multiple of 8");
    while (s.more()) one(s);
  } else {
    r.expect(wt, WT_FIXED64, field);
    one(r);
  }
}

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
      bad(label + " has unsupported data type " + onnxTypeName(t.dtype));
  }
}

void parseShape(Reader r, ValueInfo &vi) {
  vi.hasShape = true;
  while (r.more()) {
    uint32_t f;
    int wt;
    r.tag(f, wt);
    if (f == 1 && wt == WT_LEN) {
      Reader d = r.sub("TensorShapeProto.Dimension");
      DimProto dim;
      while (d.more()) {
        uint32_t g;
        int w2;
        d.tag(g, w2);
        if (g == 1 && w2 == WT_VARINT) {
          dim.hasValue = true;
          dim.value = int64_t(d.varint());
        } else if (g == 2 && w2 == WT_LEN) {
          dim.param = d.str("dim_param");
        } else {
          d.skip(w2);
        }
      }
      vi.dims.push_back(std::move(dim));
      if (vi.dims.size() > kMaxRank) bad("value '" + vi.name + "' has too many dims");
    } else {
      r.skip(wt);
    }
  }
}

void parseValueInfo(Reader r, ValueInfo &vi) {
  while (r.more()) {
    uint32_t f;
    int wt;
    r.tag(f, wt);
    if (f == 1 && wt == WT_LEN) {
      vi.name = r.str("ValueInfoProto.name");
    } else if (f == 2 && wt == WT_LEN) {
      Reader tp = r.sub("TypeProto");
      while (tp.more()) {
        uint32_t g;
        int w2;
        tp.tag(g, w2);
        if (g == 1 && w2 == WT_LEN) {  // tensor_type
          Reader tt = tp.sub("TypeProto.Tensor");
          while (tt.more()) {
            uint32_t h;
            int w3;
            tt.tag(h, w3);
            if (h == 1 && w3 == WT_VARINT) vi.elemType = int(tt.varint());
            else if (h == 2 && w3 == WT_LEN) parseShape(tt.sub("TensorShapeProto"), vi);
            else tt.skip(w3);
          }
        } else {
          tp.skip(w2);
        }
      }
    } else {
      r.skip(wt);
    }
  }
}

void parseAttr(Reader r, Attr &a) {
  bool typed = false;
  while (r.more()) {
    uint32_t f;
    int wt;
    r.tag(f, wt);
    switch (f) {
      case 1: r.expect(wt, WT_LEN, "name"); a.name = r.str("AttributeProto.name"); break;
      case 20: r.expect(wt, WT_VARINT, "type"); a.type = int(r.varint()); typed = true; break;
      case 2: {
        r.expect(wt, WT_FIXED32, "f");
        uint32_t u = r.fixed32();
        std::memcpy(&a.f, &u, 4);
        if (!typed) a.type = ATTR_FLOAT;
        break;
      }
      case 3: r.expect(wt, WT_VARINT, "i"); a.i = int64_t(r.varint()); if (!typed) a.type = ATTR_INT; break;
      case 4: r.expect(wt, WT_LEN, "s"); a.s = r.str("AttributeProto.s"); if (!typed) a.type = ATTR_STRING; break;
      case 5:
        r.expect(wt, WT_LEN, "t");
        a.t = std::make_shared<TensorData>();
        parseTensor(r.sub("AttributeProto.t"), *a.t);
        if (!typed) a.type = ATTR_TENSOR;
        break;
      case 7: readFloats(r, wt, a.floats, "floats"); if (!typed) a.type = ATTR_FLOATS; break;
      case 8: readInts(r, wt, a.ints, "ints"); if (!typed) a.type = ATTR_INTS; break;
      case 6: r.skip(wt); if (!typed) a.type = ATTR_GRAPH; break;  // subgraphs: no supported op uses them
      default: r.skip(wt);
    }
  }
}

void parseNode(Reader r, NodeProto &n) {
  while (r.more()) {
    uint32_t f;
    int wt;
    r.tag(f, wt);
    switch (f) {
      case 1: r.expect(wt, WT_LEN, "input"); n.inputs.push_back(r.str("NodeProto.input")); break;
      case 2: r.expect(wt, WT_LEN, "output"); n.outputs.push_back(r.str("NodeProto.output")); break;
      case 3: r.expect(wt, WT_LEN, "name"); n.name = r.str("NodeProto.name"); break;
      case 4: r.expect(wt, WT_LEN, "op_type"); n.opType = r.str("NodeProto.op_type"); break;
      case 7: r.expect(wt, WT_LEN, "domain"); n.domain = r.str("NodeProto.domain"); break;
      case 5: {
        r.expect(wt, WT_LEN, "attribute");
        Attr a;
        parseAttr(r.sub("AttributeProto"), a);
        n.attrs.push_back(std::move(a));
        break;
      }
      default: r.skip(wt);
    }
  }
}

void parseGraph(Reader r, ModelProto &m) {
  while (r.more()) {
    uint32_t f;
    int wt;
    r.tag(f, wt);
    switch (f) {
      case 1: {
        r.expect(wt, WT_LEN, "node");
        NodeProto n;
        parseNode(r.sub("NodeProto"), n);
        m.nodes.push_back(std::move(n));
        break;
      }
      case 2: r.expect(wt, WT_LEN, "name"); m.graphName = r.str("GraphProto.name"); break;
      case 5: {
        r.expect(wt, WT_LEN, "initializer");
        TensorData t;
        parseTensor(r.sub("TensorProto"), t);
        m.initializers.push_back(std::move(t));
        break;
      }
      case 11:
      case 12: {
        r.expect(wt, WT_LEN, f == 11 ? "input" : "output");
        ValueInfo vi;
        parseValueInfo(r.sub("ValueInfoProto"), vi);
        (f == 11 ? m.inputs : m.outputs).push_back(std::move(vi));
        break;
      }
      case 15: bad("sparse initializers are not supported");
      default: r.skip(wt);
    }
  }
}

}  // namespace

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

const Attr *NodeProto::attr(const char *n) const {
  for (const Attr &a : attrs) {
    if (a.name == n) return &a;
  }
  return nullptr;
}

bool parseOnnxModel(const uint8_t *data, size_t size, ModelProto &m, std::string &err) {
  try {
    if (size == 0) bad("the model file is empty");
    Reader r{data, data + size, "ModelProto"};
    bool haveGraph = false;
    bool haveOpset = false;
    while (r.more()) {
      uint32_t f;
      int wt;
      r.tag(f, wt);
      if (f == 1 && wt == WT_VARINT) {
        m.irVersion = int64_t(r.varint());
      } else if (f == 7 && wt == WT_LEN) {
        if (haveGraph) bad("ModelProto has two graphs");
        parseGraph(r.sub("GraphProto"), m);
        haveGraph = true;
      } else if (f == 8 && wt == WT_LEN) {
        Reader o = r.sub("OperatorSetIdProto");
        std::string domain;
        int64_t version = 0;
        while (o.more()) {
          uint32_t g;
          int w2;
          o.tag(g, w2);
          if (g == 1 && w2 == WT_LEN) domain = o.str("domain");
          else if (g == 2 && w2 == WT_VARINT) version = int64_t(o.varint());
          else o.skip(w2);
        }
        if (domain.empty() || domain == "ai.onnx") {
          m.opset = version;
          haveOpset = true;
        }
      } else {
        r.skip(wt);
      }
    }
    if (!haveGraph) bad("ModelProto has no graph (not an ONNX model?)");
    if (!haveOpset) m.opset = 1;  // per the ONNX spec a missing default-domain import means opset 1
    return true;
  } catch (const ParseError &e) {
    err = e.msg;
    return false;
  } catch (const std::bad_alloc &) {
    err = "out of memory while decoding the model";
    return false;
  }
}

}  // namespace sim
