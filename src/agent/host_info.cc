#include "agent/host_info.h"

#include <sched.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>

#include "agent/probe.h"
#include "agent/software_probe.h"
#include "common/text.h"

namespace sluice {
namespace {

// /proc files report size 0, so read until EOF rather than by size. Capped: these are small.
std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string data(1 << 20, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

// Calls fn(key, value) for each "key : value" line of /proc-style text.
template <typename Fn>
void ForEachColonLine(std::string_view text, Fn fn) {
  for (const std::string& line : Split(text, '\n')) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (fn(Trim(std::string_view(line).substr(0, colon)),
           Trim(std::string_view(line).substr(colon + 1)))) {
      return;
    }
  }
}

std::string Unquote(std::string_view v) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) {
    std::string out;
    std::string_view in = v.substr(1, v.size() - 2);
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == '\\' && i + 1 < in.size()) ++i;  // os-release uses shell escapes
      out += in[i];
    }
    return out;
  }
  return std::string(v);
}

}  // namespace

std::string ParseOsReleasePrettyName(std::string_view os_release) {
  for (const std::string& line : Split(os_release, '\n')) {
    std::string t = Trim(line);
    if (t.starts_with("PRETTY_NAME=")) return Unquote(std::string_view(t).substr(12));
  }
  return "";
}

std::string ParseCpuModel(std::string_view cpuinfo) {
  for (std::string_view want : {"model name", "Model", "Hardware", "cpu"}) {
    std::string found;
    ForEachColonLine(cpuinfo, [&](const std::string& k, const std::string& v) {
      if (k != want || v.empty()) return false;
      found = v;
      return true;
    });
    if (!found.empty()) return found;
  }
  return "";
}

Result<uint64_t> ParseMemTotalMib(std::string_view meminfo) {
  std::optional<Status> error;
  uint64_t mib = 0;
  bool seen = false;
  ForEachColonLine(meminfo, [&](const std::string& k, const std::string& v) {
    if (k != "MemTotal") return false;
    seen = true;
    std::string_view num = v;
    if (num.ends_with(" kB")) num.remove_suffix(3);
    uint64_t kb = 0;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), kb);
    if (ec != std::errc() || p != num.data() + num.size() || num.empty()) {
      error = Status::InvalidArgument("meminfo: bad MemTotal \"" + v + "\"");
    } else {
      mib = kb / 1024;
    }
    return true;
  });
  if (!seen) return Status::InvalidArgument("meminfo: no MemTotal line");
  if (error) return *error;
  return mib;
}

namespace {

// Values vendors leave in DMI when they did not fill it in (compared case-insensitively).
bool IsDmiPlaceholder(std::string_view v) {
  static constexpr std::string_view kPlaceholders[] = {"to be filled by o.e.m.",
                                                       "default string",
                                                       "not specified",
                                                       "not applicable",
                                                       "none",
                                                       "n/a",
                                                       "system manufacturer",
                                                       "system product name",
                                                       "o.e.m.",
                                                       "oem",
                                                       "unknown",
                                                       "0123456789"};
  std::string lower = ToLower(v);
  for (std::string_view p : kPlaceholders) {
    if (lower == p) return true;
  }
  return false;
}

std::string DmiPair(std::string_view vendor, std::string_view name) {
  std::string out;
  for (std::string_view part : {vendor, name}) {
    std::string t = Trim(part);
    if (t.empty() || IsDmiPlaceholder(t)) continue;
    if (t.size() > 128) t.resize(128);  // DMI strings are short; a long one is junk
    out += (out.empty() ? "" : " ") + t;
  }
  return out;
}

}  // namespace

std::string FormatDmiBoard(std::string_view sys_vendor, std::string_view product_name,
                           std::string_view board_vendor, std::string_view board_name) {
  std::string product = DmiPair(sys_vendor, product_name);
  std::string board = DmiPair(board_vendor, board_name);
  if (product.empty()) return board;
  if (board.empty() || board == product) return product;
  return product + " / " + board;
}

std::string ProbeDmiBoard(const std::string& dmi_dir) {
  auto read = [&](const char* name) { return ReadSmallFile(dmi_dir + "/" + name); };
  return FormatDmiBoard(read("sys_vendor"), read("product_name"), read("board_vendor"),
                        read("board_name"));
}

int AvailableCpuCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

namespace {

// Everything but the software: hardware and OS facts, and GPUs unless skipped.
Result<Inventory> TryProbeHardware(const ProbeOptions& opts) {
  Inventory inv;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) inv.hostname = host;
  inv.os = ParseOsReleasePrettyName(ReadSmallFile("/etc/os-release"));
  if (inv.os.empty()) inv.os = ParseOsReleasePrettyName(ReadSmallFile("/usr/lib/os-release"));
  struct utsname u;
  if (uname(&u) == 0) {
    inv.kernel = u.release;
    inv.arch = u.machine;
  }
  inv.board = ProbeDmiBoard();
  inv.cpu_model = ParseCpuModel(ReadSmallFile("/proc/cpuinfo"));
  inv.cpu_cores = AvailableCpuCores();
  if (auto mem = ParseMemTotalMib(ReadSmallFile("/proc/meminfo")); mem.ok()) {
    inv.memory_mib = *mem;
  }
  struct statvfs vfs;
  if (statvfs(opts.data_dir.c_str(), &vfs) == 0) {
    // f_bavail: blocks an unprivileged job can use, not the root-reserved remainder.
    inv.disk_free_mib = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize / (1024 * 1024);
  }

  inv.gpu_source = "none";
  if (opts.skip_gpus) return inv;
  ProbedGpus probed;
  if (!opts.nvidia_smi_file.empty()) {
    SLUICE_ASSIGN_OR_RETURN(probed, FileGpuProbe(opts.nvidia_smi_file).Probe());
    inv.gpu_source = "nvidia-smi-file";
  } else {
    GpuProbeOutcome o = ProbeGpus();
    inv.gpu_source = o.source;
    probed = std::move(o.probed);
  }
  inv.driver_version = probed.driver_version;
  inv.cuda_version = probed.cuda_version;
  inv.gpus = std::move(probed.gpus);
  return inv;
}

// CUDA toolkits, Python and PyTorch from this machine's / and the agent's PATH: what a job that
// inherits the agent's environment will find. Bounded by the probe's timeouts.
void AddSoftware(Inventory& inv) {
  SoftwareFacts sw = ProbeSoftware(SoftwareProbeOptions{});
  inv.cuda_toolkits = std::move(sw.cuda_toolkits);
  inv.python_version = std::move(sw.python_version);
  inv.torch_builds = std::move(sw.torch_builds);
  inv.container_runtimes = std::move(sw.container_runtimes);
}

}  // namespace

Result<Inventory> TryProbeHost(const ProbeOptions& opts) {
  SLUICE_ASSIGN_OR_RETURN(Inventory inv, TryProbeHardware(opts));
  if (!opts.skip_software) AddSoftware(inv);
  return inv;
}

Inventory ProbeHost(const ProbeOptions& opts) {
  Result<Inventory> r = TryProbeHardware(opts);
  if (!r.ok()) {
    ProbeOptions no_gpus = opts;
    no_gpus.skip_gpus = true;
    r = TryProbeHardware(no_gpus);  // cannot fail without GPU probing
  }
  Inventory inv = std::move(r).value();
  if (!opts.skip_software) AddSoftware(inv);
  return inv;
}

}  // namespace sluice
