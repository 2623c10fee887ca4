// Software a job can use on this machine: installed CUDA toolkits, the Python interpreter and its
// PyTorch build. Every fact is probed (files under /usr/local, `nvcc --version`, the interpreter
// itself), never taken from the provider, so an offer's software is what a job will find.
//
// The probe has two seams so tests need neither CUDA nor Python: the filesystem root toolkit
// discovery starts from, and the runner that executes commands. Parsers are pure functions over
// strings, tested on canned text.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sluice {

struct SoftwareFacts {
  std::vector<std::string> cuda_toolkits;  // "12.1", "11.8": newest first, no duplicates
  std::string python_version;              // "3.11.2"; empty when no interpreter answered
  std::vector<std::string> torch_builds;   // torch.__version__ per interpreter, no duplicates
  // "<command> <version>" per runtime that answered, in SoftwareProbeOptions order:
  // "docker 24.0.7", "podman 4.3.1", "nvidia-container-cli 1.14.3".
  std::vector<std::string> container_runtimes;

  bool operator==(const SoftwareFacts&) const = default;
};

// What one command did.
struct CommandResult {
  // 0..255 on a normal exit; 128+signal when killed by a signal (also after a timeout); 127 when
  // the program could not be found or started.
  int exit_code = 127;
  bool timed_out = false;  // ran past the timeout and was killed
  std::string out;         // stdout, at most kMaxCommandOutputBytes; stderr is discarded
};

// Runs argv (argv[0] a path, or a bare name looked up in $PATH) without a shell.
using CommandRunner = std::function<CommandResult(const std::vector<std::string>& argv,
                                                  std::chrono::milliseconds timeout)>;

inline constexpr size_t kMaxCommandOutputBytes = 64 * 1024;

// The real runner: fork/exec with stdin and stderr on /dev/null and stdout on a pipe. The child
// gets its own process group, no inherited descriptors beyond 0-2, default signal handling, and
// dies with the calling thread. Past `timeout` the whole group is SIGKILLed; the call returns
// within about the timeout even when the child ignores signals or a grandchild keeps the pipe
// open. Never throws and never blocks past that bound.
CommandResult RunCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

struct SoftwareProbeOptions {
  // Toolkits are looked for under <root>/usr/local/cuda and <root>/usr/local/cuda-X.Y.
  std::string root = "/";
  CommandRunner run = RunCommand;
  // Interpreters asked for their version and torch build, in order. python_version comes from the
  // first that answers; each one that imports torch adds its build.
  std::vector<std::string> pythons = {"python3"};
  // nvcc on PATH (a toolkit outside /usr/local, e.g. Debian's nvidia-cuda-toolkit); empty: skip.
  std::string nvcc = "nvcc";
  std::chrono::milliseconds python_timeout = std::chrono::seconds(5);
  std::chrono::milliseconds torch_timeout = std::chrono::seconds(30);  // importing torch is slow
  std::chrono::milliseconds nvcc_timeout = std::chrono::seconds(10);
  // Container runtimes asked for `<name> --version`; empty: skip. The NVIDIA container CLI says
  // whether containers on this machine can be given GPUs at all.
  std::vector<std::string> container_runtimes = {"docker", "podman", "nvidia-container-cli"};
  std::chrono::milliseconds runtime_timeout = std::chrono::seconds(5);
};

// Never fails: a fact that cannot be probed is left empty.
SoftwareFacts ProbeSoftware(const SoftwareProbeOptions& opts = {});

// The toolkits alone (the cuda_toolkits of ProbeSoftware): for each toolkit directory,
// version.json, else version.txt, else `<dir>/bin/nvcc --version`; then nvcc on PATH.
std::vector<std::string> ProbeCudaToolkits(const SoftwareProbeOptions& opts);

// "12.1" from a toolkit's version.json ({"cuda": {"version": "12.1.105"}, ...}).
Result<std::string> ParseCudaVersionJson(std::string_view text);
// "10.2" from a legacy toolkit's version.txt ("CUDA Version 10.2.89").
Result<std::string> ParseCudaVersionTxt(std::string_view text);
// "12.1" from `nvcc --version` ("Cuda compilation tools, release 12.1, V12.1.105").
Result<std::string> ParseNvccVersion(std::string_view text);

// "12.1" from "12.1.105" or "12.1"; InvalidArgument unless it starts with <digits>.<digits>.
Result<std::string> CudaMajorMinor(std::string_view version);

// The version in a container runtime's `--version` output: the token after the first "version"
// (case-insensitive, optional ':'), up to a comma or whitespace. "Docker version 24.0.7, build
// afdd53b" → "24.0.7"; "podman version 4.3.1" → "4.3.1"; nvidia-container-cli's
// "cli-version: 1.14.3\nlib-version: ..." → "1.14.3". InvalidArgument when there is none.
Result<std::string> ParseRuntimeVersion(std::string_view output);

// The runtimes alone (container_runtimes of ProbeSoftware). `docker` that turns out to be
// podman's docker emulation ("podman version 4.3.1") is not reported as docker: it is podman,
// which is probed under its own name.
std::vector<std::string> ProbeContainerRuntimes(const SoftwareProbeOptions& opts);

// A command's output as a version: whitespace stripped, then at most 64 printable non-space ASCII
// characters starting with a digit ("2.1.0+cu121"). Empty when the output is anything else.
std::string VersionFromOutput(std::string_view out);

}  // namespace sluice
