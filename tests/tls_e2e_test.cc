// End-to-end tests of TLS (issue 10; README "TLS"): a server started with --tls serves HTTPS and
// WSS with the CA it generated; an agent joins over WSS trusting the CA pin in its join token
// file, the CLI runs a job over HTTPS, a client with a different CA is refused, `openssl
// s_client` negotiates TLS 1.3, and plain HTTP off loopback needs --insecure-http.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/text.h"
#include "common/token_file.h"
#include "harness.h"

namespace sluice::testing {
namespace {

namespace fs = std::filesystem;

bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The openssl binary, found on PATH (the harness runs commands with execve, which does not
// search), or "" when it is not installed.
std::string Openssl() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = dir + "/openssl";
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// SHA-256 of a PEM certificate's DER, lowercase hex, as `openssl x509 -fingerprint` computes it.
std::string OpensslFingerprint(const std::string& pem_path) {
  CommandResult r =
      RunCommand({Openssl(), "x509", "-in", pem_path, "-noout", "-fingerprint", "-sha256"});
  std::string out = Trim(r.out);
  std::string hex;
  for (char c : out.substr(out.find('=') + 1)) {
    if (c != ':') hex.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return hex;
}

class TlsE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Openssl().empty()) GTEST_SKIP() << "the openssl command-line tool is not installed";
    cluster_.StartServer({"--tls", "--heartbeat-interval", "0.3", "--cancel-grace", "1"});
    ca_ = cluster_.server_data_dir() + "/tls/ca.crt";
    pin_ = OpensslFingerprint(ca_);
    ASSERT_EQ(pin_.size(), 64u);
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- server log ----\n" << cluster_.ServerLog() << "\n";
  }
  // A self-signed CA nobody uses for this server.
  std::string OtherCa() {
    std::string key = cluster_.dir() + "/other.key", crt = cluster_.dir() + "/other.crt";
    CommandResult r = RunCommand({Openssl(), "req", "-x509", "-newkey", "ec", "-pkeyopt",
                                  "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", crt,
                                  "-subj", "/CN=not the sluice CA", "-days", "2"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return crt;
  }
  // The CLI with only a token file (no SLUICE_SERVER/SLUICE_TOKEN): server, secret and pin all
  // come from it.
  CommandResult CliWithTokenFile(const std::string& token_file, std::vector<std::string> args,
                                 std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {SluiceBinary()};
    for (auto& a : args) argv.push_back(a);
    env["SLUICE_TOKEN_FILE"] = token_file;
    env["SLUICE_DATA_DIR"] = cluster_.dir() + "/no-local-server";
    return RunCommand(argv, env, std::chrono::seconds(60));
  }
  Cluster cluster_;
  std::string ca_;
  std::string pin_;
};

TEST_F(TlsE2ETest, AgentOverWssAndAJobOverHttpsWithTheGeneratedCa) {
  ASSERT_EQ(cluster_.url().rfind("https://127.0.0.1:", 0), 0u) << cluster_.url();
  // The join token file the agent reads: secret, the CA pin, the server. It is written here
  // rather than taken from the server so the test pins exactly the CA on disk.
  TokenFile join{cluster_.join_token(), pin_, cluster_.url()};
  cluster_.agent_join_token_file = cluster_.WriteFile("join-with-pin.token", FormatTokenFile(join));
  cluster_.StartAgent("tls1");  // over wss://, verified against the pin; waits for "verified"

  // A job over HTTPS: spec submitted, workdir uploaded, output streamed, exit code returned.
  std::string spec = cluster_.WriteFile("tls-job/job.yaml",
                                        "name: over-tls\n"
                                        "run: |\n"
                                        "  echo \"hello over $(cat greeting.txt)\"\n"
                                        "workdir: .\n");
  cluster_.WriteFile("tls-job/greeting.txt", "tls\n");
  CommandResult run = cluster_.Cli({"run", spec, "--follow"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_TRUE(Contains(run.out, "hello over tls")) << run.out << run.err;

  // A user handed only admin.token (with its pin and server lines) needs nothing else.
  TokenFile admin{cluster_.admin_token(), pin_, cluster_.url()};
  std::string admin_file = cluster_.WriteFile("admin-with-pin.token", FormatTokenFile(admin));
  CommandResult jobs = CliWithTokenFile(admin_file, {"jobs"});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_TRUE(Contains(jobs.out, "over-tls")) << jobs.out;
}

TEST_F(TlsE2ETest, AWrongCaIsRefused) {
  std::string other = OtherCa();
  // The CLI with another CA file.
  CommandResult r = RunCommand({SluiceBinary(), "jobs"}, {{"SLUICE_SERVER", cluster_.url()},
                                                          {"SLUICE_TOKEN", cluster_.admin_token()},
                                                          {"SLUICE_CA_FILE", other}});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "server certificate not trusted")) << r.err;

  // The CLI with another CA's pin in its token file.
  TokenFile wrong{cluster_.admin_token(), OpensslFingerprint(other), cluster_.url()};
  std::string wrong_file = cluster_.WriteFile("wrong-pin.token", FormatTokenFile(wrong));
  CommandResult pinned = CliWithTokenFile(wrong_file, {"jobs"});
  EXPECT_NE(pinned.exit_code, 0);
  EXPECT_TRUE(Contains(pinned.err, "server certificate not trusted")) << pinned.err;
  EXPECT_TRUE(Contains(pinned.err, "pinned")) << pinned.err;

  // Without a CA, the system store does not know the generated one.
  CommandResult system_store = RunCommand(
      {SluiceBinary(), "jobs"}, {{"SLUICE_SERVER", cluster_.url()},
                                 {"SLUICE_TOKEN", cluster_.admin_token()},
                                 {"SLUICE_DATA_DIR", cluster_.dir() + "/no-local-server"}});
  EXPECT_NE(system_store.exit_code, 0);
  EXPECT_TRUE(Contains(system_store.err, "server certificate not trusted")) << system_store.err;

  // An agent with the wrong pin never registers, and says why.
  TokenFile agent_wrong{cluster_.join_token(), OpensslFingerprint(other), ""};
  cluster_.agent_join_token_file =
      cluster_.WriteFile("agent-wrong-pin.token", FormatTokenFile(agent_wrong));
  Daemon* agent = cluster_.StartAgent("wrongca", {}, /*wait_online=*/false);
  EXPECT_TRUE(WaitUntil([&] { return Contains(agent->Log(), "server certificate not trusted"); }))
      << agent->Log();
  Json nodes = cluster_.CliJson({"nodes"});
  ASSERT_TRUE(nodes.is_array());
  EXPECT_TRUE(nodes.empty()) << nodes.dump();

  // Plain HTTP to the TLS port is answered with a readable refusal, not a hang.
  std::string plain = "http://" + cluster_.url().substr(std::string("https://").size());
  CommandResult http =
      RunCommand({SluiceBinary(), "jobs"}, {{"SLUICE_SERVER", plain}, {"SLUICE_TOKEN", "x"}});
  EXPECT_NE(http.exit_code, 0);
  EXPECT_TRUE(Contains(http.err, "speaks HTTPS")) << http.err;
}

TEST_F(TlsE2ETest, OpensslSClientNegotiatesTls13AndVerifies) {
  std::string hostport = cluster_.url().substr(std::string("https://").size());
  CommandResult r = RunCommand({Openssl(), "s_client", "-connect", hostport, "-tls1_3", "-CAfile",
                                ca_, "-verify_ip", "127.0.0.1"},
                               {}, std::chrono::seconds(20), "");
  std::string all = r.out + r.err;
  EXPECT_TRUE(Contains(all, "TLSv1.3")) << all;
  EXPECT_TRUE(Contains(all, "Verify return code: 0 (ok)")) << all;
}

TEST(TlsServerFlagsTest, PlainHttpOffLoopbackNeedsInsecureHttp) {
  Cluster cluster;
  std::string data = cluster.dir() + "/server";
  CommandResult refused =
      RunCommand({SluiceBinary(), "server", "--listen", "0.0.0.0:0", "--data-dir", data}, {},
                 std::chrono::seconds(20));
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_TRUE(Contains(refused.err, "--insecure-http")) << refused.err;

  Daemon insecure(
      {SluiceBinary(), "server", "--listen", "0.0.0.0:0", "--data-dir", data, "--insecure-http"},
      {}, cluster.dir() + "/insecure.log");
  EXPECT_TRUE(WaitUntil([&] { return fs::exists(data + "/server.url"); })) << insecure.Log();
  EXPECT_TRUE(Contains(insecure.Log(), "WARNING: serving plain HTTP")) << insecure.Log();
  EXPECT_EQ(ReadAll(data + "/server.url").rfind("http://", 0), 0u);
  insecure.Signal(SIGTERM);
  EXPECT_EQ(insecure.Wait(std::chrono::seconds(10)), 0);

  CommandResult half = RunCommand({SluiceBinary(), "server", "--listen", "127.0.0.1:0",
                                   "--data-dir", data, "--tls-cert", data + "/tls/server.crt"},
                                  {}, std::chrono::seconds(20));
  EXPECT_EQ(half.exit_code, 2) << half.err;
  EXPECT_TRUE(Contains(half.err, "--tls-cert and --tls-key go together")) << half.err;
}

}  // namespace
}  // namespace sluice::testing
