// The subset of the ONNX ModelProto the simulator reads, decoded by a hand-written
// protobuf wire-format reader (no protoc / libprotobuf).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#pragma GCC visibility push(hidden)
namespace sim {

// ONNX TensorProto.DataType numbering.
enum OnnxType : int {
  ONNX_UNDEFINED = 0, ONNX_FLOAT = 1, ONNX_UINT8 = 2, ONNX_INT8 = 3, ONNX_UINT16 = 4,
  ONNX_INT16 = 5, ONNX_INT32 = 6, ONNX_INT64 = 7, ONNX_STRING = 8, ONNX_BOOL = 9,
  ONNX_FLOAT16 = 10, ONNX_DOUBLE = 11, ONNX_UINT32 = 12, ONNX_UINT64 = 13
};
// Element size of the types the executor stores natively (float32, int32, int64, uint8/bool),
// 0 for the others.
size_t onnxElemSize(int t);
const char *onnxTypeName(int t);

struct TensorData {
  std::string name;
  int dtype = ONNX_UNDEFINED;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // little-endian, dtype-native, numel * elemSize
  int64_t numel() const;
};

enum AttrType : int {
  ATTR_UNDEFINED = 0, ATTR_FLOAT = 1, ATTR_INT = 2, ATTR_STRING = 3, ATTR_TENSOR = 4,
  ATTR_GRAPH = 5, ATTR_FLOATS = 6, ATTR_INTS = 7, ATTR_STRINGS = 8, ATTR_TENSORS = 9,
  ATTR_GRAPHS = 10
};

struct Attr {
  std::string name;
  int type = ATTR_UNDEFINED;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::shared_ptr<TensorData> t;
};

struct NodeProto {
  std::string name, opType, domain;
  std::vector<std::string> inputs, outputs;
  std::vector<Attr> attrs;
  const Attr *attr(const char *n) const;
};

struct DimProto {
  bool hasValue = false;
  int64_t value = 0;
  std::string param;
};

struct ValueInfo {
  std::string name;
  int elemType = ONNX_UNDEFINED;
  bool hasShape = false;
  std::vector<DimProto> dims;
};

struct ModelProto {
  int64_t irVersion = 0;
  int64_t opset = 0;  // version of the default ("" / "ai.onnx") domain
  std::string graphName;
  std::vector<NodeProto> nodes;
  std::vector<TensorData> initializers;
  std::vector<ValueInfo> inputs, outputs;
};

// Decodes an ONNX model. On failure returns false with a message; never reads out of bounds.
// `unsupported`, when given, is set when the file is well formed but uses a data type the
// simulator does not implement (see wire::ParseError).
bool parseOnnxModel(const uint8_t *data, size_t size, ModelProto &out, std::string &err, bool *unsupported = nullptr);

}  // namespace sim
#pragma GCC visibility pop
