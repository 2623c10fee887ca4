#include "server/upload_gc.h"

#include <map>
#include <vector>

namespace sluice::server {

Result<UploadGcStats> CollectUnreferencedUploads(Accounts* accounts, ServerCore* core,
                                                 store::BlobStore* blobs, int64_t now_ms,
                                                 int64_t grace_ms) {
  UploadGcStats stats;
  const int64_t cutoff = now_ms - grace_ms;
  // digest -> its upload rows; a digest with any recent upload is kept whole.
  std::map<std::string, std::vector<store::BlobOwner>> old;
  std::map<std::string, bool> recent;
  for (auto& row : accounts->Uploads()) {
    if (row.created_ms >= cutoff) {
      recent[row.digest] = true;
    } else {
      old[row.digest].push_back(std::move(row));
    }
  }
  if (old.empty()) return stats;
  // Read after the uploads: a blob referenced in between is seen as referenced.
  const std::set<std::string> used = core->ReferencedBlobs();
  std::vector<store::BlobOwner> dropped;
  for (auto& [digest, rows] : old) {
    if (recent.count(digest) || used.count(digest)) continue;
    if (blobs->Has(digest)) {
      SLUICE_RETURN_IF_ERROR(blobs->Delete(digest));
      ++stats.blobs_deleted;
      stats.bytes_freed += rows.front().size;
    }
    for (auto& r : rows) dropped.push_back(std::move(r));
  }
  // The files are gone first: a crash here leaves rows for missing blobs, which the next round
  // drops, never a blob with no row (which no quota would count).
  SLUICE_RETURN_IF_ERROR(accounts->DropUploads(dropped));
  return stats;
}

}  // namespace sluice::server
