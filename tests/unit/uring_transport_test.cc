// What can be checked of FUSE over io_uring without a mount: how the kernel's switch is
// read and how many queues the kernel expects. The transport itself is exercised through
// real mounts (tests/mount/test_transport.py, and the whole mount suite on io_uring).
#include "fuse/uring_transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace gpufs {
namespace {

class Parameter : public ::testing::Test {
 protected:
  void SetUp() override {
    char folder[] = "/tmp/gpufs-uring-test-XXXXXX";
    ASSERT_NE(mkdtemp(folder), nullptr);
    folder_ = folder;
    path_ = folder_ + "/enable_uring";
  }
  void TearDown() override {
    std::remove(path_.c_str());
    rmdir(folder_.c_str());
  }
  void Write(const std::string& value) { std::ofstream(path_) << value << "\n"; }

  std::string folder_, path_;
};

TEST_F(Parameter, OnIsUsable) {
  Write("Y");
  EXPECT_EQ(UringUnavailable(path_.c_str()), "");
  Write("1");
  EXPECT_EQ(UringUnavailable(path_.c_str()), "");
}

TEST_F(Parameter, OffSaysHowToTurnItOn) {
  Write("N");
  const std::string why = UringUnavailable(path_.c_str());
  EXPECT_NE(why.find("is off in this kernel"), std::string::npos) << why;
  EXPECT_NE(why.find(path_ + " is N"), std::string::npos) << why;
  EXPECT_NE(why.find("echo Y > " + path_), std::string::npos) << why;
}

TEST_F(Parameter, MissingSaysWhatTheKernelNeeds) {
  const std::string why = UringUnavailable(path_.c_str());
  EXPECT_NE(why.find("has no FUSE over io_uring"), std::string::npos) << why;
  EXPECT_NE(why.find("6.14"), std::string::npos) << why;
}

TEST(UringQueues, OnePerPossibleCpu) {
  // The kernel indexes queues by CPU number and waits for every possible CPU's queue, so
  // there are at least as many as CPUs online.
  EXPECT_GE(UringTransport::PossibleCpus(), std::thread::hardware_concurrency());
  EXPECT_GE(UringTransport::PossibleCpus(), 1u);
}

}  // namespace
}  // namespace gpufs
