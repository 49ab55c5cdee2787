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

// Calls aclFinalize once, when the backend was loaded and initialised. Only at env teardown after
// every device thread has stopped.
void FinalizeBackend();

}  // namespace npufleet
