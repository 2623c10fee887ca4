#include "agent/cuda_driver.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace sluice {
namespace {

// Sets environment variables for one test and removes them afterwards, so tests that run in one
// process do not leak fake_cuda settings into each other.
class ScopedEnv {
 public:
  ScopedEnv& Set(const char* name, const char* value) {
    setenv(name, value, 1);
    names_.push_back(name);
    return *this;
  }
  ~ScopedEnv() {
    for (const char* n : names_) unsetenv(n);
  }

 private:
  std::vector<const char*> names_;
};

TEST(CudaDriverTest, ListsDevicesOfTheFakeLibrary) {
  ScopedEnv env;
  env.Set("FAKE_CUDA_DEVICES", "2").Set("FAKE_CUDA_PCI", "0000:2a:00.0,0000:18:00.0");
  auto cuda = CudaDriver::Load(FAKE_CUDA_PATH);
  ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
  ASSERT_TRUE((*cuda)->Init().ok());
  auto version = (*cuda)->DriverVersion();
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, 12040);
  auto devices = (*cuda)->Devices();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 2u);
  const CudaDevice& d1 = (*devices)[1];
  EXPECT_EQ(d1.ordinal, 1);
  EXPECT_EQ(d1.name, "Fake GPU 1");
  EXPECT_EQ(d1.pci_bus_id, "0000:18:00.0");
  EXPECT_EQ(d1.uuid, "GPU-5a1ce000-0000-0000-0000-000000000001");
  EXPECT_EQ(d1.total_bytes, 81559ull << 20);
  EXPECT_EQ(d1.cc_major, 9);
  EXPECT_EQ(d1.cc_minor, 0);
  EXPECT_EQ(d1.multiprocessors, 132);
  EXPECT_NE((*cuda)->api().mem_alloc_host, nullptr);
}

TEST(CudaDriverTest, MissingLibraryIsNotFound) {
  auto cuda = CudaDriver::Load("/nonexistent/libcuda.so.1");
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(cuda.status().message(), "/nonexistent/libcuda.so.1 not found");
}

TEST(CudaDriverTest, AFileThatIsNotALibraryIsUnavailable) {
  std::string path = ::testing::TempDir() + "/not-a-library.so";
  std::ofstream(path) << "not an ELF file\n";
  auto cuda = CudaDriver::Load(path);
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(cuda.status().message().find("cannot load " + path), std::string::npos)
      << cuda.status().message();
}

TEST(CudaDriverTest, ALibraryWithoutTheEntryPointsIsUnavailable) {
  auto cuda = CudaDriver::Load("libm.so.6");
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(cuda.status().message().find("not a usable CUDA driver, missing cuInit, "),
            std::string::npos)
      << cuda.status().message();
}

TEST(CudaDriverTest, ErrorsCarryTheDriversNameAndText) {
  ScopedEnv env;
  env.Set("FAKE_CUDA_FAIL", "init");
  auto cuda = CudaDriver::Load(FAKE_CUDA_PATH);
  ASSERT_TRUE(cuda.ok());
  Status s = (*cuda)->Init();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)");
  EXPECT_EQ((*cuda)->ErrorName(CUDA_ERROR_OUT_OF_MEMORY), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ((*cuda)->ErrorName(12345), "CUDA error 12345");
  EXPECT_TRUE((*cuda)->Check(CUDA_SUCCESS, "cuInit").ok());
}

TEST(CudaDriverTest, PciBusIdsMatchAcrossDomainWidthsAndCase) {
  EXPECT_TRUE(SamePciBusId("00000000:2A:00.0", "0000:2a:00.0"));
  EXPECT_TRUE(SamePciBusId("0000:17:00.0", "0000:17:00.0"));
  EXPECT_FALSE(SamePciBusId("00000000:2A:00.0", "0000:2b:00.0"));
  EXPECT_FALSE(SamePciBusId("00000000:2A:00.0", "00000001:2A:00.0"));
  EXPECT_FALSE(SamePciBusId("00000000:2A:00.0", "00000000:2A:00.1"));
  EXPECT_FALSE(SamePciBusId("", ""));
  EXPECT_FALSE(SamePciBusId("0000:17:00.0x", "0000:17:00.0"));
}

TEST(CudaDriverTest, UuidsMatchAsNvmlPrintsThem) {
  CUuuid u = {};
  for (int i = 0; i < 16; ++i) u.bytes[i] = static_cast<char>(0xa0 + i);
  std::string s = FormatGpuUuid(u);
  EXPECT_EQ(s, "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
  EXPECT_TRUE(SameGpuUuid(s, "GPU-A0A1A2A3-A4A5-A6A7-A8A9-AAABACADAEAF"));
  EXPECT_TRUE(SameGpuUuid(s, "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"));
  EXPECT_FALSE(SameGpuUuid(s, "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaea0"));
  EXPECT_FALSE(SameGpuUuid("", ""));
}

}  // namespace
}  // namespace sluice
