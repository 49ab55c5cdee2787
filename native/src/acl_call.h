// Failure types thrown on the device thread and carried back to JS as plain data.
#pragma once

#include <exception>
#include <string>

#include "acl_api.h"

namespace npufleet {

// What JS gets: kind selects the FleetError code family in src/device ("acl" carries aclError).
struct Failure {
  std::string kind;     // "acl" | "closed" | "invalid" | "internal"
  std::string message;  // human text, names the API that failed
  aclError aclCode = 0;
  std::string aclRecentMsg;  // aclGetRecentErrMsg() read on the failing thread
  std::string api;
};

class FailureException : public std::exception {
 public:
  explicit FailureException(Failure f) : failure_(std::move(f)) {}
  const char *what() const noexcept override { return failure_.message.c_str(); }
  const Failure &failure() const { return failure_; }

 private:
  Failure failure_;
};

// Reads (and clears) the calling thread's ACL error text. Only call on the thread that failed.
inline std::string TakeRecentErrMsg(const AclApi &api) {
  const char *msg = api.aclGetRecentErrMsg();
  return msg == nullptr ? std::string() : std::string(msg);
}

[[noreturn]] inline void ThrowAcl(const AclApi &api, aclError code, const char *apiName,
                                  const std::string &context = std::string()) {
  Failure f;
  f.kind = "acl";
  f.aclCode = code;
  f.api = apiName;
  f.aclRecentMsg = TakeRecentErrMsg(api);
  f.message = std::string(apiName) + " failed: " + std::to_string(code) + " " + AclErrorName(code);
  if (!context.empty()) f.message += " (" + context + ")";
  if (!f.aclRecentMsg.empty()) f.message += ": " + f.aclRecentMsg;
  throw FailureException(std::move(f));
}

[[noreturn]] inline void ThrowKind(const char *kind, const std::string &message) {
  Failure f;
  f.kind = kind;
  f.message = message;
  throw FailureException(std::move(f));
}

// ACL_CHECK(api, aclrtMalloc, &p, n, policy) — calls api.aclrtMalloc(...) and throws a
// FailureException carrying the code, its name and the thread's recent error text on failure.
#define ACL_CHECK(api, fn, ...)                                         \
  do {                                                                  \
    const ::npufleet::aclError acl_check_rc_ = (api).fn(__VA_ARGS__);  \
    if (acl_check_rc_ != ::npufleet::ACL_SUCCESS)                       \
      ::npufleet::ThrowAcl((api), acl_check_rc_, #fn);                  \
  } while (0)

}  // namespace npufleet
