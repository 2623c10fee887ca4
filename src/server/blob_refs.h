// BlobRefs: which blobs the server's jobs still use, counted as jobs change (issue 12 item 3,
// "nothing slow under the lock"; docs/design-notes.md "Checkpoints are manifests in the blob
// store"). A blob is used while a job (unfinished or finished) names it as its workdir, while a
// job keeps a checkpoint whose manifest it is, or while such a manifest lists it as a chunk.
// Chunks are content-addressed, so two manifests (or a manifest and a workdir) may share one:
// each is counted once per manifest that lists it.
//
// Before, every dropped checkpoint rebuilt that set under the core's lock: it read every kept
// checkpoint's manifest from disk and walked every job ever taken. Here a manifest is read when
// it is first kept and when its last reference goes, and nothing else is walked.
//
// Pure bookkeeping: the manifests are read through the function given (the core reads its blob
// store). A manifest that cannot be read when first kept has its chunks counted when it can be
// (the next Refresh); one that cannot be read when its last reference goes keeps its
// chunks counted for good. Either way a chunk is never reported unused while a kept manifest
// might list it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace sluice::server {

class BlobRefs {
 public:
  // The chunk digests a manifest lists, or an error when it cannot be read.
  using ReadChunks = std::function<Result<std::vector<std::string>>(const std::string& manifest)>;

  explicit BlobRefs(ReadChunks read) : read_(std::move(read)) {}

  // The job's workdir is now `digest` ("" for none). Idempotent.
  void SetWorkdir(const std::string& job_id, const std::string& digest);
  // The job now keeps exactly these checkpoint manifests (empty: none). Idempotent.
  void SetCheckpoints(const std::string& job_id, const std::vector<std::string>& manifests);
  // Counts the chunks of kept manifests that could not be read before, where they now can be.
  // Call it before asking what is unused (a collection), so a late manifest protects its chunks.
  void Refresh();
  // Whether a job uses the blob: a workdir, a kept manifest, or a chunk one of them lists.
  bool Referenced(const std::string& digest) const;
  // Whether `manifest` is kept and its chunks are counted (so All() holds them).
  bool ChunksCounted(const std::string& manifest) const;
  // Every blob a job uses.
  std::set<std::string> All() const;
  // For the core's state dump: the counts, so a restart's rebuild can be compared with them.
  Json ToJson() const;

 private:
  void AddManifest(const std::string& manifest);
  void ReleaseManifest(const std::string& manifest);
  void CountChunks(const std::vector<std::string>& chunks, int delta);

  ReadChunks read_;
  std::map<std::string, std::string> workdir_of_;                // job id -> workdir digest
  std::map<std::string, std::vector<std::string>> kept_by_job_;  // job id -> kept manifests
  std::map<std::string, int64_t> workdirs_;                      // digest -> jobs naming it
  struct Manifest {
    int64_t refs = 0;             // kept checkpoints that name it, over all jobs
    bool chunks_counted = false;  // its chunks are in chunks_
  };
  std::map<std::string, Manifest> manifests_;
  std::map<std::string, int64_t> chunks_;  // digest -> kept manifests (counted) listing it
  std::set<std::string> uncounted_;        // kept manifests whose chunks could not be read yet
};

}  // namespace sluice::server
