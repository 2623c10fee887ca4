#include "server/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/crypto.h"
#include "common/text.h"

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

Result<TokenAuth> TokenAuth::Bootstrap(store::Store* store, const std::string& data_dir,
                                       const Clock* clock) {
  TokenAuth auth;
  SLUICE_ASSIGN_OR_RETURN(auth.tokens_, store->LoadTokens());
  if (!auth.tokens_.empty()) return auth;
  store::WriteBatch batch;
  for (const char* kind : {"admin", "join"}) {
    std::string secret = std::string("sluice_") + kind + "_" + RandomHex(24);
    store::TokenRecord rec{std::string(kind) + "-" + RandomHex(4), kind, Sha256Hex(secret),
                           clock->NowMillis()};
    SLUICE_RETURN_IF_ERROR(WriteFileAtomic(data_dir + "/" + kind + ".token", secret + "\n", 0600));
    batch.tokens.push_back(rec);
  }
  // Files first, then hashes: a crash in between leaves no hash whose secret was never written.
  SLUICE_RETURN_IF_ERROR(store->Write(batch));
  auth.tokens_ = batch.tokens;
  return auth;
}

Role TokenAuth::Authenticate(std::string_view header, std::string* token_id) const {
  constexpr std::string_view kPrefix = "Bearer ";
  if (header.size() <= kPrefix.size() || header.substr(0, kPrefix.size()) != kPrefix) {
    return Role::kNone;
  }
  std::string secret = Trim(header.substr(kPrefix.size()));
  std::string hash = Sha256Hex(secret);
  Role role = Role::kNone;
  for (const auto& t : tokens_) {
    // Check every token so the time taken says nothing about which one matched.
    if (ConstantTimeEquals(hash, t.sha256)) {
      role = t.kind == "admin" ? Role::kAdmin : Role::kAgent;
      if (token_id != nullptr) *token_id = t.id;
    }
  }
  return role;
}

}  // namespace sluice::server
