#include "server/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sluice::server {

Status WriteFileAtomic(const std::string& path, const std::string& content, int mode) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::Internal("cannot write " + tmp + ": " + std::strerror(errno));
  ::fchmod(fd, mode);  // umask may have narrowed or the file may have existed
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return Status::Internal("cannot write " + tmp + ": " + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::Internal("cannot rename " + tmp + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace sluice::server
