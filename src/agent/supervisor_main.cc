// sluice-supervisor: started by `sluice agent`, one per attempt (agent/supervisor.h). Not for
// running by hand: it expects its listening control socket on fd 3.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "agent/supervisor.h"
#include "agent/supervisor_protocol.h"

int main(int argc, char** argv) {
  using sluice::supervisor::kListenFd;
  int accepting = 0;
  socklen_t len = sizeof accepting;
  if (argc != 2 || getsockopt(kListenFd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 ||
      !accepting) {
    std::fprintf(stderr,
                 "usage: sluice-supervisor ATTEMPT_DIR\n"
                 "Started by `sluice agent` for each attempt, with its control socket on fd %d; "
                 "not for running by hand.\n",
                 kListenFd);
    return 2;
  }
  // The agent waits for this process; the supervisor proper is its child, so that it is never
  // the agent's: reparented to init, it is reaped whenever it ends.
  pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "sluice-supervisor: fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (pid > 0) _exit(0);
  fcntl(kListenFd, F_SETFD, FD_CLOEXEC);  // the job must not inherit it
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  return sluice::supervisor::RunSupervisor(argv[1], kListenFd);
}
