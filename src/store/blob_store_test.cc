#include "store/blob_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "store/store_test_util.h"

namespace sluice::store {
namespace {

using testing::ScratchDir;

class BlobStoreTest : public ::testing::Test {
 protected:
  ScratchDir dir_;
  BlobStore blobs_{dir_.path() + "/blobs"};
};

TEST_F(BlobStoreTest, PutGetHasDelete) {
  const std::string data("workdir archive \0 with a NUL", 28);
  auto digest = blobs_.Put(data);
  ASSERT_TRUE(digest.ok()) << digest.status().ToString();
  EXPECT_EQ(*digest, Sha256Hex(data));
  EXPECT_TRUE(BlobStore::IsValidDigest(*digest));
  // Laid out as sha256/<first 2 hex>/<rest>.
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_.path() + "/blobs/sha256/" +
                                               digest->substr(0, 2) + "/" + digest->substr(2)));
  EXPECT_TRUE(blobs_.Has(*digest));
  auto got = blobs_.Get(*digest);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, data);

  // Putting the same bytes again is fine and changes nothing.
  ASSERT_TRUE(blobs_.Put(data).ok());
  EXPECT_EQ(*blobs_.Get(*digest), data);

  ASSERT_TRUE(blobs_.Delete(*digest).ok());
  EXPECT_FALSE(blobs_.Has(*digest));
  EXPECT_EQ(blobs_.Get(*digest).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(blobs_.Delete(*digest).code(), StatusCode::kNotFound);
}

TEST_F(BlobStoreTest, EmptyBlobRoundTrips) {
  auto digest = blobs_.Put("");
  ASSERT_TRUE(digest.ok());
  auto got = blobs_.Get(*digest);
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->empty());
}

TEST_F(BlobStoreTest, PutVerifiedChecksTheDigest) {
  const std::string data = "checkpoint bytes";
  const std::string wrong = Sha256Hex("something else");
  Status st = blobs_.PutVerified(wrong, data);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(blobs_.Has(wrong));
  EXPECT_FALSE(blobs_.Has(Sha256Hex(data)));  // nothing stored under either name

  ASSERT_TRUE(blobs_.PutVerified(Sha256Hex(data), data).ok());
  EXPECT_EQ(*blobs_.Get(Sha256Hex(data)), data);
}

TEST_F(BlobStoreTest, CorruptedFileIsDetected) {
  auto digest = blobs_.Put("the real bytes");
  ASSERT_TRUE(digest.ok());
  const std::string path =
      dir_.path() + "/blobs/sha256/" + digest->substr(0, 2) + "/" + digest->substr(2);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << "the real bytez";  // same length: one flipped byte
  }
  auto got = blobs_.Get(*digest);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInternal);
  EXPECT_EQ(got.status().message(), "blob " + *digest + " is corrupt");
}

TEST_F(BlobStoreTest, InvalidDigestsAreRefused) {
  const std::string valid = Sha256Hex("x");
  std::string upper = valid;
  upper[0] = 'A';
  upper[1] = 'B';
  for (const std::string& bad :
       {std::string("../x"), std::string("../../etc/passwd"), upper, valid.substr(0, 63),
        valid + "0", std::string(""), "ab/" + valid.substr(3), std::string(64, 'g')}) {
    EXPECT_FALSE(BlobStore::IsValidDigest(bad)) << bad;
    EXPECT_FALSE(blobs_.Has(bad)) << bad;
    EXPECT_EQ(blobs_.Get(bad).status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(blobs_.Delete(bad).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(blobs_.PutVerified(bad, "x").code(), StatusCode::kInvalidArgument) << bad;
  }
  // Nothing was created outside the store's root by any of the above.
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/x"));
}

TEST_F(BlobStoreTest, ConcurrentPutsOfTheSameBlobLeaveOneGoodCopy) {
  const std::string data(1 << 20, 'z');
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { ok[t] = blobs_.Put(data).ok(); });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
  EXPECT_EQ(*blobs_.Get(Sha256Hex(data)), data);
  // No temporary files are left next to the blob.
  const std::string digest = Sha256Hex(data);
  int files = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(dir_.path() + "/blobs/sha256/" + digest.substr(0, 2))) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace sluice::store
