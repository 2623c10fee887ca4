#include "agent/checkpoint_sync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>   // renameat2
#include <stdlib.h>  // mkdtemp, realpath
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "common/crypto.h"
#include "common/json.h"
#include "net/http_client.h"

namespace sluice::checkpoint {
namespace {

namespace fs = std::filesystem;

// Chunks held in memory before their batch is checked against the store and sent. Bounds the
// upload's memory whatever the checkpoint's size (16 chunks of a big file, or up to
// kMissingBatch small ones).
constexpr size_t kMaxPendingBytes = size_t{64} << 20;
// Directory nesting the upload walks (one open descriptor per level).
constexpr int kMaxDepth = 128;
// Longest relative path and path component a manifest may name (Linux PATH_MAX / NAME_MAX).
constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxNameBytes = 255;

Status ErrnoStatus(const std::string& what, int err) {
  std::string msg = what + ": " + std::error_code(err, std::generic_category()).message();
  if (err == ENOENT) return Status::NotFound(msg);
  if (err == EACCES || err == EPERM) return Status::PermissionDenied(msg);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(msg);
  return Status::Internal(msg);
}

// Adds context in front of a status's message, keeping its code.
Status Prefixed(const std::string& prefix, const Status& s) {
  return Status(s.code(), prefix + ": " + s.message());
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

bool IsValidDigest(std::string_view d) {
  if (d.size() != 64) return false;
  return std::all_of(d.begin(), d.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Strict UTF-8 (no overlongs, no surrogates). Names that fail cannot round-trip through JSON,
// which would replace the bad bytes and restore the file under a different name.
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// A manifest path is safe to create under the restore directory: relative, no empty, "." or
// ".." components, no NUL, bounded length. This is what keeps a hostile manifest inside `dir`.
Status CheckRelPath(std::string_view path, const std::string& field) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(field + ": unsafe path \"" + std::string(path.substr(0, 200)) +
                                   "\": " + why);
  };
  if (path.empty()) return bad("empty");
  if (path.size() > kMaxPathBytes) return bad("longer than 4096 bytes");
  if (path.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (path.front() == '/') return bad("absolute paths are not allowed");
  if (!IsValidUtf8(path)) return bad("not valid UTF-8");
  size_t start = 0;
  while (true) {
    size_t end = path.find('/', start);
    std::string_view comp =
        path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (comp.empty()) return bad("empty path component");
    if (comp == "." || comp == "..") return bad("\".\" and \"..\" components are not allowed");
    if (comp.size() > kMaxNameBytes) return bad("a component is longer than 255 bytes");
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return Status::Ok();
}

uint64_t ChunkCount(uint64_t size) { return (size + kChunkBytes - 1) / kChunkBytes; }

// ---- Upload -----------------------------------------------------------------------------------

struct FileEntry {
  std::string path;
  uint32_t mode = 0;
  uint64_t size = 0;
  std::vector<std::string> chunks;
};

class Uploader {
 public:
  explicit Uploader(BlobTransport& t) : t_(t) {}

  // Walks the directory open at `dir` (whose relative path is `rel`, "" for the root). Takes
  // ownership of the descriptor.
  Status Walk(Fd dir, const std::string& rel, int depth) {
    if (depth > kMaxDepth) {
      return Status::ResourceExhausted("checkpoint directory nested deeper than " +
                                       std::to_string(kMaxDepth) + " levels at " + rel);
    }
    DIR* d = ::fdopendir(dir.get());
    if (d == nullptr) return ErrnoStatus("opendir " + Shown(rel), errno);
    dir.release();  // owned by `d` now
    struct Closer {
      DIR* d;
      ~Closer() { ::closedir(d); }
    } closer{d};

    std::vector<std::string> names;
    while (true) {
      errno = 0;
      dirent* e = ::readdir(d);
      if (e == nullptr) {
        if (errno != 0) return ErrnoStatus("reading directory " + Shown(rel), errno);
        break;
      }
      std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      names.emplace_back(name);
    }
    std::sort(names.begin(), names.end());

    const int dfd = ::dirfd(d);
    for (const std::string& name : names) {
      std::string path = rel.empty() ? name : rel + "/" + name;
      if (!IsValidUtf8(name)) {
        result_.skipped.push_back(path);
        continue;
      }
      struct stat st;
      if (::fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) {  // deleted by the job while we walked
          result_.skipped.push_back(path);
          continue;
        }
        return ErrnoStatus("stat " + path, errno);
      }
      if (S_ISDIR(st.st_mode)) {
        // O_NOFOLLOW: if the job swapped the directory for a symlink since the stat, the open
        // fails rather than leading the walk (and the upload) outside the checkpoint tree.
        Fd sub(::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub.get() < 0) {
          if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR) {
            result_.skipped.push_back(path);
            continue;
          }
          return ErrnoStatus("open " + path, errno);
        }
        SLUICE_RETURN_IF_ERROR(Walk(std::move(sub), path, depth + 1));
      } else if (S_ISREG(st.st_mode)) {
        // O_NONBLOCK: should a fifo take the file's place since the stat, opening it must not
        // hang the agent; the fstat below then skips it.
        Fd f(::openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        if (f.get() < 0) {
          if (errno == ENOENT || errno == ELOOP) {
            result_.skipped.push_back(path);
            continue;
          }
          return ErrnoStatus("open " + path, errno);
        }
        struct stat fst;
        if (::fstat(f.get(), &fst) != 0) return ErrnoStatus("stat " + path, errno);
        if (!S_ISREG(fst.st_mode)) {
          result_.skipped.push_back(path);
          continue;
        }
        SLUICE_RETURN_IF_ERROR(ReadFile(f.get(), path, fst.st_mode & 0777));
      } else {
        // Symlinks could point anywhere (and restoring them would let a checkpoint write
        // through them); sockets, fifos and devices carry no data worth saving.
        result_.skipped.push_back(path);
      }
    }
    return Status::Ok();
  }

  Result<UploadResult> Finish() {
    SLUICE_RETURN_IF_ERROR(Flush());
    std::sort(files_.begin(), files_.end(),
              [](const FileEntry& a, const FileEntry& b) { return a.path < b.path; });
    std::sort(result_.skipped.begin(), result_.skipped.end());
    Json files = Json::array();
    for (const FileEntry& f : files_) {
      files.push_back(
          Json{{"path", f.path}, {"mode", f.mode}, {"size", f.size}, {"chunks", f.chunks}});
    }
    // nlohmann's objects keep keys sorted, so the same tree always dumps to the same bytes and
    // an unchanged checkpoint keeps its digest.
    Json manifest{
        {"version", 1}, {"files", std::move(files)}, {"total_bytes", result_.total_bytes}};
    std::string bytes = DumpJson(manifest);
    if (bytes.size() > kMaxManifestBytes) {
      return Status::ResourceExhausted("checkpoint manifest would be " +
                                       std::to_string(bytes.size()) + " bytes, over the " +
                                       std::to_string(kMaxManifestBytes) + "-byte limit");
    }
    std::string digest = Sha256Hex(bytes);
    // Last, so the checkpoint's identity exists only once every chunk it names is stored.
    Status s = t_.Put(digest, std::move(bytes));
    if (!s.ok()) return Prefixed("storing checkpoint manifest", s);
    result_.manifest_digest = std::move(digest);
    result_.files = files_.size();
    return std::move(result_);
  }

 private:
  static std::string Shown(const std::string& rel) { return rel.empty() ? "." : rel; }

  Status ReadFile(int fd, const std::string& path, uint32_t mode) {
    if (files_.size() >= kMaxFiles) {
      return Status::ResourceExhausted("checkpoint has more than " + std::to_string(kMaxFiles) +
                                       " files");
    }
    FileEntry entry;
    entry.path = path;
    entry.mode = mode;
    // Read to EOF once and store exactly what was read: the size and the chunks describe the
    // same bytes even if the job is still writing (see the header on consistency).
    while (true) {
      if (buf_.size() != kChunkBytes) buf_.assign(kChunkBytes, '\0');
      size_t got = 0;
      while (got < kChunkBytes) {
        ssize_t n = ::read(fd, buf_.data() + got, kChunkBytes - got);
        if (n < 0) {
          if (errno == EINTR) continue;
          return ErrnoStatus("read " + path, errno);
        }
        if (n == 0) break;
        got += static_cast<size_t>(n);
      }
      if (got == 0) break;
      // A full chunk takes the buffer over; a short one is copied out at its own size, so the
      // pending batch holds what was read and not 4 MiB per small file.
      std::string chunk =
          got == kChunkBytes ? std::exchange(buf_, std::string()) : buf_.substr(0, got);
      if (result_.total_bytes + got > kMaxTotalBytes) {
        return Status::ResourceExhausted("checkpoint is larger than " +
                                         std::to_string(kMaxTotalBytes >> 30) + " GiB (at " + path +
                                         ")");
      }
      result_.total_bytes += got;
      entry.size += got;
      std::string digest = Sha256Hex(chunk);
      entry.chunks.push_back(digest);
      ++result_.chunks;
      SLUICE_RETURN_IF_ERROR(AddChunk(std::move(digest), std::move(chunk)));
      if (got < kChunkBytes) break;  // EOF reached inside this chunk
    }
    files_.push_back(std::move(entry));
    return Status::Ok();
  }

  Status AddChunk(std::string digest, std::string bytes) {
    if (present_.count(digest)) return Status::Ok();  // sent or found earlier in this upload
    pending_bytes_ += bytes.size();
    pending_.emplace_back(std::move(digest), std::move(bytes));
    if (pending_.size() >= kMissingBatch || pending_bytes_ >= kMaxPendingBytes) return Flush();
    return Status::Ok();
  }

  // Asks the store which pending chunks it lacks and sends exactly those.
  Status Flush() {
    std::vector<std::string> ask;
    std::unordered_set<std::string> asked;
    for (const auto& [digest, bytes] : pending_) {
      if (asked.insert(digest).second) ask.push_back(digest);
    }
    std::unordered_set<std::string> missing;
    for (size_t i = 0; i < ask.size(); i += kMissingBatch) {
      std::vector<std::string> batch(ask.begin() + i,
                                     ask.begin() + std::min(ask.size(), i + kMissingBatch));
      auto m = t_.Missing(batch);
      if (!m.ok()) return Prefixed("asking which checkpoint chunks the server lacks", m.status());
      // Only digests we asked about count; anything else in the answer is ignored.
      for (std::string& d : *m) {
        if (asked.count(d)) missing.insert(std::move(d));
      }
    }
    for (auto& [digest, bytes] : pending_) {
      if (present_.count(digest)) continue;  // a duplicate within this batch, already sent
      if (missing.count(digest)) {
        size_t n = bytes.size();
        Status s = t_.Put(digest, std::move(bytes));
        if (!s.ok()) return Prefixed("uploading checkpoint chunk " + digest, s);
        result_.uploaded_bytes += n;
        ++result_.uploaded_chunks;
      }
      present_.insert(digest);
    }
    pending_.clear();
    pending_bytes_ = 0;
    return Status::Ok();
  }

  BlobTransport& t_;
  std::string buf_;  // read buffer, reused across short chunks
  UploadResult result_;
  std::vector<FileEntry> files_;
  std::vector<std::pair<std::string, std::string>> pending_;  // (digest, bytes)
  size_t pending_bytes_ = 0;
  std::unordered_set<std::string> present_;  // digests the store is known to hold
};

// ---- Manifest parsing -------------------------------------------------------------------------

Status CheckKeys(const Json& obj, std::initializer_list<std::string_view> allowed,
                 const std::string& path) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
      return Status::InvalidArgument((path.empty() ? "" : path + ".") + it.key() +
                                     ": unknown field");
    }
  }
  return Status::Ok();
}

Result<std::vector<FileEntry>> ParseManifest(std::string_view bytes) {
  SLUICE_ASSIGN_OR_RETURN(Json j, ParseJson(bytes, /*max_depth=*/8));
  if (!j.is_object()) return Status::InvalidArgument("expected an object");
  SLUICE_RETURN_IF_ERROR(CheckKeys(j, {"version", "files", "total_bytes"}, ""));
  SLUICE_ASSIGN_OR_RETURN(int64_t version, GetInt(j, "version"));
  if (version != 1) {
    return Status::InvalidArgument("version: unsupported manifest version " +
                                   std::to_string(version) + " (this agent reads version 1)");
  }
  auto files_it = j.find("files");
  if (files_it == j.end() || files_it->is_null()) {
    return Status::InvalidArgument("files: required field is missing");
  }
  if (!files_it->is_array()) {
    return Status::InvalidArgument(std::string("files: expected an array, got ") +
                                   files_it->type_name());
  }
  if (files_it->size() > kMaxFiles) {
    return Status::ResourceExhausted("files: " + std::to_string(files_it->size()) +
                                     " files, over the limit of " + std::to_string(kMaxFiles));
  }
  SLUICE_ASSIGN_OR_RETURN(int64_t total_bytes, GetInt(j, "total_bytes"));
  if (total_bytes < 0 || static_cast<uint64_t>(total_bytes) > kMaxTotalBytes) {
    return Status::ResourceExhausted("total_bytes: " + std::to_string(total_bytes) +
                                     " is outside 0.." + std::to_string(kMaxTotalBytes));
  }

  std::vector<FileEntry> files;
  files.reserve(files_it->size());
  uint64_t sum = 0;
  for (size_t i = 0; i < files_it->size(); ++i) {
    const Json& f = (*files_it)[i];
    const std::string where = "files[" + std::to_string(i) + "]";
    if (!f.is_object()) return Status::InvalidArgument(where + ": expected an object");
    SLUICE_RETURN_IF_ERROR(CheckKeys(f, {"path", "mode", "size", "chunks"}, where));
    FileEntry e;
    SLUICE_ASSIGN_OR_RETURN(e.path, GetString(f, "path", where));
    SLUICE_RETURN_IF_ERROR(CheckRelPath(e.path, where + ".path"));
    if (!files.empty() && !(files.back().path < e.path)) {
      return Status::InvalidArgument(where + ".path: \"" + e.path +
                                     "\" is not after the previous path (paths must be sorted "
                                     "and unique)");
    }
    SLUICE_ASSIGN_OR_RETURN(int64_t mode, GetInt(f, "mode", where));
    // Permission bits only: a manifest must not hand out setuid binaries.
    if (mode < 0 || mode > 0777) {
      return Status::InvalidArgument(where + ".mode: " + std::to_string(mode) +
                                     " is not a permission mode (0..0777)");
    }
    e.mode = static_cast<uint32_t>(mode);
    SLUICE_ASSIGN_OR_RETURN(int64_t size, GetInt(f, "size", where));
    if (size < 0 || static_cast<uint64_t>(size) > kMaxTotalBytes) {
      return Status::InvalidArgument(where + ".size: " + std::to_string(size) + " is outside 0.." +
                                     std::to_string(kMaxTotalBytes));
    }
    e.size = static_cast<uint64_t>(size);
    sum += e.size;
    if (sum > kMaxTotalBytes) {
      return Status::ResourceExhausted(where + ".size: the files add up to more than " +
                                       std::to_string(kMaxTotalBytes) + " bytes");
    }
    auto chunks_it = f.find("chunks");
    if (chunks_it == f.end() || chunks_it->is_null()) {
      return Status::InvalidArgument(where + ".chunks: required field is missing");
    }
    if (!chunks_it->is_array()) {
      return Status::InvalidArgument(where + ".chunks: expected an array, got " +
                                     chunks_it->type_name());
    }
    if (chunks_it->size() != ChunkCount(e.size)) {
      return Status::InvalidArgument(where + ".chunks: " + std::to_string(chunks_it->size()) +
                                     " chunks, but a file of " + std::to_string(e.size) +
                                     " bytes has " + std::to_string(ChunkCount(e.size)));
    }
    for (size_t k = 0; k < chunks_it->size(); ++k) {
      const Json& c = (*chunks_it)[k];
      if (!c.is_string() || !IsValidDigest(c.get_ref<const std::string&>())) {
        return Status::InvalidArgument(where + ".chunks[" + std::to_string(k) +
                                       "]: expected a sha256 digest (64 lowercase hex characters)");
      }
      e.chunks.push_back(c.get<std::string>());
    }
    files.push_back(std::move(e));
  }
  if (sum != static_cast<uint64_t>(total_bytes)) {
    return Status::InvalidArgument("total_bytes: " + std::to_string(total_bytes) +
                                   " but the files add up to " + std::to_string(sum));
  }
  // A path cannot be both a file and a directory ("a" and "a/b"): the restore would fail half
  // way, so refuse before touching anything.
  std::unordered_set<std::string_view> file_paths;
  for (const FileEntry& e : files) file_paths.insert(e.path);
  for (const FileEntry& e : files) {
    for (size_t p = e.path.find('/'); p != std::string::npos; p = e.path.find('/', p + 1)) {
      std::string_view parent(e.path.data(), p);
      if (file_paths.count(parent)) {
        return Status::InvalidArgument("files: \"" + std::string(parent) +
                                       "\" is both a file and the directory of \"" + e.path + "\"");
      }
    }
  }
  return files;
}

// ---- Restore ----------------------------------------------------------------------------------

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write " + path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// A new entry or a rename is durable only once its directory is fsynced.
Status SyncDir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus("open " + dir, errno);
  if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + dir, errno);
  return Status::Ok();
}

// Fetches every chunk, verifies it, and writes the files under `root` (a directory this restore
// just created, so no entry in it predates us and nothing in it can be a planted symlink).
Status WriteTree(const std::vector<FileEntry>& files, const std::string& root, BlobTransport& t) {
  std::set<std::string> dirs;           // relative directories created so far
  std::string last_digest, last_bytes;  // runs of one chunk (zeroed regions) are fetched once
  for (const FileEntry& f : files) {
    for (size_t p = f.path.find('/'); p != std::string::npos; p = f.path.find('/', p + 1)) {
      std::string d = f.path.substr(0, p);
      if (dirs.count(d)) continue;
      std::string full = root + "/" + d;
      if (::mkdir(full.c_str(), 0755) != 0) return ErrnoStatus("mkdir " + full, errno);
      dirs.insert(std::move(d));
    }
    const std::string full = root + "/" + f.path;
    // O_EXCL | O_NOFOLLOW: never reuse or write through an existing entry.
    Fd fd(::open(full.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (fd.get() < 0) return ErrnoStatus("create " + full, errno);
    for (size_t i = 0; i < f.chunks.size(); ++i) {
      const std::string& digest = f.chunks[i];
      const std::string which = "chunk " + std::to_string(i) + " of " + f.path;
      if (digest != last_digest) {
        auto got = t.Get(digest);
        if (!got.ok()) return Prefixed("fetching " + which + " (" + digest + ")", got.status());
        std::string actual = Sha256Hex(*got);
        if (actual != digest) {
          return Status::InvalidArgument("checkpoint is corrupt: " + which + " should hash to " +
                                         digest + " but its " + std::to_string(got->size()) +
                                         " bytes hash to " + actual);
        }
        last_digest = digest;
        last_bytes = std::move(*got);
      }
      const uint64_t want =
          i + 1 < f.chunks.size() ? kChunkBytes : f.size - uint64_t{kChunkBytes} * i;
      if (last_bytes.size() != want) {
        return Status::InvalidArgument("checkpoint manifest is inconsistent: " + which + " has " +
                                       std::to_string(last_bytes.size()) +
                                       " bytes, the file's size implies " + std::to_string(want));
      }
      SLUICE_RETURN_IF_ERROR(WriteAll(fd.get(), last_bytes, full));
    }
    // After writing, so a read-only mode (0444) does not stop us writing the contents.
    if (::fchmod(fd.get(), f.mode) != 0) return ErrnoStatus("chmod " + full, errno);
    if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + full, errno);
    if (::close(fd.release()) != 0) return ErrnoStatus("close " + full, errno);
  }
  // Deepest first is not needed: each directory's own entries are what its fsync makes durable.
  for (const std::string& d : dirs) SLUICE_RETURN_IF_ERROR(SyncDir(root + "/" + d));
  return SyncDir(root);
}

std::string ParentOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// mkdtemp over `prefix` + "XXXXXX".
Result<std::string> MakeTempDir(const std::string& prefix) {
  std::string tmpl = prefix + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("mkdtemp " + tmpl, errno);
  return tmpl;
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);  // best effort: the restore's outcome does not depend on it
}

// Puts `fresh` where `target` (an existing directory) is, and returns where the old contents
// went. Atomic with RENAME_EXCHANGE; filesystems without it get two renames, undone on failure.
Result<std::string> SwapIn(const std::string& fresh, const std::string& target) {
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    return fresh;  // now holds the old contents
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    return ErrnoStatus("exchanging " + fresh + " and " + target, errno);
  }
  // rename(2) may replace an empty directory, so a unique empty one reserves the aside name.
  SLUICE_ASSIGN_OR_RETURN(std::string aside, MakeTempDir(target + ".old-"));
  if (::rename(target.c_str(), aside.c_str()) != 0) {
    Status s = ErrnoStatus("moving " + target + " aside", errno);
    ::rmdir(aside.c_str());
    return s;
  }
  if (::rename(fresh.c_str(), target.c_str()) != 0) {
    Status s = ErrnoStatus("moving " + fresh + " to " + target, errno);
    if (::rename(aside.c_str(), target.c_str()) != 0) {
      return Status::Internal(
          s.message() + "; and moving the previous contents back from " + aside +
          " failed too: " + std::error_code(errno, std::generic_category()).message());
    }
    return s;
  }
  return aside;
}

Status Restore(const std::string& manifest_digest, const std::string& dir_in, BlobTransport& t) {
  if (!IsValidDigest(manifest_digest)) {
    return Status::InvalidArgument("invalid checkpoint digest \"" + manifest_digest.substr(0, 80) +
                                   "\" (expected 64 lowercase hex characters)");
  }
  std::string target = dir_in;
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  const std::string last = target.substr(target.rfind('/') + 1);  // npos + 1 == 0
  if (target == "/" || last.empty() || last == "." || last == "..") {
    return Status::InvalidArgument("cannot restore a checkpoint over \"" + dir_in + "\"");
  }

  // Fetch and check the manifest before touching the filesystem at all.
  auto got = t.Get(manifest_digest);
  if (!got.ok()) return Prefixed("fetching checkpoint manifest " + manifest_digest, got.status());
  std::string manifest = std::move(*got);
  if (manifest.size() > kMaxManifestBytes) {
    return Status::ResourceExhausted("checkpoint manifest is " + std::to_string(manifest.size()) +
                                     " bytes, over the limit of " +
                                     std::to_string(kMaxManifestBytes));
  }
  std::string actual = Sha256Hex(manifest);
  if (actual != manifest_digest) {
    return Status::InvalidArgument("checkpoint manifest " + manifest_digest +
                                   " is corrupt: its bytes hash to " + actual);
  }
  auto files = ParseManifest(manifest);
  if (!files.ok()) return Prefixed("checkpoint manifest " + manifest_digest, files.status());

  // Resolve the target: replace what a symlink points to, not the link.
  bool exists = false;
  struct stat st;
  if (::lstat(target.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      char* real = ::realpath(target.c_str(), nullptr);
      if (real == nullptr) return ErrnoStatus("resolving " + target, errno);
      target = real;
      ::free(real);
      if (::lstat(target.c_str(), &st) != 0) return ErrnoStatus("stat " + target, errno);
    }
    if (!S_ISDIR(st.st_mode)) {
      return Status::FailedPrecondition("cannot restore a checkpoint into " + target +
                                        ": it exists and is not a directory");
    }
    exists = true;
  } else if (errno != ENOENT) {
    return ErrnoStatus("stat " + target, errno);
  }
  const std::string parent = ParentOf(target);
  if (!exists) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) return ErrnoStatus("creating " + parent, ec.value());
  }

  // Build the new tree next to the target (same filesystem, so the swap is a rename).
  SLUICE_ASSIGN_OR_RETURN(std::string fresh, MakeTempDir(target + ".restore-"));
  Status s = WriteTree(*files, fresh, t);
  if (s.ok()) {
    // mkdtemp made it 0700; keep the mode the directory had, else the usual 0755.
    mode_t mode = exists ? (st.st_mode & 07777) : 0755;
    if (::chmod(fresh.c_str(), mode) != 0) s = ErrnoStatus("chmod " + fresh, errno);
  }
  if (!s.ok()) {
    RemoveTree(fresh);
    return s;
  }
  if (exists) {
    auto old = SwapIn(fresh, target);
    if (!old.ok()) {
      RemoveTree(fresh);
      return old.status();
    }
    RemoveTree(*old);
  } else if (::rename(fresh.c_str(), target.c_str()) != 0) {
    Status err = ErrnoStatus("moving " + fresh + " to " + target, errno);
    RemoveTree(fresh);
    return err;
  }
  // Best effort: the swap has happened, and reporting failure now would claim `dir` was left
  // as it was. Without this fsync a power cut may still bring back the previous contents, which
  // are complete too.
  (void)SyncDir(parent);
  return Status::Ok();
}

}  // namespace

// ---- HttpBlobTransport ------------------------------------------------------------------------

namespace {

// A Status for an unexpected HTTP answer. Never OK: a surprising 2xx/3xx becomes Internal.
Status HttpError(const std::string& what, const HttpResponse& r) {
  StatusCode code = StatusCodeForHttp(r.status);
  if (code == StatusCode::kOk || r.status < 400) code = StatusCode::kInternal;
  return Status(code,
                what + ": HTTP " + std::to_string(r.status) + ": " + ErrorMessageFromBody(r.body));
}

Status CheckDigestArg(const std::string& digest) {
  // The digest goes into the URL path; refuse anything that is not one.
  if (IsValidDigest(digest)) return Status::Ok();
  return Status::InvalidArgument("invalid blob digest \"" + digest.substr(0, 80) +
                                 "\" (expected 64 lowercase hex characters)");
}

}  // namespace

HttpBlobTransport::HttpBlobTransport(Url server, std::string bearer_token,
                                     std::chrono::milliseconds timeout)
    : http_(std::make_unique<HttpClient>(std::move(server), std::move(bearer_token), timeout)) {}

HttpBlobTransport::~HttpBlobTransport() = default;

Result<std::unique_ptr<HttpBlobTransport>> HttpBlobTransport::Create(
    std::string_view server_url, std::string bearer_token, std::chrono::milliseconds timeout) {
  SLUICE_ASSIGN_OR_RETURN(Url url, ParseUrl(server_url));
  return std::make_unique<HttpBlobTransport>(std::move(url), std::move(bearer_token), timeout);
}

Result<std::vector<std::string>> HttpBlobTransport::Missing(
    const std::vector<std::string>& digests) {
  if (digests.empty()) return std::vector<std::string>{};
  const std::string what = "POST /v1/blobs/missing";
  SLUICE_ASSIGN_OR_RETURN(HttpResponse r, http_->Request("POST", "/v1/blobs/missing",
                                                         DumpJson(Json{{"digests", digests}})));
  // A server that predates the endpoint: assume it has nothing, which costs bandwidth only.
  if (r.status == 404 || r.status == 405 || r.status == 501) return digests;
  if (r.status != 200) return HttpError(what, r);
  auto body = ParseJson(r.body);
  if (!body.ok()) return Status::Internal(what + ": malformed answer: " + body.status().message());
  auto it = body->is_object() ? body->find("missing") : body->end();
  if (!body->is_object() || it == body->end() || !it->is_array()) {
    return Status::Internal(what + ": answer has no \"missing\" array");
  }
  std::vector<std::string> missing;
  for (const Json& d : *it) {
    if (!d.is_string()) return Status::Internal(what + ": \"missing\" holds a non-string");
    missing.push_back(d.get<std::string>());
  }
  return missing;
}

Status HttpBlobTransport::Put(const std::string& digest, std::string bytes) {
  SLUICE_RETURN_IF_ERROR(CheckDigestArg(digest));
  const std::string path = "/v1/blobs/" + digest;
  SLUICE_ASSIGN_OR_RETURN(
      HttpResponse r, http_->Request("PUT", path, std::move(bytes), "application/octet-stream"));
  if (r.status == 201 || r.status == 200) return Status::Ok();
  return HttpError("PUT " + path, r);
}

Result<std::string> HttpBlobTransport::Get(const std::string& digest) {
  SLUICE_RETURN_IF_ERROR(CheckDigestArg(digest));
  const std::string path = "/v1/blobs/" + digest;
  SLUICE_ASSIGN_OR_RETURN(HttpResponse r, http_->Request("GET", path));
  if (r.status != 200) return HttpError("GET " + path, r);
  return std::move(r.body);
}

// ---- Entry points -----------------------------------------------------------------------------

Result<UploadResult> UploadCheckpoint(const std::string& dir, BlobTransport& t) {
  Fd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (root.get() < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("checkpoint directory " + dir + " does not exist");
    if (err == ENOTDIR) return Status::InvalidArgument(dir + " is not a directory");
    return ErrnoStatus("open " + dir, err);
  }
  Uploader up(t);
  Status s = up.Walk(std::move(root), "", 0);
  if (!s.ok()) return Prefixed("checkpoint upload from " + dir, s);
  auto r = up.Finish();
  if (!r.ok()) return Prefixed("checkpoint upload from " + dir, r.status());
  return r;
}

Status RestoreCheckpoint(const std::string& manifest_digest, const std::string& dir,
                         BlobTransport& t) {
  Status s = Restore(manifest_digest, dir, t);
  if (!s.ok()) return Prefixed("restoring checkpoint into " + dir, s);
  return s;
}

}  // namespace sluice::checkpoint
