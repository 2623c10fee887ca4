// Fingerprints (issue 5 item 1): a stable digest of what a machine is (hardware) and of what a
// job on it will find (software), so the server can tell "same machine, same stack" from "this
// changed" across re-registrations, and an audit bundle can name exactly what was verified.
//
// Each fingerprint is the SHA-256 of a canonical JSON document: keys sorted, no whitespace,
// integers only (no floating-point formatting to drift), strings as UTF-8 (invalid bytes
// replaced), lists sorted so probe order never matters. The document carries its scheme
// ("hardware/v1", "software/v1"): changing what goes in means a new scheme name, never a silent
// reinterpretation of old digests.
//
// Hardware (what stays put until someone opens the case):
//   gpus: uuid, serial, pci_bus_id (lowercase), name, memory_mib per GPU, sorted by uuid, then
//         pci_bus_id. Not the index (enumeration order can change across boots and
//         CUDA_DEVICE_ORDER), not mig_mode or power_limit_w (an admin toggles them at run time),
//         not vbios_version (flashable: firmware, not hardware) or compute_capability (follows
//         from the product, and not every probe source reports it).
//   cpu_model, cpu_cores, board, arch.
//   memory_gib: MemTotal rounded to the nearest GiB. MemTotal moves by a few to a few hundred
//         MiB with kernel and firmware reservations (crashkernel, iGPU carve-outs) while a
//         memory change is whole DIMMs (>= 4 GiB on anything rented out); the nearest GiB absorbs
//         the former and never the latter. It can still flip if MemTotal sits within such a
//         shift of a half-GiB line.
//   Not hostname (renaming is not new hardware) and nothing volatile (disk free).
// Software (what a job's code runs against):
//   driver_version, cuda_version, cuda_toolkits, python_version, torch_builds,
//   container_runtimes (lists sorted), os (PRETTY_NAME).
//   Not the kernel: routine security updates change `uname -r` weekly on a maintained machine,
//   which would make "software changed" noise; what a job links against (driver, CUDA,
//   toolkits, Python, PyTorch) and the runtimes it starts in are here. Not gpu_source either:
//   how the agent probed is not what the machine has.
//
// "N/A"-style placeholders in GPU strings ("N/A", "[N/A]", "Not Supported") count as empty, so
// the same card probed through NVML and through nvidia-smi fingerprints the same.
#pragma once

#include <string>

#include "common/inventory.h"

namespace sluice::audit {

struct Fingerprint {
  std::string canonical_json;  // exactly the bytes hashed
  std::string sha256;          // lowercase hex of SHA-256(canonical_json)

  bool operator==(const Fingerprint&) const = default;
};

Fingerprint HardwareFingerprint(const Inventory& inv);
Fingerprint SoftwareFingerprint(const Inventory& inv);

}  // namespace sluice::audit
