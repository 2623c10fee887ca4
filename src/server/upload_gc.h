// Garbage collection of unreferenced uploads (issue 10 item 5): a workdir nobody submitted, or
// checkpoint chunks of a manifest that never arrived, are deleted once every upload of that blob
// is older than a grace, so abandoned uploads cannot fill the server's disk or an account's
// quota. Blobs still referenced (server/server_core.h ReferencedBlobs) are never touched.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "server/accounts.h"
#include "server/server_core.h"
#include "store/blob_store.h"

namespace sluice::server {

struct UploadGcStats {
  int64_t blobs_deleted = 0;
  int64_t bytes_freed = 0;
};

// Deletes blobs whose every upload is older than `now_ms - grace_ms` and that nothing
// references, then forgets their upload rows.
Result<UploadGcStats> CollectUnreferencedUploads(Accounts* accounts, ServerCore* core,
                                                 store::BlobStore* blobs, int64_t now_ms,
                                                 int64_t grace_ms);

}  // namespace sluice::server
