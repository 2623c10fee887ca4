// libarchive, loaded on first use. Every `sluice` command is a fresh process, and linking
// libarchive pulled twelve shared objects (ICU, libxml2, nettle, the compressors) into each
// one's start-up: ~4 ms and ~115 page faults on our VMs, for every command, though only
// workdir archives and audit bundles use it (docs/design-notes.md, "Process start-up").
// The members carry libarchive's own names and types, so call sites read as libarchive calls.
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include "common/status.h"

namespace sluice {

// clang-format off
#define SLUICE_LIBARCHIVE_FUNCTIONS(X) \
  X(archive_entry_filetype) \
  X(archive_entry_free) \
  X(archive_entry_hardlink) \
  X(archive_entry_is_encrypted) \
  X(archive_entry_new) \
  X(archive_entry_pathname) \
  X(archive_entry_perm) \
  X(archive_entry_set_filetype) \
  X(archive_entry_set_hardlink) \
  X(archive_entry_set_mtime) \
  X(archive_entry_set_pathname) \
  X(archive_entry_set_perm) \
  X(archive_entry_set_size) \
  X(archive_entry_set_symlink) \
  X(archive_entry_size) \
  X(archive_entry_size_is_set) \
  X(archive_errno) \
  X(archive_error_string) \
  X(archive_read_data) \
  X(archive_read_data_block) \
  X(archive_read_free) \
  X(archive_read_new) \
  X(archive_read_next_header) \
  X(archive_read_open_memory) \
  X(archive_read_support_filter_gzip) \
  X(archive_read_support_format_tar) \
  X(archive_read_support_format_zip_seekable) \
  X(archive_set_error) \
  X(archive_write_add_filter_gzip) \
  X(archive_write_close) \
  X(archive_write_data) \
  X(archive_write_data_block) \
  X(archive_write_disk_new) \
  X(archive_write_disk_set_options) \
  X(archive_write_finish_entry) \
  X(archive_write_free) \
  X(archive_write_header) \
  X(archive_write_new) \
  X(archive_write_open) \
  X(archive_write_set_bytes_in_last_block) \
  X(archive_write_set_bytes_per_block) \
  X(archive_write_set_filter_option) \
  X(archive_write_set_format_option) \
  X(archive_write_set_format_pax_restricted) \
  X(archive_write_set_format_zip)
// clang-format on

struct LibArchive {
#define SLUICE_LIBARCHIVE_MEMBER(name) decltype(&::name) name = nullptr;
  SLUICE_LIBARCHIVE_FUNCTIONS(SLUICE_LIBARCHIVE_MEMBER)
#undef SLUICE_LIBARCHIVE_MEMBER
};

// Loads libarchive.so.13 once (thread-safe) and returns its functions. FailedPrecondition
// naming the Debian package when it is not installed or lacks a function; the answer is kept.
Result<const LibArchive*> LoadLibArchive();

// The table LoadLibArchive returned; only for code that already called it successfully
// (deleters and helpers below an entry point that checked). Aborts otherwise.
const LibArchive& LoadedLibArchive();

}  // namespace sluice
