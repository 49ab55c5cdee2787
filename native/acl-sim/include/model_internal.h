// State shared by the model_*.cc files (the aclmdl* API): the ACL data handles they pass
// between them, a loaded model and its description, and the registry of loaded models.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph.h"
#include "runtime.h"

// ACL's opaque handle types (declared in acl_sim.h), completed here.
struct aclDataBuffer {
  void *data;
  size_t size;
};
struct aclTensorDesc {
  aclDataType dt;
  aclFormat fmt;
  std::vector<int64_t> dims;
};
struct aclmdlDataset {
  std::vector<aclDataBuffer *> bufs;
  std::vector<aclTensorDesc *> descs;  // owned copies, parallel to bufs
  bool batchSet = false;
  uint64_t batch = 0;
  ~aclmdlDataset() {
    for (aclTensorDesc *d : descs) delete d;
  }
  void setDesc(size_t i, const aclTensorDesc &d) {
    if (descs.size() < bufs.size()) descs.resize(bufs.size(), nullptr);
    delete descs[i];
    descs[i] = new aclTensorDesc(d);
  }
};

#pragma GCC visibility push(hidden)
namespace sim {

enum DynKind { STATIC, DYN_BATCH, DYN_RANGE };

struct IODesc {
  std::string name;
  aclDataType dt = ACL_FLOAT;
  aclFormat fmt = ACL_FORMAT_ND;
  int onnxType = ONNX_FLOAT;
  std::vector<int64_t> dims;       // -1 = dynamic
  std::vector<bool> nonBatchDyn;   // per dim: dynamic for a reason other than the batch
  std::vector<int64_t> perBatch;   // outputs: dim = perBatch * batch when > 0 (batch-driven)
  std::vector<int64_t> atMaxBatch; // outputs: dims at the largest gear (-1 where sequence-driven)
  size_t size = 0;
};

struct ModelInfo {
  DynKind kind = STATIC;
  std::vector<IODesc> inputs, outputs;  // inputs include ascend_mbatch_shape_data (last) for DYN_BATCH
  size_t realInputs = 0;
  std::vector<uint64_t> gears;
  uint64_t maxBatch = 1;
  size_t weightBytes = 0, workBytes = 0;
};

struct Model {
  uint32_t id = 0;
  int dev = 0;
  uint64_t epoch = 0;
  size_t reserved = 0;
  ModelInfo info;
  std::unique_ptr<Graph> graph;
  std::mutex execMu;
  std::mutex curMu;
  std::vector<std::vector<int64_t>> curOut;
  ~Model() {
    if (reserved) rtRelease(dev, reserved, epoch);
  }
};

// The loaded models by id, guarded by g_mdlMu (model_load.cc).
extern std::mutex &g_mdlMu;
extern std::map<uint32_t, std::shared_ptr<Model>> &g_models;

// Throws SimError(ACL_ERROR_INVALID_MODEL_ID) when the id is not loaded.
std::shared_ptr<Model> findModel(uint32_t id);

}  // namespace sim
#pragma GCC visibility pop
