#include "common/token_file.h"

#include "gtest/gtest.h"

namespace sluice {
namespace {

const std::string kPin(64, 'a');

TEST(TokenFileTest, RoundTrips) {
  TokenFile f{"s3cret", kPin, "https://gpu.example.com:7070"};
  std::string text = FormatTokenFile(f);
  EXPECT_EQ(text, "s3cret\nca-sha256: " + kPin + "\nserver: https://gpu.example.com:7070\n");
  auto back = ParseTokenFile(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->secret, "s3cret");
  EXPECT_EQ(back->ca_sha256, kPin);
  EXPECT_EQ(back->server, "https://gpu.example.com:7070");
  EXPECT_EQ(FormatTokenFile({"only", "", ""}), "only\n");
}

TEST(TokenFileTest, OldSecretOnlyFilesStillParse) {
  auto f = ParseTokenFile("  abc123  \r\n\n");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->secret, "abc123");
  EXPECT_EQ(f->ca_sha256, "");
  EXPECT_EQ(f->server, "");
  EXPECT_TRUE(ParseTokenFile("abc").ok());  // no trailing newline
}

TEST(TokenFileTest, AcceptsOpensslFingerprintSpelling) {
  std::string colons;
  for (int i = 0; i < 32; ++i) colons += std::string(i ? ":" : "") + "AB";
  auto f = ParseTokenFile("t\r\nCA-SHA256:  " + colons + "\r\n");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::string expected;
  for (int i = 0; i < 32; ++i) expected += "ab";
  EXPECT_EQ(f->ca_sha256, expected);
}

TEST(TokenFileTest, ErrorsNameTheLine) {
  auto unknown = ParseTokenFile("t\nca-sha256: " + kPin + "\n\nsevrer: x\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("line 4"), std::string::npos)
      << unknown.status().message();
  EXPECT_NE(unknown.status().message().find("sevrer"), std::string::npos);

  EXPECT_NE(ParseTokenFile("t\nno colon here\n").status().message().find("line 2"),
            std::string::npos);
  EXPECT_NE(ParseTokenFile("t\nca-sha256: abc\n").status().message().find("64 hex"),
            std::string::npos);
  EXPECT_FALSE(ParseTokenFile("t\nserver: a\nserver: b\n").ok());
  EXPECT_FALSE(ParseTokenFile("").ok());
  EXPECT_FALSE(ParseTokenFile("\n  \n").ok());
  EXPECT_FALSE(ParseTokenFile("ca-sha256: " + kPin + "\n").ok());  // the secret comes first
}

}  // namespace
}  // namespace sluice
