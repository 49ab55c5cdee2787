// One loaded model on one device: its description, gears, and the two-slot pipeline buffers.
// Everything here runs on the owning device thread, except `info` (immutable once loaded) and
// `unloadRequested` (an atomic the JS thread sets so later executes are refused up front).
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "acl_api.h"
#include "work.h"

namespace npufleet {

enum class DynamicKind { Static, Batch, Range };

struct TensorInfo {
  std::string name;
  aclDataType dtype = ACL_DT_UNDEFINED;
  // The format a range-dynamic input's tensor desc declares: the model's own (NCHW for a 4-D
  // image input), as real ACL checks it against the model; ND where the library cannot say.
  aclFormat format = ACL_FORMAT_ND;
  std::vector<int64_t> dims;     // as the model describes them, -1 = dynamic
  std::vector<int64_t> maxDims;  // dims used to size the buffers
  size_t elemBytes = 0;
  size_t bufferBytes = 0;  // per slot, for the largest gear / maxDims
  size_t aclIndex = 0;     // index in the model's input/output list (mbatch input included)
  // Outputs of a dynamic-batch model: the dims at each of info.gears (same order), learned once
  // at load (LearnGearOutputDims). Empty when not learned: the gear then fills a leading -1.
  std::vector<std::vector<int64_t>> dimsByGear;
};

struct LoadOptions {
  std::string path;
  std::vector<uint64_t> gears;  // config gears (the simulator) or empty
  std::map<std::string, std::vector<int64_t>> maxInputDims;
  std::map<std::string, std::vector<int64_t>> maxOutputDims;  // outputs with dynamic non-batch dims
  int slots = 2;
};

struct ModelInfo {
  std::vector<TensorInfo> inputs;  // without the dynamic-batch input
  std::vector<TensorInfo> outputs;
  std::vector<uint64_t> gears;
  DynamicKind dynamic = DynamicKind::Static;
  int64_t deviceMemoryBytes = 0;
  int slots = 2;
  uint32_t modelId = 0;
};

// Buffers, stream and events of one pipeline slot. Owned by ModelCore; a slot with
// `job != nullptr` is in flight and none of its memory may be touched or freed until its evOut
// has completed. A batch runs on its slot's one stream (H2D, execute, D2H in order); the other
// slot's stream carries the neighbouring batch, so its copies overlap this execution. Once evOut
// has completed the stream is idle, so synchronizing it returns at once and reports an
// asynchronous device failure of exactly this batch (ACL reports those at stream synchronize).
struct Slot {
  aclrtStream stream = nullptr;
  std::vector<void *> devIn, hostIn;    // aclrtMalloc / aclrtMallocHost, one per visible input
  void *devMbatch = nullptr;            // the ascend_mbatch_shape_data buffer, never written by us
  std::vector<void *> devOut, hostOut;  // one per output
  aclmdlDataset *inDs = nullptr;
  aclmdlDataset *outDs = nullptr;
  std::vector<aclDataBuffer *> dataBuffers;
  std::vector<aclTensorDesc *> inDescs;  // range models: descs handed to the dataset this batch
  // Recorded on `stream` every batch: before/after the copy-in, before/after the execute (after
  // waiting for the previous batch's execute), after the copy-out. Timings come from them.
  aclrtEvent evStart = nullptr, evIn = nullptr, evExecStart = nullptr, evExec = nullptr,
             evOut = nullptr;

  ExecJob *job = nullptr;
  std::vector<std::vector<int64_t>> outDims;
  std::vector<size_t> outCopyBytes;
  double hostCopyInMs = 0;
  Clock::time_point enqueuedAt, doneAt;
  bool done = false;
};

class ModelCore {
 public:
  explicit ModelCore(const AclApi &api) : api_(api) {}
  ~ModelCore();  // frees nothing on the device: Release() must have run on the device thread

  // Device thread. Throws FailureException; the caller then calls Release() to free what a
  // partial load allocated.
  void Load(const LoadOptions &opts);
  // Device thread; requires IsIdle(). Unloads the model and frees every slot (idempotent).
  // Throws the aclmdlUnload failure after freeing everything else.
  void Release();

  bool IsIdle() const { return inflight_ == 0 && pending.empty(); }
  int FreeSlot() const;
  // Enqueues copy-in, execute and copy-out of `job` on the device streams using `slot`.
  // On failure the job is failed; the slot stays in flight until its events complete.
  // `copyingJsInputs` is held on entry and released as soon as the job's inputs (JS memory) have
  // been copied into staging, before any ACL call that might block.
  void Start(int slot, ExecJob *job, std::unique_lock<std::mutex> &copyingJsInputs);
  // Queries the slot's evOut without blocking; true once the batch (copy-out included) is done.
  bool Poll(int slot);
  const Slot &SlotAt(int slot) const { return slots_[static_cast<size_t>(slot)]; }
  // Blocks up to timeoutMs (or until done) on the slot's evOut. Returns false, changing nothing,
  // when the library has no usable timed wait: aclrtSynchronizeEventWithTimeout is absent, or
  // reports that this SoC/driver does not support it (IsNotSupported). The caller then polls.
  bool Wait(int slot, int32_t timeoutMs);
  // Checks the stream for an asynchronous failure, copies outputs out of staging into the job,
  // fills timings, frees the slot; returns the job. `prevDoneAt`: when the batch before it
  // finished (timing fallback when the library has no aclrtEventElapsedTime).
  ExecJob *Finish(int slot, Clock::time_point prevDoneAt);

  ModelInfo info;
  std::atomic<bool> unloadRequested{false};
  std::deque<ExecJob *> pending;  // waiting for a free slot (device thread)
  Work *unloadWork = nullptr;     // parked unload request, finished when idle
  bool loaded = false;

 private:
  void AllocateSlot(Slot &s, size_t mbatchBytes);
  void FreeSlotMemory(Slot &s);
  void Fail(Slot &s, const Failure &f);
  void MarkDone(Slot &s, aclError rc, const char *api);
  void FillTimings(Slot &s, ExecJob *job, Clock::time_point prevDoneAt, double hostCopyOutMs);
  // Device thread (Start before the execute, Finish after it): the dims of output o for this
  // slot's batch; before the run, for an output known only after it, its max dims.
  std::vector<int64_t> ReadOutputDims(Slot &s, size_t o, bool afterRun);
  bool OutputDimsAfterRun(size_t o) const;
  // Device thread, at load, before the model serves: fills dimsByGear of the outputs ACL sized
  // itself (descBytes[o] > 0, aclmdlGetOutputSizeByIndex), from aclmdlGetCurOutputDims per gear.
  void LearnGearOutputDims(const std::vector<size_t> &descBytes);

  const AclApi &api_;
  int lastStarted_ = -1;  // slot of the most recent batch: the next execute waits for its evExec
  aclmdlDesc *desc_ = nullptr;
  bool modelLoaded_ = false;
  std::optional<size_t> mbatchIndex_;
  bool setsTensorDesc_ = false;  // some input has dynamic non-batch dims (range-dynamic)
  size_t numAclInputs_ = 0;
  std::vector<Slot> slots_;
  int inflight_ = 0;
};

}  // namespace npufleet
