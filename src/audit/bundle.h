// Signed audit bundles: a zip of evidence files plus `manifest.sha256` (one `sha256sum` line per
// file) and `signature.p7s` (a detached CMS signature of the manifest by the server's audit
// key). Both halves use standard formats on purpose: a user can check a bundle by hand with
// `openssl cms -verify` and `sha256sum -c`, trusting nothing of ours but the pinned certificate.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "audit/bundle_zip.h"
#include "audit/signing_key.h"
#include "common/status.h"

namespace sluice {

inline constexpr std::string_view kBundleManifestName = "manifest.sha256";
inline constexpr std::string_view kBundleSignatureName = "signature.p7s";

// OK for a name a bundle may carry: 1 to 255 bytes of printable ASCII without space, '/' or
// '\' (sha256sum escapes lines with a backslash, and spaces invite shell mistakes when checking
// by hand), not starting with '.' (no "..", no hidden files), and not one of the two reserved
// names above. Errors: InvalidArgument naming the file.
Status ValidateBundleFileName(std::string_view name);

// The zip bytes of a bundle of `files` (name, content). Entries are sorted by name and followed
// by the manifest and the signature, so the same files give the same bytes except for the
// signature, which is randomised. Errors: InvalidArgument (no files, a bad or duplicate name,
// unusable identity), Internal.
Result<std::string> WriteBundle(const std::vector<std::pair<std::string, std::string>>& files,
                                const SigningIdentity& identity);

enum class BundleFileStatus {
  kOk,         // listed in the manifest, present once, hash matches
  kModified,   // listed and present, hash differs
  kMissing,    // listed, not in the zip
  kUnlisted,   // in the zip, not in the manifest
  kDuplicate,  // in the zip more than once
};
// "ok", "MODIFIED", "MISSING", "UNLISTED", "DUPLICATE": what a CLI prints next to a name.
std::string_view BundleFileStatusName(BundleFileStatus status);

struct BundleFileReport {
  // Unlisted names come from the zip and may be hostile: bytes outside printable ASCII are
  // shown as \xNN, so printing them cannot drive a terminal.
  std::string name;
  BundleFileStatus status = BundleFileStatus::kOk;
};

struct BundleReport {
  // True only if the signature verifies, the manifest is well-formed and every file is kOk.
  bool ok = false;
  // Whether signature.p7s verifies over manifest.sha256 against the pinned certificate.
  bool signature_ok = false;
  // Every content file (manifest and signature excluded), sorted by name. Statuses compare the
  // zip with the manifest as written, which only means something when signature_ok.
  std::vector<BundleFileReport> files;
  // The first problem found, in the order: zip structure, signature, manifest syntax, files.
  // Empty when ok.
  std::string failure;
};

// Checks a bundle against the pinned certificate `cert_pem`. The zip is untrusted input.
// A non-OK Result means the zip could not be read at all: InvalidArgument (not a zip, corrupt,
// entries that are not plain files), ResourceExhausted (beyond `limits`). Anything else wrong
// (bad signature, bad or missing manifest, changed, missing, extra or duplicate files) comes
// back as a report with ok == false, so callers MUST check report.ok, not just the Result.
Result<BundleReport> VerifyBundle(std::string_view zip_bytes, std::string_view cert_pem,
                                  const ZipLimits& limits = {});

// Every file of a bundle by name, manifest and signature included, for extraction. Verifies
// nothing (run VerifyBundle first), but every name passes ValidateBundleFileName (or is one of
// the two reserved names), so each can be used as a file name in a directory as it is.
// Errors: those of ReadZip, and InvalidArgument (bad or duplicate names).
Result<std::map<std::string, std::string>> ReadBundleFiles(std::string_view zip_bytes,
                                                           const ZipLimits& limits = {});

}  // namespace sluice
