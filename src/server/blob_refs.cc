// BlobRefs (blob_refs.h): the blobs jobs use, counted as they change.
#include "server/blob_refs.h"

namespace sluice::server {

void BlobRefs::SetWorkdir(const std::string& job_id, const std::string& digest) {
  auto it = workdir_of_.find(job_id);
  const std::string old = it != workdir_of_.end() ? it->second : "";
  if (old == digest) return;
  if (!digest.empty()) {
    ++workdirs_[digest];
    workdir_of_[job_id] = digest;
  } else {
    workdir_of_.erase(job_id);
  }
  if (!old.empty()) {
    auto w = workdirs_.find(old);
    if (w != workdirs_.end() && --w->second <= 0) workdirs_.erase(w);
  }
}

void BlobRefs::SetCheckpoints(const std::string& job_id,
                              const std::vector<std::string>& manifests) {
  auto it = kept_by_job_.find(job_id);
  std::vector<std::string> old = it != kept_by_job_.end() ? it->second : std::vector<std::string>{};
  if (old == manifests) return;
  // The new ones first: a manifest in both lists never drops to no reference on the way.
  for (const auto& m : manifests) AddManifest(m);
  for (const auto& m : old) ReleaseManifest(m);
  if (manifests.empty()) {
    kept_by_job_.erase(job_id);
  } else {
    kept_by_job_[job_id] = manifests;
  }
}

void BlobRefs::AddManifest(const std::string& manifest) {
  Manifest& m = manifests_[manifest];
  if (m.refs++ > 0) return;
  auto chunks = read_(manifest);
  if (!chunks.ok()) {
    uncounted_.insert(manifest);
    return;
  }
  CountChunks(*chunks, +1);
  m.chunks_counted = true;
}

void BlobRefs::ReleaseManifest(const std::string& manifest) {
  auto it = manifests_.find(manifest);
  if (it == manifests_.end() || --it->second.refs > 0) return;
  if (it->second.chunks_counted) {
    auto chunks = read_(manifest);
    // Unreadable now: its chunks stay counted (kept for good) rather than be miscounted.
    if (chunks.ok()) CountChunks(*chunks, -1);
  }
  uncounted_.erase(manifest);
  manifests_.erase(it);
}

void BlobRefs::CountChunks(const std::vector<std::string>& chunks, int delta) {
  // A manifest that lists a chunk twice (two identical files) counts it once.
  std::set<std::string> distinct(chunks.begin(), chunks.end());
  for (const auto& c : distinct) {
    int64_t& n = chunks_[c];
    n += delta;
    if (n <= 0) chunks_.erase(c);
  }
}

void BlobRefs::Refresh() {
  for (auto it = uncounted_.begin(); it != uncounted_.end();) {
    auto chunks = read_(*it);
    if (!chunks.ok()) {
      ++it;
      continue;
    }
    CountChunks(*chunks, +1);
    manifests_[*it].chunks_counted = true;
    it = uncounted_.erase(it);
  }
}

bool BlobRefs::Referenced(const std::string& digest) const {
  return workdirs_.count(digest) != 0 || manifests_.count(digest) != 0 ||
         chunks_.count(digest) != 0;
}

bool BlobRefs::ChunksCounted(const std::string& manifest) const {
  auto it = manifests_.find(manifest);
  return it != manifests_.end() && it->second.chunks_counted;
}

std::set<std::string> BlobRefs::All() const {
  std::set<std::string> out;
  for (const auto& [d, n] : workdirs_) out.insert(d);
  for (const auto& [d, m] : manifests_) out.insert(d);
  for (const auto& [d, n] : chunks_) out.insert(d);
  return out;
}

Json BlobRefs::ToJson() const {
  Json manifests = Json::object();
  for (const auto& [d, m] : manifests_) {
    manifests[d] = Json{{"refs", m.refs}, {"chunks_counted", m.chunks_counted}};
  }
  return Json{{"workdirs", workdirs_}, {"manifests", std::move(manifests)}, {"chunks", chunks_}};
}

}  // namespace sluice::server
