#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sluice {

Status WriteFileAtomic(const std::string& path, const std::string& content, int mode,
                       Durability durability) {
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what) {
    return Status::Internal(what + " " + tmp + ": " + std::strerror(errno));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return fail("cannot create");
  ::fchmod(fd, static_cast<mode_t>(mode));  // the umask, or a leftover tmp file's old mode
  for (size_t off = 0; off < content.size();) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = fail("cannot write");
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    off += static_cast<size_t>(n);
  }
  const bool sync = durability == Durability::kPowerLoss;
  if (sync && ::fsync(fd) != 0) {
    Status s = fail("cannot fsync");
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = fail("cannot rename");
    ::unlink(tmp.c_str());
    return s;
  }
  if (!sync) return Status::Ok();
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

}  // namespace sluice
