// Names the calling thread, so `top -H`, `perf` and /proc/PID/task/*/comm tell the server's
// threads apart (the swarm bench reads them to say which thread spent the CPU of a release).
#pragma once

#include <string>
#include <string_view>

namespace sluice {

// Linux keeps at most 15 bytes of a thread's name; a longer one is cut there. Best effort: a
// name that cannot be set leaves the thread as it was (nothing depends on the name).
void NameThisThread(std::string_view name);

// The calling thread's name as the kernel holds it ("" if it cannot be read).
std::string ThisThreadName();

}  // namespace sluice
