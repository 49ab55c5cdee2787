// ACL runtime: aclInit / aclFinalize, the process-wide state they create and tear down, and the
// calling thread's recent error message.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>

#include "compute.h"
#include "runtime_internal.h"

namespace sim {

// ------------------------------------------------------------ error messages
namespace {
thread_local std::string tl_err;
thread_local std::string tl_errOut;
bool g_logErrors = std::getenv("NPU_FLEET_SIM_LOG") != nullptr;
}  // namespace

aclError setError(aclError code, const std::string &msg) {
  tl_err = "[acl-sim] " + msg + " (aclError " + std::to_string(code) + ")";
  if (g_logErrors) std::fprintf(stderr, "%s\n", tl_err.c_str());
  return code;
}

// ------------------------------------------------------------ state
// Process-lifetime state lives on the heap and is never destroyed: a process that exits
// without aclFinalize must not run destructors that join (possibly hung) stream threads or
// destroy mutexes other threads still hold.
std::mutex &g_mu = *new std::mutex;
bool g_init = false;
bool g_everFinalized = false;
uint64_t g_epoch = 0;
SimConfig &g_cfg = *new SimConfig;
std::unique_ptr<Device[]> &g_dev = *new std::unique_ptr<Device[]>;
std::map<void *, std::shared_ptr<Context>> &g_ctx = *new std::map<void *, std::shared_ptr<Context>>;
std::map<void *, std::shared_ptr<Stream>> &g_streams = *new std::map<void *, std::shared_ptr<Stream>>;
std::map<void *, std::shared_ptr<Event>> &g_events = *new std::map<void *, std::shared_ptr<Event>>;
std::map<uintptr_t, DevAlloc> &g_devAllocs = *new std::map<uintptr_t, DevAlloc>;
std::map<uintptr_t, size_t> &g_hostAllocs = *new std::map<uintptr_t, size_t>;
std::map<uint64_t, std::shared_ptr<ReportQueue>> &g_reports = *new std::map<uint64_t, std::shared_ptr<ReportQueue>>;
std::mutex &g_sleepMu = *new std::mutex;
std::condition_variable &g_sleepCv = *new std::condition_variable;

// ------------------------------------------------------------ services for the model API (runtime.h)
void rtRequireInit() {
  std::lock_guard<std::mutex> lk(g_mu);
  requireInitLocked();
}
const SimConfig &rtConfig() { return g_cfg; }
uint64_t rtEpoch() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_epoch;
}

}  // namespace sim

using namespace sim;

// ------------------------------------------------------------ init / finalize / errors
ACLSIM_API aclError aclInit(const char *configPath) {
  API_BEGIN
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_init) return setError(ACL_ERROR_REPEAT_INITIALIZE, "aclInit was already called");
  if (configPath && *configPath) {
    struct stat st;
    if (stat(configPath, &st) != 0) return setError(ACL_ERROR_INVALID_FILE, std::string("config file not found: ") + configPath);
  }
  SimConfig cfg;
  std::string err;
  if (!loadConfigFromEnv(cfg, err)) return setError(ACL_ERROR_INVALID_PARAM, err);
  g_cfg = cfg;
  g_dev.reset(new Device[g_cfg.devices]);
  ++g_epoch;
  g_init = true;
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclFinalize() {
  API_BEGIN
  uint32_t n;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_init) {
      return g_everFinalized ? setError(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize was already called")
                             : setError(ACL_ERROR_UNINITIALIZE, "aclInit has not been called");
    }
    n = g_cfg.devices;
  }
  for (uint32_t d = 0; d < n; ++d) teardownDevice(int(d));
  mdlReleaseAll();
  std::map<uint64_t, std::shared_ptr<ReportQueue>> reports;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    for (auto &h : g_hostAllocs) std::free(reinterpret_cast<void *>(h.first));
    g_hostAllocs.clear();
    reports.swap(g_reports);
    g_init = false;
    g_everFinalized = true;
  }
  for (auto &r : reports) r.second->close();
  shutdownPool();
  {
    std::lock_guard<std::mutex> lk(g_sleepMu);
    g_dev.reset();
  }
  return ACL_SUCCESS;
  API_END
}

ACLSIM_API aclError aclFinalizeReference(uint64_t *refCount) {
  if (refCount) *refCount = 0;
  return aclFinalize();
}

ACLSIM_API const char *aclGetRecentErrMsg() {
  if (tl_err.empty()) return nullptr;
  tl_errOut.swap(tl_err);
  tl_err.clear();
  return tl_errOut.c_str();
}

ACLSIM_API size_t aclDataTypeSize(aclDataType t) {
  switch (t) {
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_FLOAT16: case ACL_INT16: case ACL_UINT16: case ACL_BF16: return 2;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: case ACL_COMPLEX64: return 8;
    case ACL_COMPLEX128: return 16;
    case ACL_COMPLEX32: return 4;
    default: return 0;
  }
}
