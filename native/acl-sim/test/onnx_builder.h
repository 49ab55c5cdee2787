// Minimal protobuf *writer* for ONNX ModelProto, used by the tests to make models by hand.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tb {

struct PB {
  std::string b;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      b += char((v & 0x7f) | 0x80);
      v >>= 7;
    }
    b += char(v);
  }
  void tag(int f, int wt) { varint((uint64_t(f) << 3) | uint64_t(wt)); }
  void i64(int f, int64_t v) { tag(f, 0); varint(uint64_t(v)); }
  void str(int f, const std::string &s) { tag(f, 2); varint(s.size()); b += s; }
  void msg(int f, const PB &m) { str(f, m.b); }
  void f32(int f, float v) {
    tag(f, 5);
    char c[4];
    std::memcpy(c, &v, 4);
    b.append(c, 4);
  }
  void packedI64(int f, const std::vector<int64_t> &v) {
    PB p;
    for (int64_t x : v) p.varint(uint64_t(x));
    str(f, p.b);
  }
  void packedF32(int f, const std::vector<float> &v) {
    std::string s(v.size() * 4, '\0');
    if (!v.empty()) std::memcpy(&s[0], v.data(), s.size());
    str(f, s);
  }
};

enum { FLOAT = 1, INT32 = 6, INT64 = 7 };
// Dims for value infos: >= 0 value, DYN_BATCH -> dim_param "batch", DYN_SEQ -> "seq",
// NO_DIM -> a Dimension with neither field.
constexpr int64_t DYN_BATCH = -1, DYN_SEQ = -2, NO_DIM = -3;

inline PB tensorF(const std::string &name, const std::vector<int64_t> &dims, const std::vector<float> &v, bool raw = true) {
  PB t;
  t.packedI64(1, dims);
  t.i64(2, FLOAT);
  t.str(8, name);
  if (raw) {
    std::string s(v.size() * 4, '\0');
    if (!v.empty()) std::memcpy(&s[0], v.data(), s.size());
    t.str(9, s);
  } else {
    t.packedF32(4, v);
  }
  return t;
}
inline PB tensorI64(const std::string &name, const std::vector<int64_t> &dims, const std::vector<int64_t> &v, bool raw = true) {
  PB t;
  t.packedI64(1, dims);
  t.i64(2, INT64);
  t.str(8, name);
  if (raw) {
    std::string s(v.size() * 8, '\0');
    if (!v.empty()) std::memcpy(&s[0], v.data(), s.size());
    t.str(9, s);
  } else {
    t.packedI64(7, v);
  }
  return t;
}
inline PB tensorI32(const std::string &name, const std::vector<int64_t> &dims, const std::vector<int32_t> &v) {
  PB t;
  t.packedI64(1, dims);
  t.i64(2, INT32);
  t.str(8, name);
  PB p;
  for (int32_t x : v) p.varint(uint64_t(int64_t(x)));
  t.str(5, p.b);
  return t;
}

struct NodeB {
  PB p;
  NodeB &i(const std::string &n, int64_t v) {
    PB a;
    a.str(1, n);
    a.i64(20, 2);
    a.i64(3, v);
    p.msg(5, a);
    return *this;
  }
  NodeB &f(const std::string &n, float v) {
    PB a;
    a.str(1, n);
    a.i64(20, 1);
    a.f32(2, v);
    p.msg(5, a);
    return *this;
  }
  NodeB &s(const std::string &n, const std::string &v) {
    PB a;
    a.str(1, n);
    a.i64(20, 3);
    a.str(4, v);
    p.msg(5, a);
    return *this;
  }
  NodeB &ints(const std::string &n, const std::vector<int64_t> &v) {
    PB a;
    a.str(1, n);
    a.i64(20, 7);
    a.packedI64(8, v);
    p.msg(5, a);
    return *this;
  }
  NodeB &floats(const std::string &n, const std::vector<float> &v) {
    PB a;
    a.str(1, n);
    a.i64(20, 6);
    a.packedF32(7, v);
    p.msg(5, a);
    return *this;
  }
  NodeB &t(const std::string &n, const PB &tensor) {
    PB a;
    a.str(1, n);
    a.i64(20, 4);
    a.msg(5, tensor);
    p.msg(5, a);
    return *this;
  }
};

struct Model {
  int64_t opset = 17;
  std::vector<NodeB> nodes;
  std::vector<PB> inits, inputs, outputs;

  static PB valueInfo(const std::string &name, int elem, const std::vector<int64_t> &dims, bool shape = true) {
    PB tt;
    tt.i64(1, elem);
    if (shape) {
      PB sh;
      for (int64_t d : dims) {
        PB dim;
        if (d >= 0) dim.i64(1, d);
        else if (d == DYN_BATCH) dim.str(2, "batch");
        else if (d == DYN_SEQ) dim.str(2, "seq");
        sh.msg(1, dim);
      }
      tt.msg(2, sh);
    }
    PB tp;
    tp.msg(1, tt);
    PB vi;
    vi.str(1, name);
    vi.msg(2, tp);
    return vi;
  }
  void input(const std::string &n, int elem, const std::vector<int64_t> &dims) { inputs.push_back(valueInfo(n, elem, dims)); }
  void output(const std::string &n, int elem, const std::vector<int64_t> &dims, bool shape = true) {
    outputs.push_back(valueInfo(n, elem, dims, shape));
  }
  void init(const PB &t) { inits.push_back(t); }
  NodeB &node(const std::string &op, const std::vector<std::string> &in, const std::vector<std::string> &out,
              const std::string &name = "") {
    NodeB n;
    for (const auto &x : in) n.p.str(1, x);
    for (const auto &x : out) n.p.str(2, x);
    n.p.str(3, name.empty() ? op + "_" + std::to_string(nodes.size()) : name);
    n.p.str(4, op);
    nodes.push_back(n);
    return nodes.back();
  }
  std::string bytes() const {
    PB g;
    for (const auto &n : nodes) g.msg(1, n.p);
    g.str(2, "test_graph");
    for (const auto &t : inits) g.msg(5, t);
    for (const auto &v : inputs) g.msg(11, v);
    for (const auto &v : outputs) g.msg(12, v);
    PB m;
    m.i64(1, 8);
    m.str(2, "acl-sim-test");
    PB op;
    op.str(1, "");
    op.i64(2, opset);
    m.msg(8, op);
    m.msg(7, g);
    return m.b;
  }
};

}  // namespace tb
