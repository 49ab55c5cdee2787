// Run-time resolution of the ACL library (DESIGN §5): dlopen + dlsym into the one AclApi table.
#pragma once

#include <string>

#include "acl_api.h"

namespace npufleet {

struct AclBackend {
  AclApi api;
  std::string kind;  // "ascend" | "sim"
  std::string libraryPath;
  void *handle = nullptr;
};

// The process-wide backend, loaded (and aclInit'ed) on first use; thread-safe. `addonDir` is the
// directory of the .node file, where the bundled libacl_sim.so sits. Throws std::runtime_error
// listing every path tried and how to fix it. A failed attempt is not cached, so a later call after
// the environment was fixed can succeed.
const AclBackend &GetBackend(const std::string &addonDir);

// nullptr until GetBackend succeeded once.
const AclBackend *LoadedBackend();

// A thread's use of the initialised library, held across its ACL calls (RAII). Taking it
// initialises ACL again if FinalizeBackendIfUnused ran since; throws std::runtime_error if that
// aclInit fails. Thread-safe; only after GetBackend succeeded once.
class BackendUse {
 public:
  BackendUse();
  ~BackendUse();
  BackendUse(const BackendUse &) = delete;
  BackendUse &operator=(const BackendUse &) = delete;
};

// Calls aclFinalize when the backend is loaded and initialised and no BackendUse is held, deciding
// under the lock a new BackendUse takes (a device opened on another thread at the same moment
// either holds its use first, and ACL stays up, or initialises ACL again after). At env teardown
// and process exit. Returns whether it finalized.
bool FinalizeBackendIfUnused();

}  // namespace npufleet
