// Runtime services (runtime_*.cc) used by the model API (model_*.cc).
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "sim_common.h"
#include "sim_config.h"

#pragma GCC visibility push(hidden)
namespace sim {

struct Stream;

// Throws SimError(ACL_ERROR_UNINITIALIZE) before aclInit.
void rtRequireInit();
// Device of the calling thread's current context; throws SimError(107002) without one.
int rtCurrentDevice();
const SimConfig &rtConfig();

// Device memory accounting. rtReserve throws SimError(code) when the device is full.
// rtEpoch() changes at every aclInit, so a release from a previous init session is ignored.
void rtReserve(int dev, size_t bytes, int code, const std::string &what);
void rtRelease(int dev, size_t bytes, uint64_t epoch);
uint64_t rtEpoch();

// Resolves a stream handle (nullptr = default stream of the current context) and checks it
// belongs to the current context's device. Throws SimError.
std::shared_ptr<Stream> rtStream(aclrtStream s);
int rtStreamDevice(const Stream &s);
// True if [p, p+n) lies inside one aclrtMalloc allocation.
bool rtIsDeviceRange(const void *p, size_t n);
// Queues a task; a SimError it throws becomes the stream's pending error (reported by the
// next synchronize).
void rtEnqueue(const std::shared_ptr<Stream> &s, std::function<void()> task);

// 1-based execution counter of a device (fault injection counts with it).
uint64_t rtNextExecution(int dev);
// Sleeps up to ms (ms < 0: forever), returning early when the device is torn down.
// Returns false if interrupted.
bool rtDeviceSleep(int dev, double ms);

// Called by the runtime when a device is torn down / at aclFinalize (model_load.cc).
void mdlReleaseDevice(int dev);
void mdlReleaseAll();

}  // namespace sim
#pragma GCC visibility pop
