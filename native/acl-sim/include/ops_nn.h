// What the kNnOps table (ops_nn.cc) shares with ops_conv.cc, where its Conv kernel lives: the
// 2-D window geometry that Conv and pooling both follow.
#pragma once
#include <cstdint>

#include "ops.h"

#pragma GCC visibility push(hidden)
namespace sim {

struct Spatial {
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
};

// Resolves pads (explicit or auto_pad) for a 2-D window op. Output size per ONNX.
void resolvePads(const NodeProto &p, Spatial &s, int64_t H, int64_t W, int64_t &OH, int64_t &OW, bool ceilMode);
// Reads strides, dilations and pads (defaults 1, 1, 0) for a kh x kw window; throws on bad values.
Spatial readSpatial(const NodeProto &p, int64_t kh, int64_t kw);
// Load-time check of auto_pad, strides, pads and dilations.
void checkAutoPad(const NodeProto &n);

// Conv (im2col + SGEMM) and its load-time check (ops_conv.cc).
void convK(Node &n, Graph &g);
void checkConv(const NodeProto &n, int64_t opset);

}  // namespace sim
#pragma GCC visibility pop
