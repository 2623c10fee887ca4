#include "agent/software_probe.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "agent/probe_command.h"
#include "agent/probe_test_util.h"
#include "common/text.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr const char* kPythonVersionScript = "import sys; print('%d.%d.%d' % sys.version_info[:3])";
constexpr const char* kTorchVersionScript = "import torch; print(torch.__version__)";

// version.json as CUDA 12.1 Update 1 installs it (abridged: the real file lists every component).
constexpr const char* kVersionJson121 = R"({
   "cuda" : {
      "name" : "CUDA SDK",
      "version" : "12.1.1"
   },
   "cuda_cccl" : {
      "name" : "CUDA C++ Core Compute Libraries",
      "version" : "12.1.109"
   },
   "cuda_nvcc" : {
      "name" : "CUDA NVCC",
      "version" : "12.1.105"
   }
}
)";

// `nvcc --version` of the CUDA 13.0 toolkit on the machine these tests were written on.
constexpr const char* kNvcc130 =
    "nvcc: NVIDIA (R) Cuda compiler driver\n"
    "Copyright (c) 2005-2025 NVIDIA Corporation\n"
    "Built on Wed_Aug_20_01:58:59_PM_PDT_2025\n"
    "Cuda compilation tools, release 13.0, V13.0.88\n"
    "Build cuda_13.0.r13.0/compiler.36424714_0\n";

constexpr const char* kNvcc118 =
    "nvcc: NVIDIA (R) Cuda compiler driver\n"
    "Copyright (c) 2005-2022 NVIDIA Corporation\n"
    "Built on Wed_Sep_21_10:33:58_PDT_2022\n"
    "Cuda compilation tools, release 11.8, V11.8.89\n"
    "Build cuda_11.8.r11.8/compiler.31833905_0\n";

// --- Parsers -----------------------------------------------------------------------------------

TEST(CudaVersionParseTest, VersionJson) {
  EXPECT_EQ(ParseCudaVersionJson(kVersionJson121).value(), "12.1");
  EXPECT_EQ(ParseCudaVersionJson(R"({"cuda": {"version": "11.8.0"}})").value(), "11.8");
  EXPECT_FALSE(ParseCudaVersionJson("").ok());
  EXPECT_FALSE(ParseCudaVersionJson("{not json").ok());
  EXPECT_FALSE(ParseCudaVersionJson("[]").ok());
  EXPECT_FALSE(ParseCudaVersionJson(R"({"cuda_nvcc": {"version": "12.1.105"}})").ok());
  EXPECT_FALSE(ParseCudaVersionJson(R"({"cuda": "12.1"})").ok());
  EXPECT_FALSE(ParseCudaVersionJson(R"({"cuda": {"version": 12.1}})").ok());
  EXPECT_FALSE(ParseCudaVersionJson(R"({"cuda": {"version": "twelve"}})").ok());
}

TEST(CudaVersionParseTest, VersionTxt) {
  EXPECT_EQ(ParseCudaVersionTxt("CUDA Version 10.2.89\n").value(), "10.2");
  EXPECT_EQ(ParseCudaVersionTxt("CUDA Version 11.0.228").value(), "11.0");
  EXPECT_EQ(ParseCudaVersionTxt("CUDA Version 9.0.176\r\n").value(), "9.0");
  EXPECT_FALSE(ParseCudaVersionTxt("").ok());
  EXPECT_FALSE(ParseCudaVersionTxt("CUDA Version \n").ok());
  EXPECT_FALSE(ParseCudaVersionTxt("cuDNN 8.9.2").ok());
}

TEST(CudaVersionParseTest, NvccVersion) {
  EXPECT_EQ(ParseNvccVersion(kNvcc130).value(), "13.0");
  EXPECT_EQ(ParseNvccVersion(kNvcc118).value(), "11.8");
  EXPECT_EQ(ParseNvccVersion("Cuda compilation tools, release 12.1, V12.1.105").value(), "12.1");
  EXPECT_FALSE(ParseNvccVersion("").ok());
  EXPECT_FALSE(ParseNvccVersion("sh: 1: nvcc: not found\n").ok());
  EXPECT_FALSE(ParseNvccVersion("Cuda compilation tools, release , V").ok());
}

TEST(CudaVersionParseTest, MajorMinor) {
  EXPECT_EQ(CudaMajorMinor("12.1.105").value(), "12.1");
  EXPECT_EQ(CudaMajorMinor("12.1").value(), "12.1");
  EXPECT_EQ(CudaMajorMinor("9.2.148.1").value(), "9.2");
  EXPECT_FALSE(CudaMajorMinor("").ok());
  EXPECT_FALSE(CudaMajorMinor("12").ok());
  EXPECT_FALSE(CudaMajorMinor("12.").ok());
  EXPECT_FALSE(CudaMajorMinor("v12.1").ok());
  EXPECT_FALSE(CudaMajorMinor("12.1abc").ok());
  EXPECT_FALSE(CudaMajorMinor("12.1 ").ok());
  EXPECT_FALSE(CudaMajorMinor("123456.1").ok());
}

TEST(VersionFromOutputTest, AcceptsOnlyWhatLooksLikeAVersion) {
  EXPECT_EQ(VersionFromOutput("2.1.0+cu121\n"), "2.1.0+cu121");
  EXPECT_EQ(VersionFromOutput("  2.0.1 \r\n"), "2.0.1");
  EXPECT_EQ(VersionFromOutput("3.11.2\n"), "3.11.2");
  EXPECT_EQ(VersionFromOutput("2.4.0a0+git1234abc"), "2.4.0a0+git1234abc");
  EXPECT_EQ(VersionFromOutput(""), "");
  EXPECT_EQ(VersionFromOutput("\n \n"), "");
  EXPECT_EQ(VersionFromOutput("Traceback (most recent call last):\n"), "");
  EXPECT_EQ(VersionFromOutput("v2.1.0"), "");
  EXPECT_EQ(VersionFromOutput("2.1.0\n2.0.1\n"), "");  // two answers is no answer
  EXPECT_EQ(VersionFromOutput("2.1.0 extra"), "");
  EXPECT_EQ(VersionFromOutput("2.1.0\x1b[0m"), "");
  EXPECT_EQ(VersionFromOutput("2.1.0\xc3\xa9"), "");
  EXPECT_EQ(VersionFromOutput(std::string(64, '1')), std::string(64, '1'));
  EXPECT_EQ(VersionFromOutput(std::string(65, '1')), "");
}

// --- Toolkit discovery over a fake root --------------------------------------------------------

class FakeRoot {
 public:
  FakeRoot() {
    std::string tmpl = ::testing::TempDir() + "software_probe_test_XXXXXX";
    dir_ = mkdtemp(tmpl.data()) ? tmpl : "";
  }
  ~FakeRoot() {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  const std::string& path() const { return dir_; }
  std::string Write(const std::string& rel, const std::string& body, bool executable = false) {
    fs::path p = fs::path(dir_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << body;
    if (executable) chmod(p.c_str(), 0755);
    return p.string();
  }
  void Mkdir(const std::string& rel) { fs::create_directories(fs::path(dir_) / rel); }
  void Symlink(const std::string& target, const std::string& rel) {
    fs::create_symlink(target, fs::path(dir_) / rel);
  }

 private:
  std::string dir_;
};

// A runner that answers from a table keyed by the argv joined with spaces, and records calls.
class FakeRunner {
 public:
  void Answer(const std::string& argv, CommandResult r) { answers_[argv] = std::move(r); }
  void Answer(const std::string& argv, int exit_code, std::string out) {
    CommandResult r;
    r.exit_code = exit_code;
    r.out = std::move(out);
    Answer(argv, std::move(r));
  }
  CommandRunner runner() {
    return [this](const std::vector<std::string>& argv, milliseconds timeout) {
      std::string key;
      for (const auto& a : argv) key += (key.empty() ? "" : " ") + a;
      calls.push_back(key);
      timeouts[key] = timeout;
      auto it = answers_.find(key);
      return it == answers_.end() ? CommandResult{} : it->second;  // default: not found (127)
    };
  }
  std::vector<std::string> calls;
  std::map<std::string, milliseconds> timeouts;

 private:
  std::map<std::string, CommandResult> answers_;
};

CommandResult TimedOut() {
  CommandResult r;
  r.timed_out = true;
  r.exit_code = 137;
  r.out = "2.1.0";  // whatever it printed before it hung is not trusted
  return r;
}

std::string PyKey(const std::string& python) { return python + " -c " + kPythonVersionScript; }
std::string TorchKey(const std::string& python) { return python + " -c " + kTorchVersionScript; }

TEST(CudaToolkitDiscoveryTest, FindsToolkitsUnderUsrLocal) {
  FakeRoot root;
  root.Write("usr/local/cuda-12.1/version.json", kVersionJson121);
  root.Write("usr/local/cuda-11.8/version.txt", "CUDA Version 11.8.89\n");
  // Broken: a version.json that is not JSON and no other clue. Not reported.
  root.Write("usr/local/cuda-10.0/version.json", "{\"cuda\": {\"vers");
  // Empty directory left behind by an uninstall. Not reported: the name alone is a claim.
  root.Mkdir("usr/local/cuda-9.2");
  // A wheel-style toolkit with neither version file: its own nvcc answers.
  std::string nvcc130 = root.Write("usr/local/cuda-13.0/bin/nvcc", "#!/bin/sh\n", true);
  // The usual symlink to the default toolkit: the same version only once.
  root.Symlink("cuda-12.1", "usr/local/cuda");
  // Neither a directory nor a toolkit name.
  root.Write("usr/local/cuda-8.0", "not a directory");
  root.Write("usr/local/cudnn/version.json", kVersionJson121);

  FakeRunner fake;
  fake.Answer(nvcc130 + " --version", 0, kNvcc130);
  fake.Answer("nvcc --version", 0, kNvcc118);  // the PATH nvcc is one of the above
  SoftwareProbeOptions opts;
  opts.root = root.path();
  opts.run = fake.runner();
  EXPECT_THAT(ProbeCudaToolkits(opts), ElementsAre("13.0", "12.1", "11.8"));
  EXPECT_EQ(fake.timeouts[nvcc130 + " --version"], std::chrono::seconds(10));
}

TEST(CudaToolkitDiscoveryTest, NvccOnPathAddsAToolkitOutsideUsrLocal) {
  FakeRoot root;
  root.Write("usr/local/cuda-11.8/version.json", R"({"cuda": {"version": "11.8.0"}})");
  FakeRunner fake;
  fake.Answer("nvcc --version", 0, "Cuda compilation tools, release 12.4, V12.4.131\n");
  SoftwareProbeOptions opts;
  opts.root = root.path();
  opts.run = fake.runner();
  EXPECT_THAT(ProbeCudaToolkits(opts), ElementsAre("12.4", "11.8"));

  // A failing or hanging nvcc adds nothing.
  fake.Answer("nvcc --version", 1, "Cuda compilation tools, release 12.4, V12.4.131\n");
  EXPECT_THAT(ProbeCudaToolkits(opts), ElementsAre("11.8"));
  CommandResult hung = TimedOut();
  hung.out = "Cuda compilation tools, release 12.4, V12.4.131\n";
  fake.Answer("nvcc --version", hung);
  EXPECT_THAT(ProbeCudaToolkits(opts), ElementsAre("11.8"));

  opts.nvcc = "";  // not asked at all
  fake.calls.clear();
  EXPECT_THAT(ProbeCudaToolkits(opts), ElementsAre("11.8"));
  EXPECT_THAT(fake.calls, IsEmpty());
}

TEST(CudaToolkitDiscoveryTest, SortsNumericallyNewestFirst) {
  FakeRoot root;
  for (const char* v : {"9.2", "12.10", "12.2", "11.8", "10.1"}) {
    root.Write(std::string("usr/local/cuda-") + v + "/version.json",
               std::string(R"({"cuda": {"version": ")") + v + R"(.0"}})");
  }
  FakeRunner fake;
  SoftwareProbeOptions opts;
  opts.root = root.path();
  opts.run = fake.runner();
  EXPECT_THAT(ProbeCudaToolkits(opts), ElementsAre("12.10", "12.2", "11.8", "10.1", "9.2"));
}

TEST(CudaToolkitDiscoveryTest, MissingRootFindsNothing) {
  FakeRunner fake;
  SoftwareProbeOptions opts;
  opts.root = "/nonexistent/software_probe_test";
  opts.run = fake.runner();
  EXPECT_THAT(ProbeCudaToolkits(opts), IsEmpty());
}

// --- Python and PyTorch through a fake runner --------------------------------------------------

SoftwareProbeOptions NoToolkits(FakeRunner& fake) {
  SoftwareProbeOptions opts;
  opts.root = "/nonexistent/software_probe_test";
  opts.nvcc = "";
  opts.container_runtimes = {};
  opts.run = fake.runner();
  return opts;
}

TEST(PythonProbeTest, PythonAndTorchPresent) {
  FakeRunner fake;
  fake.Answer(PyKey("python3"), 0, "3.11.2\n");
  fake.Answer(TorchKey("python3"), 0, "2.1.0+cu121\n");
  SoftwareFacts f = ProbeSoftware(NoToolkits(fake));
  EXPECT_EQ(f.python_version, "3.11.2");
  EXPECT_THAT(f.torch_builds, ElementsAre("2.1.0+cu121"));
  EXPECT_THAT(f.cuda_toolkits, IsEmpty());
  // Short timeout for the interpreter, a long one for importing torch.
  EXPECT_EQ(fake.timeouts[PyKey("python3")], std::chrono::seconds(5));
  EXPECT_EQ(fake.timeouts[TorchKey("python3")], std::chrono::seconds(30));
}

TEST(PythonProbeTest, NoTorchIsNoBuild) {
  FakeRunner fake;
  fake.Answer(PyKey("python3"), 0, "3.11.2\n");
  fake.Answer(TorchKey("python3"), 1, "");  // ModuleNotFoundError goes to stderr
  SoftwareFacts f = ProbeSoftware(NoToolkits(fake));
  EXPECT_EQ(f.python_version, "3.11.2");
  EXPECT_THAT(f.torch_builds, IsEmpty());
}

TEST(PythonProbeTest, GarbageOutputIsIgnored) {
  FakeRunner fake;
  fake.Answer(PyKey("python3"), 0, "3.11.2\n");
  fake.Answer(TorchKey("python3"), 0, "Warning: something odd\n2.1.0\n");
  SoftwareFacts f = ProbeSoftware(NoToolkits(fake));
  EXPECT_EQ(f.python_version, "3.11.2");
  EXPECT_THAT(f.torch_builds, IsEmpty());

  FakeRunner liar;
  liar.Answer(PyKey("python3"), 0, "Python is great\n");
  liar.Answer(TorchKey("python3"), 0, "2.1.0\n");
  f = ProbeSoftware(NoToolkits(liar));
  EXPECT_EQ(f.python_version, "");
  EXPECT_THAT(f.torch_builds, IsEmpty());  // torch is only asked of a working interpreter
  EXPECT_THAT(liar.calls, ElementsAre(PyKey("python3")));
}

TEST(PythonProbeTest, TimeoutsAreNoAnswer) {
  FakeRunner fake;
  fake.Answer(PyKey("python3"), 0, "3.11.2\n");
  fake.Answer(TorchKey("python3"), TimedOut());
  SoftwareFacts f = ProbeSoftware(NoToolkits(fake));
  EXPECT_EQ(f.python_version, "3.11.2");
  EXPECT_THAT(f.torch_builds, IsEmpty());

  FakeRunner hung;
  hung.Answer(PyKey("python3"), TimedOut());
  f = ProbeSoftware(NoToolkits(hung));
  EXPECT_EQ(f, SoftwareFacts{});
}

TEST(PythonProbeTest, NoPythonAtAll) {
  FakeRunner fake;  // every command: exit 127
  SoftwareFacts f = ProbeSoftware(NoToolkits(fake));
  EXPECT_EQ(f, SoftwareFacts{});
  EXPECT_THAT(fake.calls, ElementsAre(PyKey("python3")));
}

TEST(PythonProbeTest, OneBuildPerInterpreterWithoutDuplicates) {
  FakeRunner fake;
  fake.Answer(PyKey("/usr/bin/python3"), 0, "3.11.2\n");
  fake.Answer(TorchKey("/usr/bin/python3"), 0, "2.0.1\n");
  fake.Answer(PyKey("/opt/venv/bin/python3"), 0, "3.12.1\n");
  fake.Answer(TorchKey("/opt/venv/bin/python3"), 0, "2.3.0+cu121\n");
  fake.Answer(PyKey("/opt/other/bin/python3"), 0, "3.12.1\n");
  fake.Answer(TorchKey("/opt/other/bin/python3"), 0, "2.3.0+cu121\n");
  SoftwareProbeOptions opts = NoToolkits(fake);
  opts.pythons = {"/nonexistent/python3", "/usr/bin/python3", "/opt/venv/bin/python3",
                  "/opt/other/bin/python3"};
  SoftwareFacts f = ProbeSoftware(opts);
  EXPECT_EQ(f.python_version, "3.11.2");  // the first interpreter that answered
  EXPECT_THAT(f.torch_builds, ElementsAre("2.0.1", "2.3.0+cu121"));
}

// --- The real runner on this machine -----------------------------------------------------------

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(RunCommandTest, RealProcesses) {
  // Output is captured; stderr is not part of it.
  CommandResult echo = RunCommand({"echo", "hello", "world"}, milliseconds(5000));
  EXPECT_EQ(echo.exit_code, 0);
  EXPECT_FALSE(echo.timed_out);
  EXPECT_EQ(echo.out, "hello world\n");
  CommandResult mixed = RunCommand({"/bin/sh", "-c", "echo err >&2; echo out"}, milliseconds(5000));
  EXPECT_EQ(mixed.out, "out\n");

  // No shell: metacharacters in an argument are just bytes.
  CommandResult literal = RunCommand({"/bin/echo", "$(id); `id` | x"}, milliseconds(5000));
  EXPECT_EQ(literal.out, "$(id); `id` | x\n");

  EXPECT_EQ(RunCommand({"/bin/sh", "-c", "exit 3"}, milliseconds(5000)).exit_code, 3);
  EXPECT_EQ(RunCommand({"/bin/sh", "-c", "kill -TERM $$"}, milliseconds(5000)).exit_code, 128 + 15);
  EXPECT_EQ(RunCommand({"/nonexistent/python3"}, milliseconds(5000)).exit_code, 127);
  EXPECT_EQ(RunCommand({"no-such-command-sluice-test"}, milliseconds(5000)).exit_code, 127);
  EXPECT_EQ(RunCommand({}, milliseconds(5000)).exit_code, 127);

  // A hang is killed at the timeout.
  auto t0 = std::chrono::steady_clock::now();
  CommandResult hang = RunCommand({"/bin/sh", "-c", "echo started; sleep 10"}, milliseconds(200));
  double took = SecondsSince(t0);
  EXPECT_TRUE(hang.timed_out);
  EXPECT_EQ(hang.exit_code, 128 + 9);
  EXPECT_EQ(hang.out, "started\n");
  EXPECT_GE(took, 0.19);
  EXPECT_LT(took, 2.0);

  // Ignoring SIGTERM does not help: it is SIGKILL, to the whole group.
  t0 = std::chrono::steady_clock::now();
  hang = RunCommand({"/bin/sh", "-c", "trap '' TERM INT HUP; sleep 10 & sleep 10; wait"},
                    milliseconds(200));
  EXPECT_TRUE(hang.timed_out);
  EXPECT_LT(SecondsSince(t0), 2.0);

  // The command exits but leaves a child holding stdout: the call still returns at the timeout,
  // with the command's own exit status.
  t0 = std::chrono::steady_clock::now();
  CommandResult orphan = RunCommand({"/bin/sh", "-c", "sleep 10 & echo hi"}, milliseconds(200));
  EXPECT_LT(SecondsSince(t0), 2.0);
  EXPECT_FALSE(orphan.timed_out);
  EXPECT_EQ(orphan.exit_code, 0);
  EXPECT_EQ(orphan.out, "hi\n");

  // Output is capped, and a chatty command is drained rather than blocked.
  CommandResult big = RunCommand({"head", "-c", "300000", "/dev/zero"}, milliseconds(5000));
  EXPECT_EQ(big.exit_code, 0);
  EXPECT_EQ(big.out.size(), kMaxCommandOutputBytes);
}

TEST(RunCommandTest, ChildInheritsNoDescriptorsButStdio) {
  int leaked = open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(leaked, 3);
  std::string fd = "/proc/$$/fd/" + std::to_string(leaked);
  CommandResult r =
      RunCommand({"/bin/sh", "-c", "if [ -e " + fd + " ]; then echo open; else echo closed; fi"},
                 milliseconds(5000));
  close(leaked);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "closed\n");
}

// --- Container runtimes ------------------------------------------------------------------------

TEST(ContainerRuntimeParseTest, VersionsFromRealOutputs) {
  EXPECT_EQ(*ParseRuntimeVersion("Docker version 24.0.7, build afdd53b\n"), "24.0.7");
  EXPECT_EQ(*ParseRuntimeVersion("Docker version 20.10.24+dfsg1, build 297e128\n"),
            "20.10.24+dfsg1");
  EXPECT_EQ(*ParseRuntimeVersion("podman version 4.3.1\n"), "4.3.1");
  EXPECT_EQ(*ParseRuntimeVersion("cli-version: 1.14.3\nlib-version: 1.14.3\nbuild date: "
                                 "2023-10-19T11:32+00:00\n"),
            "1.14.3");
  EXPECT_FALSE(ParseRuntimeVersion("").ok());
  EXPECT_FALSE(ParseRuntimeVersion("Docker, build afdd53b\n").ok());
  EXPECT_FALSE(ParseRuntimeVersion("version: unknown\n").ok());
}

TEST(ContainerRuntimeProbeTest, EachRuntimeThatAnswers) {
  FakeRunner fake;
  fake.Answer("docker --version", 0, "Docker version 24.0.7, build afdd53b\n");
  fake.Answer("podman --version", 127, "");
  fake.Answer("nvidia-container-cli --version", 0, "cli-version: 1.14.3\nlib-version: 1.14.3\n");
  SoftwareProbeOptions opts = NoToolkits(fake);
  opts.container_runtimes = {"docker", "podman", "nvidia-container-cli"};
  SoftwareFacts f = ProbeSoftware(opts);
  EXPECT_THAT(f.container_runtimes, ElementsAre("docker 24.0.7", "nvidia-container-cli 1.14.3"));
  EXPECT_EQ(fake.timeouts["docker --version"], std::chrono::seconds(5));
}

TEST(ContainerRuntimeProbeTest, PodmanDockerEmulationIsPodman) {
  FakeRunner fake;
  fake.Answer("docker --version", 0, "podman version 4.3.1\n");
  fake.Answer("podman --version", 0, "podman version 4.3.1\n");
  SoftwareProbeOptions opts = NoToolkits(fake);
  opts.container_runtimes = {"docker", "podman"};
  EXPECT_THAT(ProbeContainerRuntimes(opts), ElementsAre("podman 4.3.1"));
}

TEST(ContainerRuntimeProbeTest, HungOrGarbageIsNoRuntime) {
  FakeRunner fake;
  fake.Answer("docker --version", TimedOut());
  fake.Answer("podman --version", 0, "Error: cannot connect\n");
  SoftwareProbeOptions opts = NoToolkits(fake);
  opts.container_runtimes = {"docker", "podman"};
  EXPECT_THAT(ProbeContainerRuntimes(opts), IsEmpty());
  EXPECT_THAT(fake.calls, ElementsAre("docker --version", "podman --version"));
}

TEST(ContainerRuntimeProbeTest, DefaultsAskDockerPodmanAndTheNvidiaCli) {
  SoftwareProbeOptions opts;
  EXPECT_THAT(opts.container_runtimes, ElementsAre("docker", "podman", "nvidia-container-cli"));
}

// --- The real probe on this machine ------------------------------------------------------------

TEST(SoftwareProbeTest, RealPythonIsFound) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 here";
  SoftwareProbeOptions opts;
  opts.pythons = {"/usr/bin/python3"};
  SoftwareFacts f = ProbeSoftware(opts);
  EXPECT_TRUE(std::regex_match(f.python_version, std::regex(R"(\d+\.\d+\.\d+)")))
      << f.python_version;
  for (const std::string& t : f.cuda_toolkits) {
    EXPECT_TRUE(std::regex_match(t, std::regex(R"(\d+\.\d+)"))) << t;
  }
  // Whether this machine has torch for that interpreter decides what the probe must say.
  CommandResult torch =
      RunCommand({"/usr/bin/python3", "-c", kTorchVersionScript}, std::chrono::seconds(60));
  if (torch.exit_code == 0) {
    EXPECT_THAT(f.torch_builds, ElementsAre(Trim(torch.out)));
  } else {
    EXPECT_THAT(f.torch_builds, IsEmpty());
  }
}

TEST(SoftwareProbeTest, ProbeCommandSummaryShowsSoftware) {
  std::ostringstream out, err;
  ASSERT_EQ(ProbeCommand(testing::NvidiaSmiFixture("a100-sxm4-80gb-1.xml"), false, out, err), 0)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("\ntoolkit: "));
  EXPECT_THAT(out.str(), HasSubstr("\npython:  "));
}

}  // namespace
}  // namespace sluice
