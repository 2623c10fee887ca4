#include "server/blob_refs.h"

#include <gtest/gtest.h>

#include <map>

namespace sluice::server {
namespace {

// Manifests by digest; a missing one cannot be read. Counts every read.
struct FakeManifests {
  std::map<std::string, std::vector<std::string>> chunks;
  int reads = 0;
  BlobRefs::ReadChunks Reader() {
    return [this](const std::string& m) -> Result<std::vector<std::string>> {
      ++reads;
      auto it = chunks.find(m);
      if (it == chunks.end()) return Status::NotFound("no blob " + m);
      return it->second;
    };
  }
};

TEST(BlobRefsTest, AWorkdirIsUsedWhileAnyJobNamesIt) {
  FakeManifests f;
  BlobRefs refs(f.Reader());
  refs.SetWorkdir("job-a", "w1");
  refs.SetWorkdir("job-b", "w1");
  refs.SetWorkdir("job-a", "w1");  // idempotent: still two jobs
  EXPECT_TRUE(refs.Referenced("w1"));
  refs.SetWorkdir("job-a", "");
  EXPECT_TRUE(refs.Referenced("w1"));  // job-b still names it
  refs.SetWorkdir("job-b", "w2");      // replaced
  EXPECT_FALSE(refs.Referenced("w1"));
  EXPECT_TRUE(refs.Referenced("w2"));
  refs.SetWorkdir("job-b", "");
  EXPECT_TRUE(refs.All().empty());
}

TEST(BlobRefsTest, ASharedChunkStaysUsedUntilItsLastManifestGoes) {
  FakeManifests f;
  f.chunks = {{"m1", {"only-m1", "shared"}}, {"m2", {"shared", "shared"}}, {"m3", {"only-m3"}}};
  BlobRefs refs(f.Reader());
  refs.SetCheckpoints("job-a", {"m1", "m2"});
  refs.SetCheckpoints("job-b", {"m2"});
  EXPECT_EQ(f.reads, 2);  // each distinct manifest once, when first kept
  EXPECT_TRUE(refs.ChunksCounted("m1"));
  EXPECT_FALSE(refs.ChunksCounted("m3"));  // not kept
  EXPECT_EQ(refs.All(), (std::set<std::string>{"m1", "m2", "only-m1", "shared"}));

  refs.SetCheckpoints("job-a", {"m2", "m3"});  // m1 dropped, m3 kept
  EXPECT_FALSE(refs.Referenced("m1"));
  EXPECT_FALSE(refs.Referenced("only-m1"));
  EXPECT_TRUE(refs.Referenced("shared"));  // m2 lists it
  EXPECT_TRUE(refs.Referenced("only-m3"));

  refs.SetCheckpoints("job-a", {});
  EXPECT_TRUE(refs.Referenced("m2"));  // job-b keeps it
  EXPECT_TRUE(refs.Referenced("shared"));
  EXPECT_FALSE(refs.Referenced("only-m3"));
  refs.SetCheckpoints("job-b", {});
  EXPECT_TRUE(refs.All().empty());
  EXPECT_EQ(refs.ToJson(), BlobRefs(f.Reader()).ToJson());  // nothing left behind
}

TEST(BlobRefsTest, AManifestStillKeptIsNotReadAgainWhenItsListChanges) {
  FakeManifests f;
  f.chunks = {{"m1", {"c1"}}, {"m2", {"c2"}}};
  BlobRefs refs(f.Reader());
  refs.SetCheckpoints("job-a", {"m1"});
  refs.SetCheckpoints("job-a", {"m1", "m2"});
  EXPECT_EQ(f.reads, 2);  // m1 never dropped to no reference on the way, so read once
  refs.SetCheckpoints("job-a", {"m2"});
  EXPECT_EQ(f.reads, 3);  // m1's last reference: read to uncount its chunks
  EXPECT_FALSE(refs.Referenced("c1"));
  EXPECT_TRUE(refs.Referenced("c2"));
}

TEST(BlobRefsTest, AManifestUnreadableWhenKeptHasItsChunksCountedOnceItCanBeRead) {
  FakeManifests f;
  BlobRefs refs(f.Reader());
  refs.SetCheckpoints("job-a", {"late"});  // not readable yet
  EXPECT_TRUE(refs.Referenced("late"));
  EXPECT_FALSE(refs.ChunksCounted("late"));
  EXPECT_FALSE(refs.Referenced("c1"));
  f.chunks["late"] = {"c1"};
  EXPECT_FALSE(refs.Referenced("c1"));  // not read again until a refresh
  refs.Refresh();
  EXPECT_TRUE(refs.Referenced("c1"));
  refs.Refresh();  // nothing left to read
  EXPECT_EQ(f.reads, 2);
  refs.SetCheckpoints("job-a", {});
  EXPECT_FALSE(refs.Referenced("c1"));
}

TEST(BlobRefsTest, AManifestUnreadableWhenReleasedKeepsItsChunksForGood) {
  FakeManifests f;
  f.chunks = {{"m1", {"c1"}}, {"m2", {"c2"}}};
  BlobRefs refs(f.Reader());
  refs.SetCheckpoints("job-a", {"m1", "m2"});
  f.chunks.erase("m1");  // gone from the store before its release
  refs.SetCheckpoints("job-a", {"m2"});
  EXPECT_FALSE(refs.Referenced("m1"));
  EXPECT_TRUE(refs.Referenced("c1"));  // cannot tell which chunks it listed: never unused
  EXPECT_TRUE(refs.Referenced("c2"));
}

TEST(BlobRefsTest, AChunkThatIsAlsoAWorkdirIsUsedByEither) {
  FakeManifests f;
  f.chunks = {{"m1", {"same"}}};
  BlobRefs refs(f.Reader());
  refs.SetWorkdir("job-a", "same");
  refs.SetCheckpoints("job-b", {"m1"});
  refs.SetWorkdir("job-a", "");
  EXPECT_TRUE(refs.Referenced("same"));
  refs.SetWorkdir("job-a", "same");
  refs.SetCheckpoints("job-b", {});
  EXPECT_TRUE(refs.Referenced("same"));
}

}  // namespace
}  // namespace sluice::server
