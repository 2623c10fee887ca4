#include "common/libarchive.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace sluice {
namespace {

// The soname of Debian 12's libarchive13 (the ABI the headers we build with describe).
constexpr char kSoname[] = "libarchive.so.13";

struct Loaded {
  LibArchive table;
  Status status;
};

Loaded Load() {
  Loaded l;
  // RTLD_LOCAL: its dependencies' symbols stay out of the global namespace. Never closed: the
  // functions are used until exit.
  void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* err = dlerror();
    l.status = Status::FailedPrecondition(
        std::string("workdir archives and audit bundles need libarchive (Debian package "
                    "libarchive13): ") +
        (err ? err : kSoname));
    return l;
  }
#define SLUICE_LIBARCHIVE_RESOLVE(name)                                             \
  l.table.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));              \
  if (!l.table.name) {                                                              \
    l.status = Status::FailedPrecondition(std::string(kSoname) + " has no " #name); \
    return l;                                                                       \
  }
  SLUICE_LIBARCHIVE_FUNCTIONS(SLUICE_LIBARCHIVE_RESOLVE)
#undef SLUICE_LIBARCHIVE_RESOLVE
  return l;
}

const Loaded& Get() {
  static const Loaded loaded = Load();  // thread-safe, once
  return loaded;
}

}  // namespace

Result<const LibArchive*> LoadLibArchive() {
  const Loaded& l = Get();
  if (!l.status.ok()) return l.status;
  return &l.table;
}

const LibArchive& LoadedLibArchive() {
  const Loaded& l = Get();
  if (!l.status.ok()) {
    std::fprintf(stderr, "sluice: internal error: libarchive used without loading it: %s\n",
                 l.status.message().c_str());
    std::abort();
  }
  return l.table;
}

}  // namespace sluice
