// The protobuf wire-format reader shared by the ONNX decoders (onnx_proto.cc, onnx_tensor.cc).
// Every length is checked against the bytes that remain, so hostile input can only fail.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "onnx_proto.h"

#pragma GCC visibility push(hidden)
namespace sim {
// A named namespace, not an anonymous one: ParseError thrown in one decoder file must be the
// type parseOnnxModel catches in another.
namespace wire {

struct ParseError {
  std::string msg;
  // A well-formed model using what the simulator does not implement (a tensor's data type), not a
  // damaged file: reported as ACL_ERROR_UNSUPPORTED_DATA_TYPE, so the fix named is a re-export.
  bool unsupported = false;
};
[[noreturn]] inline void bad(const std::string &m) { throw ParseError{m}; }
[[noreturn]] inline void unsupported(const std::string &m) { throw ParseError{m, true}; }

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
inline void readInts(Reader &r, int wt, std::vector<int64_t> &out, const char *field) {
  if (wt == WT_LEN) {
    Reader s = r.sub(field);
    while (s.more()) out.push_back(int64_t(s.varint()));
  } else {
    r.expect(wt, WT_VARINT, field);
    out.push_back(int64_t(r.varint()));
  }
}
inline void readFloats(Reader &r, int wt, std::vector<float> &out, const char *field) {
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
inline void readDoubles(Reader &r, int wt, std::vector<double> &out, const char *field) {
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

// Decodes one TensorProto (an initializer or a tensor attribute) into t (onnx_tensor.cc).
void parseTensor(Reader r, TensorData &t);

}  // namespace wire
}  // namespace sim
#pragma GCC visibility pop
