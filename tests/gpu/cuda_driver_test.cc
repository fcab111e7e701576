// The CUDA stager over tests/gpu/fake_cuda_driver.cc, a driver whose one device is host
// memory: on a host without a GPU, what can be checked of the stager is that it finds a
// device through the driver alone (no CUDA runtime library), makes the device's context
// current on every thread it is called from, and moves bytes through the driver's calls.
#include <dlfcn.h>

#include <gtest/gtest.h>

#include <numeric>
#include <thread>
#include <vector>

#include "gpu/staging.h"

namespace gpufs::gpu {
namespace {

size_t RegisteredBytes() {
  auto* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!driver) return 0;
  auto* fn = reinterpret_cast<size_t (*)()>(dlsym(driver, "gpufs_fake_registered_bytes"));
  dlclose(driver);
  return fn ? fn() : 0;
}

// The tests mean the fake driver; another one (a real GPU host) is not what they check.
bool FakeDriverFound() {
  auto* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  const bool fake = driver && dlsym(driver, "gpufs_fake_registered_bytes");
  if (driver) dlclose(driver);
  return fake;
}

class CudaDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FakeDriverFound()) {
      GTEST_SKIP() << "the fake libcuda.so.1 is not on LD_LIBRARY_PATH (meson test puts it there)";
    }
  }
};

TEST_F(CudaDriver, FindsTheDeviceThroughTheDriverAloneWithNoRuntimeLoaded) {
  auto stager = MakeDeviceStager();
  ASSERT_TRUE(stager->on_device()) << stager->description();
  EXPECT_EQ(stager->name(), "cuda");
  EXPECT_NE(stager->description().find("gpufs fake device (16 GiB)"), std::string::npos)
      << stager->description();
  // A host with a driver and no libcudart has a GPU: the runtime is never opened.
  EXPECT_EQ(dlopen("libcudart.so", RTLD_NOW | RTLD_NOLOAD), nullptr);
  EXPECT_EQ(dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD), nullptr);
  EXPECT_EQ(dlopen("libcudart.so.12", RTLD_NOW | RTLD_NOLOAD), nullptr);
}

// Copies `bytes` to the device and back through a stream and a fence.
void RoundTrip(Stager& stager, const std::vector<char>& bytes) {
  auto device = stager.AllocateDevice(bytes.size());
  ASSERT_TRUE(device.ok()) << device.error().message;
  auto pinned = stager.AllocatePinned(bytes.size());
  ASSERT_TRUE(pinned.ok()) << pinned.error().message;
  std::copy(bytes.begin(), bytes.end(), static_cast<char*>(*pinned));
  auto stream = stager.CreateStream();
  ASSERT_TRUE(stream.ok()) << stream.error().message;
  ASSERT_TRUE(stager.CopyToDevice(*device, *pinned, bytes.size(), *stream).ok());
  auto fence = stager.Fence(*stream);
  ASSERT_TRUE(fence.ok()) << fence.error().message;
  ASSERT_TRUE(stager.Wait(*fence).ok());
  std::vector<char> back(bytes.size());
  ASSERT_TRUE(stager.CopyToHost(back.data(), *device, back.size()).ok());
  EXPECT_EQ(back, bytes);
  stager.DestroyStream(*stream);
  stager.FreePinned(*pinned);
  stager.FreeDevice(*device);
}

TEST_F(CudaDriver, MovesBytesOnTheThreadThatOpenedItAndOnAnyOther) {
  auto stager = MakeDeviceStager();
  ASSERT_TRUE(stager->on_device()) << stager->description();
  std::vector<char> bytes(1 << 16);
  std::iota(bytes.begin(), bytes.end(), 0);
  RoundTrip(*stager, bytes);
  // The driver's current context is per thread; a client thread never made one current.
  std::thread other([&] { RoundTrip(*stager, bytes); });
  other.join();
}

TEST_F(CudaDriver, RegistersHostMemoryWithTheDriver) {
  auto stager = MakeDeviceStager();
  ASSERT_TRUE(stager->on_device()) << stager->description();
  std::vector<char> region(1 << 20);
  const size_t before = RegisteredBytes();
  std::thread other([&] { ASSERT_TRUE(stager->RegisterHost(region.data(), region.size()).ok()); });
  other.join();
  EXPECT_EQ(RegisteredBytes() - before, region.size());
  stager->UnregisterHost(region.data());
}

}  // namespace
}  // namespace gpufs::gpu
