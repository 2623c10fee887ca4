#include "common/archive.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <system_error>
#include <vector>

#include "common/libarchive.h"

namespace sluice {
namespace {

// Entry points below call LoadLibArchive() first; everything else uses this.
const LibArchive& La() { return LoadedLibArchive(); }

namespace fs = std::filesystem;

struct ArchiveWriteDeleter {
  void operator()(archive* a) const { La().archive_write_free(a); }
};
struct ArchiveReadDeleter {
  void operator()(archive* a) const { La().archive_read_free(a); }
};
struct EntryDeleter {
  void operator()(archive_entry* e) const { La().archive_entry_free(e); }
};
using WriteArchive = std::unique_ptr<archive, ArchiveWriteDeleter>;
using ReadArchive = std::unique_ptr<archive, ArchiveReadDeleter>;
using Entry = std::unique_ptr<archive_entry, EntryDeleter>;

std::string ArchiveError(archive* a) {
  const char* msg = La().archive_error_string(a);
  return msg ? msg : "unknown libarchive error";
}

Status ErrnoStatus(const std::string& what, int err) {
  std::string msg = what + ": " + std::error_code(err, std::generic_category()).message();
  if (err == ENOENT) return Status::NotFound(msg);
  if (err == EACCES || err == EPERM) return Status::PermissionDenied(msg);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(msg);
  return Status::Internal(msg);
}

// Output sink for packing: refuses to grow past the limit, so a huge directory fails early
// instead of first being compressed in full.
struct PackSink {
  std::string out;
  size_t max_bytes;
  bool exceeded = false;
};

la_ssize_t SinkWrite(archive* a, void* client, const void* buf, size_t len) {
  auto* sink = static_cast<PackSink*>(client);
  if (sink->out.size() + len > sink->max_bytes) {
    sink->exceeded = true;
    La().archive_set_error(a, ENOSPC, "archive exceeds the size limit");
    return -1;
  }
  sink->out.append(static_cast<const char*>(buf), len);
  return static_cast<la_ssize_t>(len);
}

// Collects every path under `root` (relative, generic form), without following symlinks.
Status Walk(const fs::path& root, const fs::path& rel, std::vector<std::string>* out) {
  std::error_code ec;
  fs::directory_iterator it(root / rel, ec);
  if (ec) return ErrnoStatus("reading directory " + (root / rel).string(), ec.value());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    fs::path child = rel / it->path().filename();
    out->push_back(child.generic_string());
    fs::file_status st = it->symlink_status(ec);
    if (ec) return ErrnoStatus("stat " + it->path().string(), ec.value());
    if (fs::is_directory(st)) SLUICE_RETURN_IF_ERROR(Walk(root, child, out));
  }
  if (ec) return ErrnoStatus("reading directory " + (root / rel).string(), ec.value());
  return Status::Ok();
}

Status WriteFileData(archive* a, const std::string& path, int64_t size) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  std::vector<char> buf(64 * 1024);
  int64_t total = 0;
  Status st;
  while (st.ok()) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = ErrnoStatus("read " + path, errno);
      break;
    }
    if (n == 0) break;
    total += n;
    if (total > size) break;  // reported below
    if (La().archive_write_data(a, buf.data(), static_cast<size_t>(n)) < 0) {
      st = Status::Internal("writing archive: " + ArchiveError(a));
    }
  }
  close(fd);
  SLUICE_RETURN_IF_ERROR(st);
  // The header already promised `size` bytes; a file that changed meanwhile would be packed as
  // a mix of old and new, so refuse rather than upload something the user never had.
  if (total != size) return Status::FailedPrecondition(path + " changed while it was packed");
  return Status::Ok();
}

// Rejects names that could land outside the destination. libarchive's own SECURE flags cannot
// see these once we prefix the destination directory, so this check is the one that counts.
Status CheckRelativeName(const char* name, const char* what) {
  if (name == nullptr || *name == '\0')
    return Status::InvalidArgument(std::string(what) + " is empty");
  std::string_view n(name);
  if (n.front() == '/') {
    return Status::InvalidArgument("archive entry has an absolute " + std::string(what) + ": " +
                                   std::string(n));
  }
  size_t start = 0;
  while (start <= n.size()) {
    size_t end = n.find('/', start);
    if (end == std::string_view::npos) end = n.size();
    if (n.substr(start, end - start) == "..") {
      return Status::InvalidArgument("archive entry " + std::string(what) +
                                     " contains '..': " + std::string(n));
    }
    start = end + 1;
  }
  return Status::Ok();
}

Status DiskError(archive* disk, const std::string& path) {
  int err = La().archive_errno(disk);
  std::string msg = "extracting " + path + ": " + ArchiveError(disk);
  if (err == ENOSPC || err == EDQUOT) return Status::ResourceExhausted(msg);
  if (err == EIO || err == EROFS) return Status::Internal(msg);
  // Refusals by the SECURE_* checks (symlink in the path and the like) land here.
  return Status::InvalidArgument(msg);
}

void RemoveContents(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    fs::remove_all(it->path(), ignored);
  }
}

Status Extract(archive* reader, archive* disk, const std::string& dest, size_t max_total_bytes,
               size_t max_entries) {
  size_t entries = 0;
  uint64_t declared = 0, written = 0;
  while (true) {
    archive_entry* entry = nullptr;
    int r = La().archive_read_next_header(reader, &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN)
      return Status::InvalidArgument("corrupt archive: " + ArchiveError(reader));
    if (++entries > max_entries) {
      return Status::ResourceExhausted("archive has more than " + std::to_string(max_entries) +
                                       " entries");
    }
    const char* name = La().archive_entry_pathname(entry);
    SLUICE_RETURN_IF_ERROR(CheckRelativeName(name, "path"));
    std::string rel = name;
    const char* hardlink = La().archive_entry_hardlink(entry);
    if (hardlink != nullptr) {
      SLUICE_RETURN_IF_ERROR(CheckRelativeName(hardlink, "hardlink target"));
      // Hardlink targets name an extracted entry, so they live under dest too.
      La().archive_entry_set_hardlink(entry, (dest + "/" + hardlink).c_str());
    } else {
      mode_t type = La().archive_entry_filetype(entry);
      if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) continue;  // devices, fifos
    }
    if (La().archive_entry_size_is_set(entry) && La().archive_entry_size(entry) > 0) {
      declared += static_cast<uint64_t>(La().archive_entry_size(entry));
      if (declared > max_total_bytes) {
        return Status::ResourceExhausted("archive holds more than " +
                                         std::to_string(max_total_bytes) + " bytes of data");
      }
    }
    // Keep rwx bits only: a setuid file unpacked by a root agent would be a privilege gift.
    La().archive_entry_set_perm(entry, La().archive_entry_perm(entry) & 0777);
    La().archive_entry_set_pathname(entry, (dest + "/" + rel).c_str());

    if (La().archive_write_header(disk, entry) < ARCHIVE_WARN) return DiskError(disk, rel);
    if (La().archive_entry_size(entry) > 0) {
      const void* buf;
      size_t size;
      la_int64_t offset;
      while (true) {
        r = La().archive_read_data_block(reader, &buf, &size, &offset);
        if (r == ARCHIVE_EOF) break;
        if (r < ARCHIVE_WARN) {
          return Status::InvalidArgument("corrupt archive data in " + rel + ": " +
                                         ArchiveError(reader));
        }
        written += size;
        if (written > max_total_bytes) {
          return Status::ResourceExhausted("archive holds more than " +
                                           std::to_string(max_total_bytes) + " bytes of data");
        }
        if (La().archive_write_data_block(disk, buf, size, offset) < ARCHIVE_WARN) {
          return DiskError(disk, rel);
        }
      }
    }
    if (La().archive_write_finish_entry(disk) < ARCHIVE_WARN) return DiskError(disk, rel);
  }
  // Applies the deferred directory permissions (a read-only dir is made so only at the end).
  if (La().archive_write_close(disk) < ARCHIVE_WARN) return DiskError(disk, dest);
  return Status::Ok();
}

}  // namespace

Result<std::string> PackDirectory(const std::string& dir, size_t max_bytes) {
  if (auto loaded = LoadLibArchive(); !loaded.ok()) return loaded.status();
  struct stat root_st;
  if (lstat(dir.c_str(), &root_st) != 0) {
    if (errno == ENOENT) return Status::NotFound("directory " + dir + " does not exist");
    return ErrnoStatus("stat " + dir, errno);
  }
  if (!S_ISDIR(root_st.st_mode)) return Status::InvalidArgument(dir + " is not a directory");

  std::vector<std::string> paths;
  SLUICE_RETURN_IF_ERROR(Walk(dir, fs::path(), &paths));
  // Byte order; a parent always sorts before its children because it is their prefix.
  std::sort(paths.begin(), paths.end());

  WriteArchive a(La().archive_write_new());
  if (!a) return Status::Internal("archive_write_new failed");
  PackSink sink{{}, max_bytes};
  if (La().archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      La().archive_write_add_filter_gzip(a.get()) != ARCHIVE_OK ||
      // The gzip header would otherwise carry the current time and break content addressing.
      La().archive_write_set_filter_option(a.get(), "gzip", "timestamp", nullptr) != ARCHIVE_OK ||
      // No zero padding after the gzip stream: it would only cost upload bytes and hide
      // truncation (a cut inside the padding still yields a complete archive).
      La().archive_write_set_bytes_in_last_block(a.get(), 1) != ARCHIVE_OK ||
      La().archive_write_open(a.get(), &sink, nullptr, SinkWrite, nullptr) != ARCHIVE_OK) {
    return Status::Internal("setting up archive writer: " + ArchiveError(a.get()));
  }
  auto limit_error = [&] {
    return Status::ResourceExhausted("workdir archive exceeds the limit of " +
                                     std::to_string(max_bytes) + " bytes (compressed)");
  };

  for (const std::string& rel : paths) {
    std::string full = dir + "/" + rel;
    struct stat st;
    if (lstat(full.c_str(), &st) != 0) return ErrnoStatus("stat " + full, errno);
    Entry entry(La().archive_entry_new());
    La().archive_entry_set_pathname(entry.get(), rel.c_str());
    La().archive_entry_set_perm(entry.get(), st.st_mode & 0777);
    // mtime, uid, gid and names stay at their zero defaults: determinism over fidelity.
    La().archive_entry_set_mtime(entry.get(), 0, 0);
    if (S_ISREG(st.st_mode)) {
      La().archive_entry_set_filetype(entry.get(), AE_IFREG);
      La().archive_entry_set_size(entry.get(), st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      La().archive_entry_set_filetype(entry.get(), AE_IFDIR);
    } else if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      fs::path target = fs::read_symlink(full, ec);
      if (ec) return ErrnoStatus("readlink " + full, ec.value());
      La().archive_entry_set_filetype(entry.get(), AE_IFLNK);
      La().archive_entry_set_symlink(entry.get(), target.c_str());
    } else {
      continue;  // sockets, fifos, devices mean nothing on another machine
    }
    if (La().archive_write_header(a.get(), entry.get()) < ARCHIVE_WARN) {
      if (sink.exceeded) return limit_error();
      return Status::Internal("writing archive header for " + rel + ": " + ArchiveError(a.get()));
    }
    if (S_ISREG(st.st_mode)) {
      Status data = WriteFileData(a.get(), full, st.st_size);
      if (sink.exceeded) return limit_error();
      SLUICE_RETURN_IF_ERROR(data);
    }
  }
  if (La().archive_write_close(a.get()) != ARCHIVE_OK) {
    if (sink.exceeded) return limit_error();
    return Status::Internal("finishing archive: " + ArchiveError(a.get()));
  }
  if (sink.exceeded) return limit_error();
  return std::move(sink.out);
}

Status UnpackArchive(std::string_view data, const std::string& dest_dir, size_t max_total_bytes,
                     size_t max_entries) {
  if (auto loaded = LoadLibArchive(); !loaded.ok()) return loaded.status();
  std::error_code ec;
  // Canonical: SECURE_SYMLINKS also inspects the prefix, which must not trip on a symlinked
  // parent such as /var/run.
  fs::path dest = fs::canonical(dest_dir, ec);
  if (ec || !fs::is_directory(dest, ec)) {
    return Status::FailedPrecondition("unpack destination " + dest_dir + " is not a directory");
  }
  if (!fs::is_empty(dest, ec) || ec) {
    return Status::FailedPrecondition("unpack destination " + dest_dir + " is not empty");
  }

  ReadArchive reader(La().archive_read_new());
  WriteArchive disk(La().archive_write_disk_new());
  if (!reader || !disk) return Status::Internal("libarchive allocation failed");
  // Only gzip and tar: read_support_filter_all would happily run external decompressors.
  La().archive_read_support_filter_gzip(reader.get());
  La().archive_read_support_format_tar(reader.get());
  // NOABSOLUTEPATHS is checked by CheckRelativeName: the names we hand libarchive are absolute
  // by construction (dest prefix), since changing the process-wide cwd is not an option.
  La().archive_write_disk_set_options(disk.get(), ARCHIVE_EXTRACT_PERM |
                                                      ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                                      ARCHIVE_EXTRACT_SECURE_SYMLINKS);
  if (La().archive_read_open_memory(reader.get(), data.data(), data.size()) != ARCHIVE_OK) {
    return Status::InvalidArgument("not a readable archive: " + ArchiveError(reader.get()));
  }
  Status st = Extract(reader.get(), disk.get(), dest.string(), max_total_bytes, max_entries);
  if (!st.ok()) {
    disk.reset();  // close first so no deferred fixup recreates anything after the cleanup
    RemoveContents(dest);
  }
  return st;
}

}  // namespace sluice
