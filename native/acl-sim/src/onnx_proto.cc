// Protobuf wire-format decoder for the ONNX ModelProto subset in onnx_proto.h: the model, graph,
// node, attribute and value-info messages (tensors: onnx_tensor.cc; the reader: onnx_wire.h).
// Every length is checked against the bytes that remain, so hostile input can only fail.
#include "onnx_proto.h"

#include <cstring>

#include "onnx_wire.h"

namespace sim {

using namespace wire;

namespace {

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

const Attr *NodeProto::attr(const char *n) const {
  for (const Attr &a : attrs) {
    if (a.name == n) return &a;
  }
  return nullptr;
}

bool parseOnnxModel(const uint8_t *data, size_t size, ModelProto &m, std::string &err, bool *unsupported) {
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
    if (unsupported != nullptr) *unsupported = e.unsupported;
    return false;
  } catch (const std::bad_alloc &) {
    err = "out of memory while decoding the model";
    return false;
  }
}

}  // namespace sim
