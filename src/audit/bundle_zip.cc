#include "audit/bundle_zip.h"

#include <errno.h>

#include <memory>

#include "common/libarchive.h"

namespace sluice {
namespace {

// Entry points below call LoadLibArchive() first; everything else uses this.
const LibArchive& La() { return LoadedLibArchive(); }

struct ArchiveWriteDeleter {
  void operator()(archive* a) const { La().archive_write_free(a); }
};
struct ArchiveReadDeleter {
  void operator()(archive* a) const { La().archive_read_free(a); }
};
struct EntryDeleter {
  void operator()(archive_entry* e) const { La().archive_entry_free(e); }
};

std::string ArchiveError(archive* a) {
  const char* msg = La().archive_error_string(a);
  return msg ? msg : "unknown libarchive error";
}

la_ssize_t AppendToString(archive*, void* client, const void* buf, size_t len) {
  static_cast<std::string*>(client)->append(static_cast<const char*>(buf), len);
  return static_cast<la_ssize_t>(len);
}

}  // namespace

Result<std::string> WriteZip(const ZipEntries& entries) {
  if (auto loaded = LoadLibArchive(); !loaded.ok()) return loaded.status();
  std::unique_ptr<archive, ArchiveWriteDeleter> a(La().archive_write_new());
  if (!a) return Status::Internal("archive_write_new failed");
  std::string out;
  if (La().archive_write_set_format_zip(a.get()) != ARCHIVE_OK ||
      La().archive_write_set_format_option(a.get(), "zip", "compression", "deflate") !=
          ARCHIVE_OK ||
      // Unblocked: the default 10 KiB blocking would pad the end of the zip with zeros, after
      // the end-of-central-directory record where zip readers look for it.
      La().archive_write_set_bytes_per_block(a.get(), 0) != ARCHIVE_OK ||
      La().archive_write_open(a.get(), &out, nullptr, AppendToString, nullptr) != ARCHIVE_OK) {
    return Status::Internal("setting up zip writer: " + ArchiveError(a.get()));
  }
  for (const auto& [name, content] : entries) {
    if (name.empty()) return Status::InvalidArgument("zip entry with an empty name");
    std::unique_ptr<archive_entry, EntryDeleter> e(La().archive_entry_new());
    La().archive_entry_set_pathname(e.get(), name.c_str());
    La().archive_entry_set_filetype(e.get(), AE_IFREG);
    La().archive_entry_set_perm(e.get(), 0644);
    La().archive_entry_set_size(e.get(), static_cast<la_int64_t>(content.size()));
    // Time 0 is before 1980, which the DOS timestamp clamps to 1980-01-01 whatever the local
    // time zone, so the bytes do not depend on where or when the bundle was written.
    La().archive_entry_set_mtime(e.get(), 0, 0);
    if (La().archive_write_header(a.get(), e.get()) != ARCHIVE_OK ||
        (!content.empty() && La().archive_write_data(a.get(), content.data(), content.size()) !=
                                 static_cast<la_ssize_t>(content.size())) ||
        La().archive_write_finish_entry(a.get()) != ARCHIVE_OK) {
      return Status::Internal("writing zip entry " + name + ": " + ArchiveError(a.get()));
    }
  }
  if (La().archive_write_close(a.get()) != ARCHIVE_OK) {
    return Status::Internal("finishing zip: " + ArchiveError(a.get()));
  }
  return out;
}

Result<ZipEntries> ReadZip(std::string_view zip, const ZipLimits& limits) {
  if (auto loaded = LoadLibArchive(); !loaded.ok()) return loaded.status();
  if (zip.empty()) return Status::InvalidArgument("not a zip file: empty input");
  std::unique_ptr<archive, ArchiveReadDeleter> a(La().archive_read_new());
  if (!a) return Status::Internal("archive_read_new failed");
  // Zip only, no filters: anything else is not a bundle, and some filters run external programs.
  // Seekable only: it reads the central directory, as unzip and every desktop tool do. The
  // streaming reader would also accept a zip cut before its central directory, or read local
  // headers that the central directory contradicts, and so see other files than other tools.
  La().archive_read_support_format_zip_seekable(a.get());
  if (La().archive_read_open_memory(a.get(), zip.data(), zip.size()) != ARCHIVE_OK) {
    return Status::InvalidArgument("not a zip file: " + ArchiveError(a.get()));
  }
  ZipEntries out;
  uint64_t total = 0;
  auto too_big = [&] {
    return Status::ResourceExhausted("zip holds more than " +
                                     std::to_string(limits.max_total_bytes) + " bytes of data");
  };
  while (true) {
    archive_entry* e = nullptr;
    int r = La().archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return Status::InvalidArgument("corrupt zip: " + ArchiveError(a.get()));
    if (out.size() >= limits.max_entries) {
      return Status::ResourceExhausted("zip has more than " + std::to_string(limits.max_entries) +
                                       " entries");
    }
    const char* name = La().archive_entry_pathname(e);
    if (name == nullptr || *name == '\0') {
      return Status::InvalidArgument("zip entry without a readable name");
    }
    if (La().archive_entry_filetype(e) != AE_IFREG) {
      return Status::InvalidArgument("zip entry " + std::string(name) + " is not a regular file");
    }
    if (La().archive_entry_is_encrypted(e)) {
      return Status::InvalidArgument("zip entry " + std::string(name) + " is encrypted");
    }
    // The declared size is only a hint (it can lie); the running total below is the real guard.
    if (La().archive_entry_size_is_set(e) && La().archive_entry_size(e) > 0 &&
        static_cast<uint64_t>(La().archive_entry_size(e)) > limits.max_total_bytes - total) {
      return too_big();
    }
    std::string content;
    char buf[64 * 1024];
    while (true) {
      la_ssize_t n = La().archive_read_data(a.get(), buf, sizeof buf);
      if (n == 0) break;
      if (n < 0) {
        return Status::InvalidArgument("corrupt zip data in " + std::string(name) + ": " +
                                       ArchiveError(a.get()));
      }
      total += static_cast<uint64_t>(n);
      if (total > limits.max_total_bytes) return too_big();
      content.append(buf, static_cast<size_t>(n));
    }
    out.emplace_back(name, std::move(content));
  }
  return out;
}

}  // namespace sluice
