// Scope guards for CUDA driver handles, shared by the suite's GPU checks (gpu_checks.cc,
// gpu_perf.cc): the driver API is plain C, so nothing frees a handle unless we do. Internal to
// the agent.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "agent/conformance_util.h"
#include "agent/cuda_driver.h"

namespace sluice::conformance_internal {

// Runs `fn` when the scope ends unless dismissed.
class Cleanup {
 public:
  explicit Cleanup(std::function<void()> fn) : fn_(std::move(fn)) {}
  ~Cleanup() {
    if (fn_) fn_();
  }
  void Dismiss() { fn_ = nullptr; }
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;

 private:
  std::function<void()> fn_;
};

// Device memory freed on scope exit, unless Leak() was called (a kernel that outlived its time
// limit may still touch it; freeing it would be worse than leaking it).
struct DeviceBuffer {
  const CudaDriver& cuda;
  CUdeviceptr ptr = 0;
  explicit DeviceBuffer(const CudaDriver& d) : cuda(d) {}
  ~DeviceBuffer() {
    if (ptr != 0) cuda.api().mem_free(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Status Alloc(size_t bytes) {
    return cuda.Check(cuda.api().mem_alloc(&ptr, bytes), "cuMemAlloc_v2");
  }
  void Leak() { ptr = 0; }
};

// An event destroyed on scope exit unless leaked.
struct DeviceEvent {
  const CudaDriver& cuda;
  CUevent event = nullptr;
  explicit DeviceEvent(const CudaDriver& d) : cuda(d) {}
  ~DeviceEvent() {
    if (event != nullptr) cuda.api().event_destroy(event);
  }
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;
  Status Create() {
    return cuda.Check(cuda.api().event_create(&event, CU_EVENT_DEFAULT), "cuEventCreate");
  }
  void Leak() { event = nullptr; }
};

inline std::string Describe(const CudaDevice& d) {
  return "CUDA device " + std::to_string(d.ordinal) + " (" + d.name + ", " + d.pci_bus_id + ")";
}

// Polls `event` until the work before it is done. Polling rather than cuEventSynchronize so a
// hung kernel costs the deadline, not the agent. Sets *hung when the deadline passed first.
inline Status WaitForEvent(const CudaDriver& cuda, CUevent event, const Deadline& deadline,
                           bool* hung) {
  *hung = false;
  for (;;) {
    CUresult rc = cuda.api().event_query(event);
    if (rc == CUDA_SUCCESS) return Status::Ok();
    if (rc != CUDA_ERROR_NOT_READY) return cuda.Check(rc, "cuEventQuery");
    if (deadline.Passed()) {
      *hung = true;
      return Status::DeadlineExceeded("kernel " + deadline.Text());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace sluice::conformance_internal
