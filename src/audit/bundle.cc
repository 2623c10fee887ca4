#include "audit/bundle.h"

#include <algorithm>
#include <cstdio>

#include "audit/cms.h"
#include "common/crypto.h"

namespace sluice {
namespace {

bool IsReserved(std::string_view name) {
  return name == kBundleManifestName || name == kBundleSignatureName;
}

// Hostile names go into reports that get printed; keep them to printable ASCII.
std::string Printable(std::string_view name) {
  std::string out;
  for (unsigned char c : name) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

struct ManifestLine {
  std::string name;
  std::string sha256;
};

// Parses exactly what WriteBundle writes: "<64 lowercase hex>  <name>\n" per file, names valid
// and strictly ascending (which also rules out duplicates), at least one line.
Result<std::vector<ManifestLine>> ParseManifest(std::string_view text) {
  std::vector<ManifestLine> lines;
  size_t line_no = 0;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(kBundleManifestName) + " line " +
                                   std::to_string(line_no) + ": " + why);
  };
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return bad("does not end with a newline");
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (line.size() < 67 || line.substr(64, 2) != "  ") {
      return bad("not in the form '<sha256>  <name>'");
    }
    std::string_view hash = line.substr(0, 64);
    if (!std::all_of(hash.begin(), hash.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) {
      return bad("hash is not 64 lowercase hex digits");
    }
    std::string_view name = line.substr(66);
    Status valid = ValidateBundleFileName(name);
    if (!valid.ok()) return bad(valid.message());
    if (!lines.empty() && !(lines.back().name < name)) {
      return bad("names are not sorted and unique");
    }
    lines.push_back({std::string(name), std::string(hash)});
  }
  if (lines.empty()) return Status::InvalidArgument(std::string(kBundleManifestName) + " is empty");
  return lines;
}

}  // namespace

Status ValidateBundleFileName(std::string_view name) {
  const std::string shown = "bundle file name '" + Printable(name) + "'";
  if (name.empty() || name.size() > 255) {
    return Status::InvalidArgument(shown + " must be 1 to 255 bytes long");
  }
  if (name.front() == '.') return Status::InvalidArgument(shown + " must not start with '.'");
  for (char c : name) {
    if (c <= 0x20 || c >= 0x7f || c == '/' || c == '\\') {
      return Status::InvalidArgument(shown +
                                     " may only hold printable ASCII without space, '/' or '\\'");
    }
  }
  if (IsReserved(name)) return Status::InvalidArgument(shown + " is reserved for the bundle");
  return Status::Ok();
}

std::string_view BundleFileStatusName(BundleFileStatus status) {
  switch (status) {
    case BundleFileStatus::kOk:
      return "ok";
    case BundleFileStatus::kModified:
      return "MODIFIED";
    case BundleFileStatus::kMissing:
      return "MISSING";
    case BundleFileStatus::kUnlisted:
      return "UNLISTED";
    case BundleFileStatus::kDuplicate:
      return "DUPLICATE";
  }
  return "?";
}

Result<std::string> WriteBundle(const std::vector<std::pair<std::string, std::string>>& files,
                                const SigningIdentity& identity) {
  // An empty manifest would make `sha256sum -c` fail, so a bundle always has a file.
  if (files.empty()) return Status::InvalidArgument("a bundle needs at least one file");
  std::vector<const std::pair<std::string, std::string>*> sorted;
  for (const auto& f : files) {
    SLUICE_RETURN_IF_ERROR(ValidateBundleFileName(f.first));
    sorted.push_back(&f);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::string manifest;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0 && sorted[i - 1]->first == sorted[i]->first) {
      return Status::InvalidArgument("bundle file name '" + sorted[i]->first +
                                     "' appears more than once");
    }
    manifest += Sha256Hex(sorted[i]->second) + "  " + sorted[i]->first + "\n";
  }
  SLUICE_ASSIGN_OR_RETURN(std::string signature, SignDetached(identity, manifest));

  ZipEntries entries;
  entries.reserve(sorted.size() + 2);
  for (const auto* f : sorted) entries.push_back(*f);
  entries.emplace_back(kBundleManifestName, std::move(manifest));
  entries.emplace_back(kBundleSignatureName, std::move(signature));
  return WriteZip(entries);
}

Result<BundleReport> VerifyBundle(std::string_view zip_bytes, std::string_view cert_pem,
                                  const ZipLimits& limits) {
  SLUICE_ASSIGN_OR_RETURN(ZipEntries entries, ReadZip(zip_bytes, limits));
  BundleReport report;
  auto fail = [&](std::string why) {
    if (report.failure.empty()) report.failure = std::move(why);
  };

  // name -> (content of the first copy, number of copies)
  std::map<std::string, std::pair<std::string_view, int>> in_zip;
  for (const auto& [name, content] : entries) {
    auto [it, fresh] = in_zip.try_emplace(name, content, 0);
    if (++it->second.second == 2) fail("entry " + Printable(name) + " appears more than once");
  }
  auto find = [&](std::string_view name) -> const std::string_view* {
    auto it = in_zip.find(std::string(name));
    return it == in_zip.end() ? nullptr : &it->second.first;
  };
  const std::string_view* manifest = find(kBundleManifestName);
  const std::string_view* signature = find(kBundleSignatureName);

  if (manifest == nullptr) {
    fail("bundle has no " + std::string(kBundleManifestName));
  } else if (signature == nullptr) {
    fail("bundle has no " + std::string(kBundleSignatureName));
  } else {
    Status sig = VerifyDetached(cert_pem, *manifest, *signature);
    report.signature_ok = sig.ok();
    if (!sig.ok()) fail(std::string(kBundleSignatureName) + ": " + sig.message());
  }

  std::map<std::string, std::string> listed;  // name -> sha256 hex
  if (manifest != nullptr) {
    Result<std::vector<ManifestLine>> lines = ParseManifest(*manifest);
    if (lines.ok()) {
      for (auto& l : *lines) listed.emplace(std::move(l.name), std::move(l.sha256));
    } else {
      fail(lines.status().message());
    }
  }

  std::map<std::string, BundleFileStatus> status;
  for (const auto& [name, hash] : listed) {
    const std::string_view* content = find(name);
    if (content == nullptr) {
      status[name] = BundleFileStatus::kMissing;
    } else {
      // Not secret: a plain comparison is fine.
      status[name] =
          Sha256Hex(*content) == hash ? BundleFileStatus::kOk : BundleFileStatus::kModified;
    }
  }
  for (const auto& [name, copies] : in_zip) {
    if (IsReserved(name)) continue;
    if (copies.second > 1) {
      status[name] = BundleFileStatus::kDuplicate;
    } else if (!listed.count(name)) {
      status[name] = BundleFileStatus::kUnlisted;
    }
  }
  for (const auto& [name, s] : status) {
    report.files.push_back({Printable(name), s});
    if (s != BundleFileStatus::kOk) {
      fail("file " + Printable(name) + ": " + std::string(BundleFileStatusName(s)));
    }
  }
  report.ok = report.signature_ok && report.failure.empty();
  return report;
}

Result<std::map<std::string, std::string>> ReadBundleFiles(std::string_view zip_bytes,
                                                           const ZipLimits& limits) {
  SLUICE_ASSIGN_OR_RETURN(ZipEntries entries, ReadZip(zip_bytes, limits));
  std::map<std::string, std::string> files;
  for (auto& [name, content] : entries) {
    if (!IsReserved(name)) SLUICE_RETURN_IF_ERROR(ValidateBundleFileName(name));
    if (!files.emplace(name, std::move(content)).second) {
      return Status::InvalidArgument("bundle entry " + name + " appears more than once");
    }
  }
  return files;
}

}  // namespace sluice
