// Parsing of NPU_FLEET_SIM_DEVICES, _DEVICE_MEMORY_BYTES, _PROFILE, _FAULTS, _STRICT_PINNED.
#include "sim_config.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace sim {
namespace {

std::string trim(const std::string &s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char &c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> splitList(const std::string &s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',' || c == ';') {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(trim(cur));
  return out;
}

bool parseU64(const std::string &s, uint64_t &v) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  errno = 0;
  char *end = nullptr;
  unsigned long long x = std::strtoull(s.c_str(), &end, 10);
  if (errno || *end) return false;
  v = x;
  return true;
}

bool parseBytes(const std::string &raw, size_t &v) {
  std::string s = lower(trim(raw));
  uint64_t mult = 1;
  const struct { const char *suf; uint64_t m; } sufs[] = {
      {"gib", 1ull << 30}, {"mib", 1ull << 20}, {"kib", 1ull << 10}, {"gb", 1000000000ull},
      {"mb", 1000000ull}, {"kb", 1000ull}, {"g", 1ull << 30}, {"m", 1ull << 20}, {"k", 1ull << 10}, {"b", 1}};
  for (const auto &x : sufs) {
    const size_t n = std::string(x.suf).size();
    if (s.size() > n && s.compare(s.size() - n, n, x.suf) == 0) {
      mult = x.m;
      s = trim(s.substr(0, s.size() - n));
      break;
    }
  }
  uint64_t n;
  if (!parseU64(s, n) || n == 0 || n > (uint64_t(1) << 50) / mult) return false;
  v = size_t(n * mult);
  return true;
}

}  // namespace

bool parseDurationMs(const std::string &raw, double &ms) {
  std::string s = lower(trim(raw));
  double mult = 1;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, "ms") == 0) {
    s = s.substr(0, s.size() - 2);
  } else if (s.size() > 2 && s.compare(s.size() - 2, 2, "us") == 0) {
    s = s.substr(0, s.size() - 2);
    mult = 1e-3;
  } else if (s.size() > 1 && s.back() == 's') {
    s = s.substr(0, s.size() - 1);
    mult = 1e3;
  }
  s = trim(s);
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return false;
  char *end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (*end || !std::isfinite(v) || v < 0 || v > 1e9) return false;
  ms = v * mult;
  return true;
}

bool parseProfile(const std::string &s, SimConfig &cfg, std::string &err) {
  cfg.profileOn = false;
  cfg.baseMs = cfg.perItemMs = 0;
  if (trim(s).empty()) return true;
  for (const std::string &item : splitList(s)) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      err = "NPU_FLEET_SIM_PROFILE: '" + item + "' is not key=duration (expected e.g. base=2ms,perItem=0.25ms)";
      return false;
    }
    const std::string key = lower(trim(item.substr(0, eq)));
    double ms;
    if (!parseDurationMs(item.substr(eq + 1), ms)) {
      err = "NPU_FLEET_SIM_PROFILE: '" + trim(item.substr(eq + 1)) + "' is not a duration (e.g. 2ms, 250us, 0.5s)";
      return false;
    }
    if (key == "base") cfg.baseMs = ms;
    else if (key == "peritem" || key == "per_item" || key == "per-item") cfg.perItemMs = ms;
    else {
      err = "NPU_FLEET_SIM_PROFILE: unknown key '" + key + "' (known: base, perItem)";
      return false;
    }
  }
  cfg.profileOn = true;
  return true;
}

bool parseFaults(const std::string &s, std::vector<Fault> &out, std::string &err) {
  out.clear();
  for (const std::string &item : splitList(s)) {
    if (item.empty()) continue;
    Fault f;
    f.text = item;
    std::string rest = lower(item);
    const std::string where = "NPU_FLEET_SIM_FAULTS: '" + item + "': ";
    if (rest.compare(0, 3, "dev") == 0) {
      const size_t colon = rest.find(':');
      uint64_t d;
      if (colon == std::string::npos || !parseU64(rest.substr(3, colon - 3), d) || d > 1024) {
        err = where + "device scope must look like dev1:";
        return false;
      }
      f.device = int(d);
      rest = rest.substr(colon + 1);
    }
    const bool noSyncWait = trim(rest).compare(0, 10, "nosyncwait") == 0;
    if (noSyncWait || trim(rest).compare(0, 12, "curdimsatrun") == 0) {
      // A property of the device, not of an execution: no @WHEN, no argument.
      const std::string name = noSyncWait ? "nosyncwait" : "curdimsatrun";
      if (trim(rest) != name) {
        err = where + name + " takes no @WHEN or argument (write " + name + " or devN:" + name + ")";
        return false;
      }
      f.kind = noSyncWait ? Fault::NOSYNCWAIT : Fault::CURDIMSATRUN;
      f.from = 1;
      f.to = UINT64_MAX;
      out.push_back(f);
      continue;
    }
    const size_t at = rest.find('@');
    if (at == std::string::npos) {
      err = where + "expected kind@k (e.g. fail@3, hang@5:2000ms, slow@2:x10, hang@value=1337:60s, crash@value=1337), nosyncwait or curdimsatrun";
      return false;
    }
    const std::string kind = trim(rest.substr(0, at));
    std::string pos = rest.substr(at + 1), arg;
    const size_t colon = pos.find(':');
    const bool hasArg = colon != std::string::npos;
    if (hasArg) {
      arg = trim(pos.substr(colon + 1));
      pos = pos.substr(0, colon);
    }
    pos = trim(pos);
    if (pos.compare(0, 6, "value=") == 0) {
      // A poison input: the fault follows the data, whichever execution (or process) carries it.
      char *end = nullptr;
      const std::string v = pos.substr(6);
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !std::isfinite(d)) {
        err = where + "value=V needs a finite number (e.g. hang@value=1337:60s)";
        return false;
      }
      f.byValue = true;
      f.value = float(d);
      f.from = 1;
      f.to = UINT64_MAX;
    } else if (!pos.empty() && pos.back() == '+') {
      if (!parseU64(pos.substr(0, pos.size() - 1), f.from)) f.from = 0;
      f.to = UINT64_MAX;
    } else if (pos.find('-') != std::string::npos) {
      const size_t dash = pos.find('-');
      if (!parseU64(pos.substr(0, dash), f.from) || !parseU64(pos.substr(dash + 1), f.to)) f.from = 0;
    } else {
      if (!parseU64(pos, f.from)) f.from = 0;
      f.to = f.from;
    }
    if (f.from == 0 || f.to < f.from) {
      err = where + "execution number must be k, k-m or k+ with k >= 1 (executions count from 1), or value=V";
      return false;
    }
    if (kind == "fail") {
      f.kind = Fault::FAIL;
      if (hasArg) {
        err = where + "fail takes no argument";
        return false;
      }
    } else if (kind == "hang") {
      f.kind = Fault::HANG;
      if (hasArg && !parseDurationMs(arg, f.hangMs)) {
        err = where + "hang duration must look like 2000ms or 2s";
        return false;
      }
    } else if (kind == "crash") {
      // The process dies on the spot (SIGABRT), as a driver or runtime crash would take it down.
      f.kind = Fault::CRASH;
      if (hasArg) {
        err = where + "crash takes no argument";
        return false;
      }
    } else if (kind == "slow") {
      f.kind = Fault::SLOW;
      if (!hasArg) {
        err = where + "slow needs :xF (factor) or :duration (added time)";
        return false;
      }
      if (arg[0] == 'x') {
        char *end = nullptr;
        f.factor = std::strtod(arg.c_str() + 1, &end);
        if (arg.size() < 2 || *end || !std::isfinite(f.factor) || f.factor < 1 || f.factor > 1e6) {
          err = where + "slow factor must look like x10 (>= 1)";
          return false;
        }
      } else if (!parseDurationMs(arg, f.addMs)) {
        err = where + "slow argument must be xF or a duration like 500ms";
        return false;
      }
    } else {
      err = where + "unknown fault kind '" + kind + "' (known: fail, hang, slow, crash, nosyncwait, curdimsatrun)";
      return false;
    }
    out.push_back(f);
  }
  return true;
}

bool loadConfigFromEnv(SimConfig &cfg, std::string &err) {
  cfg = SimConfig{};
  if (const char *e = std::getenv("NPU_FLEET_SIM_DEVICES"); e && *e) {
    uint64_t n;
    if (!parseU64(trim(e), n) || n < 1 || n > 64) {
      err = std::string("NPU_FLEET_SIM_DEVICES='") + e + "' must be an integer 1..64";
      return false;
    }
    cfg.devices = uint32_t(n);
  }
  if (const char *e = std::getenv("NPU_FLEET_SIM_DEVICE_MEMORY_BYTES"); e && *e) {
    if (!parseBytes(e, cfg.memoryBytes)) {
      err = std::string("NPU_FLEET_SIM_DEVICE_MEMORY_BYTES='") + e + "' must be a positive byte count (e.g. 1073741824, 512MiB, 2GiB)";
      return false;
    }
  }
  if (const char *e = std::getenv("NPU_FLEET_SIM_PROFILE")) {
    if (!parseProfile(e, cfg, err)) return false;
  }
  if (const char *e = std::getenv("NPU_FLEET_SIM_FAULTS")) {
    if (!parseFaults(e, cfg.faults, err)) return false;
    for (const Fault &f : cfg.faults) {
      if (f.device >= int(cfg.devices)) {
        err = "NPU_FLEET_SIM_FAULTS: '" + f.text + "' names device " + std::to_string(f.device) + " but there are " +
              std::to_string(cfg.devices) + " devices";
        return false;
      }
    }
  }
  if (const char *e = std::getenv("NPU_FLEET_SIM_STRICT_PINNED"); e && *e) {
    const std::string v = lower(trim(e));
    if (v == "0" || v == "false" || v == "no") cfg.strictPinned = false;
    else if (v == "1" || v == "true" || v == "yes") cfg.strictPinned = true;
    else {
      err = std::string("NPU_FLEET_SIM_STRICT_PINNED='") + e + "' must be 0 or 1";
      return false;
    }
  }
  if (const char *e = std::getenv("NPU_FLEET_SIM_LOAD_WORK_BUDGET"); e && *e) {
    if (!parseU64(trim(e), cfg.loadWorkBudget) || cfg.loadWorkBudget < 1) {
      err = std::string("NPU_FLEET_SIM_LOAD_WORK_BUDGET='") + e + "' must be a positive integer (ops)";
      return false;
    }
  }
  if (const char *e = std::getenv("NPU_FLEET_SIM_THREADS"); e && *e) {
    uint64_t n;
    if (!parseU64(trim(e), n) || n < 1 || n > 1024) {
      err = std::string("NPU_FLEET_SIM_THREADS='") + e + "' must be an integer 1..1024";
      return false;
    }
  }
  return true;
}

}  // namespace sim
