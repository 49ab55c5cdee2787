// The execution pipeline of a loaded model: start a batch on a slot, poll/wait its events, finish it.
#include "model_core.h"

#include <algorithm>
#include <cstring>

#include "model_util.h"

namespace npufleet {

int ModelCore::FreeSlot() const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].job == nullptr) return static_cast<int>(i);
  }
  return -1;
}

void ModelCore::Fail(Slot &s, const Failure &f) {
  if (s.job != nullptr && !s.job->failed) {
    s.job->failed = true;
    s.job->failure = f;
  }
}

// Whether output o's real dims are known only after a run: with range-dynamic inputs, or when
// its description has a -1 that the batch gear does not fill, i.e. a dim that follows input
// values (e.g. a Reshape whose target is an int64 input), even if every input has a fixed size.
bool ModelCore::OutputDimsAfterRun(size_t o) const {
  if (!info.outputs[o].dimsByGear.empty()) return false;
  if (info.dynamic == DynamicKind::Range || setsTensorDesc_) return true;
  const std::vector<int64_t> &d = info.outputs[o].dims;
  for (size_t k = 0; k < d.size(); ++k) {
    if (d[k] < 0 && (k > 0 || info.dynamic != DynamicKind::Batch)) return true;
  }
  return false;
}

// Runs on the device thread: from Start (afterRun false, before aclmdlExecuteAsync, to size the
// copy-out) and from Finish (afterRun true, once the slot's stream is idle).
std::vector<int64_t> ModelCore::ReadOutputDims(Slot &s, size_t o, bool afterRun) {
  const TensorInfo &t = info.outputs[o];
  const bool knownAfterRun = OutputDimsAfterRun(o);
  if (info.dynamic == DynamicKind::Static && !knownAfterRun) return t.dims;
  if (knownAfterRun && !afterRun) return t.maxDims;
  // Dynamic batch: the dims learned for this gear at load (never aclmdlGetCurOutputDims now: it
  // is per model, and a batch of another gear on the other slot may have updated it meanwhile).
  if (info.dynamic == DynamicKind::Batch && !t.dimsByGear.empty()) {
    const auto g = std::lower_bound(info.gears.begin(), info.gears.end(), s.job->gear);
    if (g != info.gears.end() && *g == s.job->gear) {
      return t.dimsByGear[static_cast<size_t>(g - info.gears.begin())];
    }
  }
  // Without a table (no aclmdlGetCurOutputDims): the gear in a leading -1, which holds for an
  // output whose batch is its leading dim, one row per item.
  if (info.dynamic == DynamicKind::Batch && !knownAfterRun) {
    std::vector<int64_t> dims = t.dims;
    if (!dims.empty() && dims[0] < 0) dims[0] = static_cast<int64_t>(s.job->gear);
    if (std::all_of(dims.begin(), dims.end(), [](int64_t v) { return v >= 0; })) return dims;
  }
  auto allKnown = [](const std::vector<int64_t> &d) {
    return std::all_of(d.begin(), d.end(), [](int64_t v) { return v >= 0; });
  };
  if (knownAfterRun && api_.aclmdlGetDatasetTensorDesc != nullptr &&
      api_.aclGetTensorDescNumDims != nullptr && api_.aclGetTensorDescDimV2 != nullptr) {
    aclTensorDesc *d = api_.aclmdlGetDatasetTensorDesc(s.outDs, t.aclIndex);
    if (d != nullptr) {
      std::vector<int64_t> dims(api_.aclGetTensorDescNumDims(d));
      bool ok = true;
      for (size_t k = 0; k < dims.size() && ok; ++k) {
        ok = api_.aclGetTensorDescDimV2(d, k, &dims[k]) == ACL_SUCCESS;
      }
      if (ok && !dims.empty() && allKnown(dims)) return dims;
    }
    TakeRecentErrMsg(api_);
  }
  if (api_.aclmdlGetCurOutputDims != nullptr) {
    auto io = std::make_unique<aclmdlIODims>();
    if (api_.aclmdlGetCurOutputDims(desc_, t.aclIndex, io.get()) == ACL_SUCCESS) {
      std::vector<int64_t> dims(io->dims, io->dims + std::min(io->dimCount, ACL_MAX_DIM_CNT));
      if (!dims.empty() && allKnown(dims) && dims.size() == t.dims.size()) return dims;
    } else {
      TakeRecentErrMsg(api_);
    }
  }
  // Fallback: the leading dynamic dimension is the batch of this execution.
  std::vector<int64_t> dims = t.dims;
  const int64_t batch = info.dynamic == DynamicKind::Batch
                            ? static_cast<int64_t>(s.job->gear)
                            : (s.job->inputs.empty() || s.job->inputs[0].dims.empty()
                                   ? 1
                                   : s.job->inputs[0].dims[0]);
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] < 0) dims[k] = k == 0 ? batch : t.maxDims[k];
  }
  return dims;
}

void ModelCore::Start(int slotIndex, ExecJob *job, std::unique_lock<std::mutex> &copyingJsInputs) {
  Slot &s = slots_[static_cast<size_t>(slotIndex)];
  s.job = job;
  ++inflight_;
  s.done = false;
  s.outDims.assign(info.outputs.size(), {});
  s.outCopyBytes.assign(info.outputs.size(), 0);
  try {
    const auto t0 = Clock::now();
    for (size_t k = 0; k < info.inputs.size(); ++k) {
      const ExecInput &in = job->inputs[k];
      if (in.bytes > info.inputs[k].bufferBytes) {
        ThrowKind("invalid", "input " + info.inputs[k].name + " has " + std::to_string(in.bytes) +
                                 " bytes, more than its buffer of " +
                                 std::to_string(info.inputs[k].bufferBytes));
      }
      if (in.bytes > 0) std::memcpy(s.hostIn[k], in.data, in.bytes);
    }
    copyingJsInputs.unlock();
    s.enqueuedAt = Clock::now();
    s.hostCopyInMs = MsBetween(t0, s.enqueuedAt);

    if (setsTensorDesc_) {
      if (api_.aclmdlSetDatasetTensorDesc == nullptr || api_.aclCreateTensorDesc == nullptr) {
        ThrowKind("invalid", "this ACL library lacks aclmdlSetDatasetTensorDesc, needed for "
                             "models with dynamic non-batch dimensions");
      }
      for (auto *d : s.inDescs) api_.aclDestroyTensorDesc ? api_.aclDestroyTensorDesc(d) : void();
      s.inDescs.clear();
      for (size_t k = 0; k < info.inputs.size(); ++k) {
        const auto &dims = job->inputs[k].dims;
        aclTensorDesc *d = api_.aclCreateTensorDesc(info.inputs[k].dtype,
                                                    static_cast<int>(dims.size()), dims.data(),
                                                    info.inputs[k].format);
        if (d == nullptr) ThrowAcl(api_, 100000, "aclCreateTensorDesc");
        s.inDescs.push_back(d);
        ACL_CHECK(api_, aclmdlSetDatasetTensorDesc, s.inDs, d, info.inputs[k].aclIndex);
      }
    }
    ACL_CHECK(api_, aclrtRecordEvent, s.evStart, s.stream);
    for (size_t k = 0; k < info.inputs.size(); ++k) {
      const size_t bytes = job->inputs[k].bytes;
      if (bytes == 0) continue;
      ACL_CHECK(api_, aclrtMemcpyAsync, s.devIn[k], info.inputs[k].bufferBytes, s.hostIn[k], bytes,
                ACL_MEMCPY_HOST_TO_DEVICE, s.stream);
    }
    ACL_CHECK(api_, aclrtRecordEvent, s.evIn, s.stream);
    // One execution of a modelId at a time: chain after the previous batch's execute.
    if (lastStarted_ >= 0 && lastStarted_ != slotIndex) {
      const Slot &prev = slots_[static_cast<size_t>(lastStarted_)];
      if (prev.job != nullptr && !prev.done) {
        ACL_CHECK(api_, aclrtStreamWaitEvent, s.stream, prev.evExec);
      }
    }
    ACL_CHECK(api_, aclrtRecordEvent, s.evExecStart, s.stream);
    if (info.dynamic == DynamicKind::Batch) {
      ACL_CHECK(api_, aclmdlSetDynamicBatchSize, info.modelId, s.inDs, *mbatchIndex_, job->gear);
    }
    for (size_t o = 0; o < info.outputs.size(); ++o) {
      s.outDims[o] = ReadOutputDims(s, o, false);
      s.outCopyBytes[o] = std::min(TensorBytesOrMax(s.outDims[o], info.outputs[o].elemBytes),
                                   info.outputs[o].bufferBytes);
    }
    ACL_CHECK(api_, aclmdlExecuteAsync, info.modelId, s.inDs, s.outDs, s.stream);
    lastStarted_ = slotIndex;
    ACL_CHECK(api_, aclrtRecordEvent, s.evExec, s.stream);
    for (size_t o = 0; o < info.outputs.size(); ++o) {
      if (s.outCopyBytes[o] == 0) continue;
      ACL_CHECK(api_, aclrtMemcpyAsync, s.hostOut[o], info.outputs[o].bufferBytes, s.devOut[o],
                s.outCopyBytes[o], ACL_MEMCPY_DEVICE_TO_HOST, s.stream);
    }
    ACL_CHECK(api_, aclrtRecordEvent, s.evOut, s.stream);
  } catch (const FailureException &e) {
    if (copyingJsInputs.owns_lock()) copyingJsInputs.unlock();
    Fail(s, e.failure());
    // Whatever was already enqueued may still read or write this slot: fence the stream so the
    // slot is recycled (and the next execute chained) only after the device is done with it.
    const bool fenced = api_.aclrtRecordEvent(s.evExec, s.stream) == ACL_SUCCESS &&
                        api_.aclrtRecordEvent(s.evOut, s.stream) == ACL_SUCCESS;
    if (!fenced) {
      TakeRecentErrMsg(api_);
      api_.aclrtSynchronizeStream(s.stream);
      TakeRecentErrMsg(api_);
      s.done = true;
      s.doneAt = Clock::now();
    }
  }
}

void ModelCore::MarkDone(Slot &s, aclError rc, const char *api) {
  s.done = true;
  s.doneAt = Clock::now();
  if (rc != ACL_SUCCESS) {
    Failure f;
    f.kind = "acl";
    f.aclCode = rc;
    f.api = api;
    f.aclRecentMsg = TakeRecentErrMsg(api_);
    f.message = std::string(api) + " reported " + std::to_string(rc) + " " + AclErrorName(rc) +
                " for this batch" + (f.aclRecentMsg.empty() ? "" : ": " + f.aclRecentMsg);
    Fail(s, f);
  }
}

bool ModelCore::Poll(int slotIndex) {
  Slot &s = slots_[static_cast<size_t>(slotIndex)];
  if (s.done) return true;
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  const aclError rc = api_.aclrtQueryEventStatus(s.evOut, &status);
  if (rc != ACL_SUCCESS) {
    MarkDone(s, rc, "aclrtQueryEventStatus");
  } else if (status == ACL_EVENT_RECORDED_STATUS_COMPLETE) {
    MarkDone(s, ACL_SUCCESS, "");
  }
  return s.done;
}

bool ModelCore::Wait(int slotIndex, int32_t timeoutMs) {
  Slot &s = slots_[static_cast<size_t>(slotIndex)];
  if (api_.aclrtSynchronizeEventWithTimeout == nullptr) return false;
  if (s.done) return true;
  const aclError rc = api_.aclrtSynchronizeEventWithTimeout(s.evOut, timeoutMs);
  if (rc == ACL_SUCCESS) {
    MarkDone(s, ACL_SUCCESS, "");
  } else if (IsWaitTimeout(rc)) {
    TakeRecentErrMsg(api_);  // a wait that timed out is not an error; clear the thread's text
  } else if (IsNotSupported(rc)) {
    // The symbol exists but this SoC/driver does not support the call: says nothing about the
    // batch, which the caller polls like the others.
    TakeRecentErrMsg(api_);
    return false;
  } else {
    MarkDone(s, rc, "aclrtSynchronizeEventWithTimeout");
  }
  return true;
}

void ModelCore::FillTimings(Slot &s, ExecJob *job, Clock::time_point prevDoneAt,
                            double hostCopyOutMs) {
  float inMs = 0, execMs = 0, outMs = 0;
  const bool timed =
      api_.aclrtEventElapsedTime != nullptr &&
      api_.aclrtEventElapsedTime(&inMs, s.evStart, s.evIn) == ACL_SUCCESS &&
      api_.aclrtEventElapsedTime(&execMs, s.evExecStart, s.evExec) == ACL_SUCCESS &&
      api_.aclrtEventElapsedTime(&outMs, s.evExec, s.evOut) == ACL_SUCCESS;
  if (timed) {
    job->copyInMs = s.hostCopyInMs + std::max(0.0f, inMs);
    job->executeMs = std::max(0.0f, execMs);
    job->copyOutMs = std::max(0.0f, outMs) + hostCopyOutMs;
  } else {
    // Without device timestamps: the device-side span, from when this batch could start.
    TakeRecentErrMsg(api_);
    job->copyInMs = s.hostCopyInMs;
    job->executeMs = MsBetween(std::max(s.enqueuedAt, prevDoneAt), s.doneAt);
    job->copyOutMs = hostCopyOutMs;
  }
}

ExecJob *ModelCore::Finish(int slotIndex, Clock::time_point prevDoneAt) {
  Slot &s = slots_[static_cast<size_t>(slotIndex)];
  ExecJob *job = s.job;
  // The stream is idle, so this returns at once; it surfaces an asynchronous device failure of
  // this batch (e.g. a failed kernel), which event waits do not report.
  const aclError rc = api_.aclrtSynchronizeStream(s.stream);
  if (rc != ACL_SUCCESS) MarkDone(s, rc, "aclrtSynchronizeStream");
  const auto t0 = Clock::now();
  if (!job->failed) {
    for (size_t o = 0; o < info.outputs.size(); ++o) {
      const TensorInfo &t = info.outputs[o];
      ExecOutput out;
      out.dims = OutputDimsAfterRun(o) ? ReadOutputDims(s, o, true) : s.outDims[o];
      out.bytes = TensorBytesOrMax(out.dims, t.elemBytes);  // SIZE_MAX fails the check below
      if (out.bytes > t.bufferBytes) {
        Failure f;
        f.kind = "internal";
        f.message = "output " + t.name + " reports dims " + DimsText(out.dims) +
                    " larger than its buffer of " + std::to_string(t.bufferBytes) + " bytes";
        Fail(s, f);
        break;
      }
      out.data = static_cast<uint8_t *>(std::malloc(out.bytes > 0 ? out.bytes : 1));
      if (out.bytes > 0) std::memcpy(out.data, s.hostOut[o], out.bytes);
      job->outputs.push_back(std::move(out));
    }
  }
  const auto end = Clock::now();
  if (!job->failed) FillTimings(s, job, prevDoneAt, MsBetween(t0, end));
  job->totalMs = MsBetween(job->submittedAt, end);
  job->overran = job->timeoutMs > 0 && job->totalMs > job->timeoutMs;
  s.job = nullptr;
  --inflight_;
  return job;
}

}  // namespace npufleet
