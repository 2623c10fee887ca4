#include "store/blob_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "common/crypto.h"

namespace sluice::store {
namespace {

Status Errno(std::string_view what, const std::string& path, int err) {
  return Status::Internal("blob store: " + std::string(what) + " " + path + ": " +
                          std::strerror(err));
}

Status InvalidDigest(std::string_view digest) {
  // The digest may be hostile input; show only a bounded prefix of it.
  return Status::InvalidArgument("invalid blob digest \"" + std::string(digest.substr(0, 80)) +
                                 "\" (expected 64 lowercase hex characters)");
}

// mkdir that treats "already there" as success.
Status EnsureDir(const std::string& path, bool* created) {
  if (::mkdir(path.c_str(), 0755) == 0) {
    if (created) *created = true;
    return Status::Ok();
  }
  if (errno == EEXIST) return Status::Ok();
  return Errno("mkdir", path, errno);
}

// A rename or a new entry is durable only once its directory is fsynced.
Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open dir", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Errno("fsync dir", dir, err);
  return Status::Ok();
}

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

std::string DirOf(const std::string& path) { return path.substr(0, path.rfind('/')); }

}  // namespace

BlobStore::BlobStore(std::string root_dir) : root_(std::move(root_dir)) {}

bool BlobStore::IsValidDigest(std::string_view digest) {
  if (digest.size() != 64) return false;
  for (char c : digest) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Only ever called with a digest that passed IsValidDigest, so the path stays under root_.
std::string BlobStore::PathFor(std::string_view digest) const {
  return root_ + "/sha256/" + std::string(digest.substr(0, 2)) + "/" +
         std::string(digest.substr(2));
}

Result<std::string> BlobStore::Put(std::string_view data) {
  std::string digest = Sha256Hex(data);
  SLUICE_RETURN_IF_ERROR(PutVerified(digest, data));
  return digest;
}

Status BlobStore::PutVerified(std::string_view digest, std::string_view data) {
  if (!IsValidDigest(digest)) return InvalidDigest(digest);
  std::string actual = Sha256Hex(data);
  if (actual != digest) {
    return Status::InvalidArgument("blob digest mismatch: expected " + std::string(digest) +
                                   ", data hashes to " + actual);
  }
  const std::string path = PathFor(digest);
  // Content-addressed: a complete file of the right size already holds these bytes (Get still
  // verifies them), so a repeated upload costs no write.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<size_t>(st.st_size) == data.size()) {
    return Status::Ok();
  }

  const std::string algo_dir = root_ + "/sha256";
  const std::string dir = DirOf(path);
  bool created_algo = false, created_dir = false;
  SLUICE_RETURN_IF_ERROR(EnsureDir(root_, nullptr));
  SLUICE_RETURN_IF_ERROR(EnsureDir(algo_dir, &created_algo));
  SLUICE_RETURN_IF_ERROR(EnsureDir(dir, &created_dir));
  if (created_algo) SLUICE_RETURN_IF_ERROR(SyncDir(root_));
  if (created_dir) SLUICE_RETURN_IF_ERROR(SyncDir(algo_dir));

  // A unique temporary name in the same directory, so the rename is atomic and concurrent Puts
  // of the same blob never write into each other's file. Readers skip names starting with '.'.
  const std::string tmp = dir + "/.tmp-" + std::string(digest.substr(2, 16)) + "-" + RandomHex(8);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("create", tmp, errno);
  Status s = WriteAll(fd, data, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Errno("fsync", tmp, errno);
  if (::close(fd) != 0 && s.ok()) s = Errno("close", tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Errno("rename", tmp, errno);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return SyncDir(dir);
}

Result<std::string> BlobStore::Get(std::string_view digest) const {
  if (!IsValidDigest(digest)) return InvalidDigest(digest);
  const std::string path = PathFor(digest);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("blob " + std::string(digest) + " not found");
    return Errno("open", path, errno);
  }
  std::string data;
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Errno("read", path, err);
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  // Disks and people corrupt files; never hand out bytes that are not the blob asked for.
  if (Sha256Hex(data) != digest) {
    return Status::Internal("blob " + std::string(digest) + " is corrupt");
  }
  return data;
}

int64_t BlobStore::Size(std::string_view digest) const {
  if (!IsValidDigest(digest)) return 0;
  struct stat st {};
  if (::stat(PathFor(digest).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  return static_cast<int64_t>(st.st_size);
}

bool BlobStore::Has(std::string_view digest) const {
  if (!IsValidDigest(digest)) return false;
  struct stat st;
  return ::stat(PathFor(digest).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Status BlobStore::Delete(std::string_view digest) {
  if (!IsValidDigest(digest)) return InvalidDigest(digest);
  const std::string path = PathFor(digest);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return Status::NotFound("blob " + std::string(digest) + " not found");
    return Errno("unlink", path, errno);
  }
  return SyncDir(DirOf(path));
}

}  // namespace sluice::store
