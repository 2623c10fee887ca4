#include "common/thread_name.h"

#include <pthread.h>

namespace sluice {

namespace {
constexpr size_t kMaxName = 15;  // TASK_COMM_LEN (16) less the terminating NUL
}  // namespace

void NameThisThread(std::string_view name) {
  const std::string cut(name.substr(0, kMaxName));
  (void)pthread_setname_np(pthread_self(), cut.c_str());
}

std::string ThisThreadName() {
  char buf[kMaxName + 1] = {};
  if (pthread_getname_np(pthread_self(), buf, sizeof buf) != 0) return "";
  return buf;
}

}  // namespace sluice
