#include "acl_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace npufleet {

namespace {

std::mutex g_mutex;
AclBackend *g_backend = nullptr;  // never freed: lives as long as the process (dlclose is unsafe)
bool g_initialised = false;
// Threads inside the initialised library (device threads from before aclrtSetDevice until after
// their teardown; a JS thread for one query). aclFinalize needs none, and the count is read under
// g_mutex, the lock a new user takes, so no device can be opened between the check and the call.
int g_users = 0;

// Re-initialise after FinalizeBackendIfUnused (another env, e.g. a worker thread, came up later).
// Holds g_mutex.
void InitialiseLocked() {
  if (g_initialised) return;
  const aclError rc = g_backend->api.aclInit(nullptr);
  if (rc != ACL_SUCCESS && rc != ACL_ERROR_REPEAT_INITIALIZE) {
    throw std::runtime_error("aclInit failed with " + std::to_string(rc) + " (" + AclErrorName(rc) +
                             ")");
  }
  g_initialised = true;
}

std::string EnvOr(const char *name) {
  const char *v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

struct Candidate {
  std::string path;
  std::string reason;  // which rule picked it, for the error text
};

bool IsFile(const std::string &path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// CANN's install roots when no set_env.sh was sourced (acl-api.md §10: new CANN installs under
// cann/, older toolkits under ascend-toolkit/latest/, the inference-only package under nnae/).
constexpr const char *kDefaultAscendLibs[] = {
    "/usr/local/Ascend/cann/lib64/libascendcl.so",
    "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
    "/usr/local/Ascend/nnae/latest/lib64/libascendcl.so",
};

Candidate Pick(const std::string &addonDir) {
  const std::string simPath = addonDir + "/libacl_sim.so";
  if (EnvOr("NPU_FLEET_DEVICE") == "sim") return {simPath, "NPU_FLEET_DEVICE=sim"};
  const std::string explicitLib = EnvOr("NPU_FLEET_ACL_LIB");
  if (!explicitLib.empty()) return {explicitLib, "NPU_FLEET_ACL_LIB"};
  for (const char *var : {"ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"}) {
    const std::string home = EnvOr(var);
    if (!home.empty()) return {home + "/lib64/libascendcl.so", std::string("$") + var};
  }
  // A CANN host whose environment set LD_LIBRARY_PATH only (a container image, a unit file), or
  // none at all: a libascendcl.so found there is used (and an error if it cannot load), never
  // silently replaced by the simulator, which would serve an NPU host's traffic on its CPU.
  // Searched by hand rather than dlopen("libascendcl.so") so a missing library is told apart from
  // one whose dependencies (the driver's lib64) are missing, and the path reported is absolute.
  const std::string ldPath = EnvOr("LD_LIBRARY_PATH");
  for (size_t start = 0; start <= ldPath.size();) {
    size_t end = ldPath.find(':', start);
    if (end == std::string::npos) end = ldPath.size();
    const std::string dir = ldPath.substr(start, end - start);
    start = end + 1;
    if (dir.empty()) continue;
    const std::string lib = dir + "/libascendcl.so";
    if (IsFile(lib)) return {lib, "LD_LIBRARY_PATH"};
  }
  for (const char *lib : kDefaultAscendLibs) {
    if (IsFile(lib)) return {lib, "the default CANN install path"};
  }
  return {simPath,
          "no NPU_FLEET_ACL_LIB / ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME, no libascendcl.so on "
          "LD_LIBRARY_PATH or under /usr/local/Ascend: bundled simulator"};
}

}  // namespace

const AclBackend &GetBackend(const std::string &addonDir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_backend != nullptr) {
    InitialiseLocked();
    return *g_backend;
  }

  const Candidate c = Pick(addonDir);
  void *handle = dlopen(c.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char *err = dlerror();
    throw std::runtime_error("cannot load the ACL library " + c.path + " (chosen by " + c.reason +
                             "): " + (err ? err : "unknown dlopen error") +
                             ". Fix: run `npm run build:native` for the bundled simulator, set "
                             "NPU_FLEET_ACL_LIB to a libascendcl.so, source CANN's set_env.sh (it also puts "
                             "the driver's /usr/local/Ascend/driver/lib64{,/common,/driver} on "
                             "LD_LIBRARY_PATH, which libascendcl.so needs), or set "
                             "NPU_FLEET_DEVICE=sim.");
  }

  auto *backend = new AclBackend();
  std::vector<std::string> missing;
#define NPUFLEET_RESOLVE_REQUIRED(ret, name, params)                                     \
  backend->api.name = reinterpret_cast<ret(*) params>(dlsym(handle, #name));             \
  if (backend->api.name == nullptr) missing.push_back(#name);
#define NPUFLEET_RESOLVE_OPTIONAL(ret, name, params) \
  backend->api.name = reinterpret_cast<ret(*) params>(dlsym(handle, #name));
  NPUFLEET_ACL_REQUIRED(NPUFLEET_RESOLVE_REQUIRED)
  NPUFLEET_ACL_OPTIONAL(NPUFLEET_RESOLVE_OPTIONAL)
#undef NPUFLEET_RESOLVE_REQUIRED
#undef NPUFLEET_RESOLVE_OPTIONAL

  if (!missing.empty()) {
    std::string list;
    for (const auto &m : missing) list += (list.empty() ? "" : ", ") + m;
    delete backend;
    dlclose(handle);
    throw std::runtime_error("the ACL library " + c.path + " (chosen by " + c.reason +
                             ") lacks required symbols: " + list +
                             ". Fix: point NPU_FLEET_ACL_LIB at a complete libascendcl.so or "
                             "rebuild the simulator with `npm run build:native`.");
  }

  // The simulator exports its own extension symbols; the real library never does.
  const bool isSim = backend->api.aclsimSetNextLoadBatchGears != nullptr ||
                     c.path.find("acl_sim") != std::string::npos;
  backend->kind = isSim ? "sim" : "ascend";
  backend->libraryPath = c.path;
  backend->handle = handle;

  const aclError rc = backend->api.aclInit(nullptr);
  if (rc != ACL_SUCCESS && rc != ACL_ERROR_REPEAT_INITIALIZE) {
    const char *msg = backend->api.aclGetRecentErrMsg();
    const std::string text = msg ? msg : "";
    delete backend;
    dlclose(handle);
    throw std::runtime_error("aclInit failed in " + c.path + " with " + std::to_string(rc) + " (" +
                             AclErrorName(rc) + ")" + (text.empty() ? "" : ": " + text));
  }
  g_initialised = true;
  g_backend = backend;
  return *g_backend;
}

const AclBackend *LoadedBackend() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_backend;
}

BackendUse::BackendUse() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_backend == nullptr) throw std::logic_error("BackendUse before GetBackend");
  InitialiseLocked();
  ++g_users;
}

BackendUse::~BackendUse() {
  std::lock_guard<std::mutex> lock(g_mutex);
  --g_users;
}

bool FinalizeBackendIfUnused() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_backend == nullptr || !g_initialised || g_users > 0) return false;
  g_backend->api.aclFinalize();
  g_initialised = false;
  return true;
}

}  // namespace npufleet
