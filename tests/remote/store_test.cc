// ObjectStore against real servers on loopback: a Ceph S3 store (radosgw), a fault proxy in
// front of it and an nginx origin, brought up by run_store_test.py, which says where they
// are in GPUFS_TEST_* variables. Without them every test skips, saying so.
//
// Each test keeps to its own key prefix (its name), so tests never see each other's objects.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"
#include "source/member_digests.h"
#include "source/remote/credentials/credentials.h"
#include "source/remote/location.h"
#include "source/remote/transfer/object_store.h"
#include "tests/remote/server_control.h"
#include "tests/unit/temp_dir.h"

namespace gpufs::remote {
namespace {

using testing::Control;
using testing::EnvOr;
using testing::ObjectPath;

// Bytes that differ with `seed` and position, so a range from the wrong place is caught.
std::string Pattern(size_t size, uint32_t seed) {
  std::string bytes(size, '\0');
  uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (char& c : bytes) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    c = static_cast<char>(state);
  }
  return bytes;
}

Result<size_t> GetSync(ObjectStore& store, GetRequest request) {
  std::promise<Result<size_t>> promise;
  auto future = promise.get_future();
  store.Get(std::move(request), [&](Result<size_t> r) { promise.set_value(std::move(r)); });
  return future.get();
}

uint64_t Stat(const ObjectStore& store, const char* key) {
  return store.Stats()[key].get<uint64_t>();
}

// Many ranged GETs in flight at once, each checked against `data` when all are done.
struct RangeCheck {
  std::string name;
  const std::string* data = nullptr;
  uint64_t offset = 0;
  std::string buffer;
  std::optional<Result<size_t>> result;
};

void ReadAllAndCheck(const std::vector<ObjectStore*>& stores, std::vector<RangeCheck>& reads) {
  std::mutex mu;
  std::condition_variable all_done;
  size_t left = reads.size();
  for (size_t i = 0; i < reads.size(); ++i) {
    RangeCheck& read = reads[i];
    GetRequest request{read.name, read.offset, read.buffer.size(), read.buffer.data(),
                       std::nullopt};
    stores[i % stores.size()]->Get(std::move(request), [&](Result<size_t> r) {
      std::lock_guard lock(mu);
      read.result = std::move(r);
      if (--left == 0) all_done.notify_all();
    });
  }
  std::unique_lock lock(mu);
  all_done.wait(lock, [&] { return left == 0; });
  for (const RangeCheck& read : reads) {
    ASSERT_TRUE(read.result->ok()) << read.result->error().message;
    EXPECT_EQ(**read.result, read.buffer.size());
    ASSERT_EQ(read.buffer, read.data->substr(read.offset, read.buffer.size()))
        << read.name << " at " << read.offset;
  }
}

// `count` random ranges (and the first and last bytes) of the objects named in `objects`.
std::vector<RangeCheck> RandomRanges(const std::map<std::string, std::string>& objects,
                                     size_t count, uint32_t seed = 7) {
  std::mt19937 random(seed);
  std::vector<RangeCheck> reads;
  for (const auto& [name, data] : objects) {
    reads.push_back({name, &data, 0, std::string(1, '\0'), {}});
    reads.push_back({name, &data, data.size() - 1, std::string(1, '\0'), {}});
    reads.push_back({name, &data, 0, std::string(data.size(), '\0'), {}});
  }
  auto it = objects.begin();
  for (size_t i = 0; i < count; ++i, ++it) {
    if (it == objects.end()) it = objects.begin();
    const uint64_t offset = random() % it->second.size();
    const size_t length = 1 + random() % std::min<uint64_t>(256 << 10, it->second.size() - offset);
    reads.push_back({it->first, &it->second, offset, std::string(length, '\0'), {}});
  }
  return reads;
}

// Starts a server again however the test ends, for the tests after it.
class StartAgain {
 public:
  explicit StartAgain(std::string path) : path_(std::move(path)) {}
  ~StartAgain() {
    const testing::ControlAnswer answer = Control("POST", path_);
    EXPECT_TRUE(answer.ok()) << "cannot " << path_ << ": " << answer.body;
  }

 private:
  std::string path_;
};

// --- S3 ------------------------------------------------------------------------------

class S3Store : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EnvOr("GPUFS_TEST_S3_ENDPOINT").empty()) {
      GTEST_SKIP() << "no S3 store: GPUFS_TEST_S3_ENDPOINT is unset "
                      "(tests/remote/run_store_test.py starts one)";
    }
    bucket_ = EnvOr("GPUFS_TEST_S3_BUCKET");
    root_ = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/";
  }

  // The environment the AWS tools would be given for the test store.
  std::map<std::string, std::string> AwsEnv(const std::string& endpoint_var) const {
    return {{"AWS_ACCESS_KEY_ID", EnvOr("GPUFS_TEST_S3_ACCESS_KEY")},
            {"AWS_SECRET_ACCESS_KEY", EnvOr("GPUFS_TEST_S3_SECRET_KEY")},
            {"AWS_REGION", EnvOr("GPUFS_TEST_S3_REGION")},
            {"AWS_ENDPOINT_URL", EnvOr(endpoint_var.c_str())}};
  }

  // The test's folder of the bucket, as a mount would resolve it.
  StoreConfig Config(const std::string& endpoint_var = "GPUFS_TEST_S3_ENDPOINT") const {
    Result<Location> location =
        ResolveLocation("s3://" + bucket_ + "/" + root_, {}, AwsEnv(endpoint_var));
    EXPECT_TRUE(location.ok()) << location.error().message;
    EXPECT_EQ(location->config.root, root_);
    EXPECT_TRUE(location->leaf.empty());
    return location->config;
  }

  // Stores `data` as the test's `name`; returns the ETag as S3 sends it (quoted).
  std::string Put(const std::string& name, const std::string& data) const {
    const testing::ControlAnswer answer = Control("PUT", ObjectPath(root_ + name), data);
    EXPECT_TRUE(answer.ok()) << "cannot store " << name << ": " << answer.body;
    return "\"" + answer.body + "\"";
  }

  std::string bucket_;
  std::string root_;
};

TEST(ObjectStoreNames, DescribeNamesObjectsInFull) {
  StoreConfig s3;
  s3.scheme = Scheme::kS3;
  s3.bucket = "b";
  s3.root = "train/";
  EXPECT_EQ(ObjectStore(s3).Describe("x.tar"), "s3://b/train/x.tar");
  StoreConfig http;
  http.endpoint = "http://127.0.0.1:1";
  http.root = "/data/";
  EXPECT_EQ(ObjectStore(http).Describe("x.tar"), "http://127.0.0.1:1/data/x.tar");
}

TEST_F(S3Store, HeadGivesSizeAndEtag) {
  const std::string etag = Put("obj", Pattern(100'003, 1));
  ObjectStore store(Config());
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->name, "obj");
  EXPECT_EQ(info->size, 100'003u);
  EXPECT_EQ(info->etag, etag);
  EXPECT_EQ(store.Stats()["kind"], "s3");
}

TEST_F(S3Store, RangedGetsAreByteExact) {
  std::map<std::string, std::string> objects;
  for (uint32_t i = 0; i < 4; ++i) {
    objects["blob-" + std::to_string(i)] = Pattern((1 << 20) + 37 * i, i);
    Put("blob-" + std::to_string(i), objects["blob-" + std::to_string(i)]);
  }
  StoreConfig config = Config();
  config.connections = 8;
  ObjectStore store(config);
  std::vector<RangeCheck> reads = RandomRanges(objects, 300);
  ReadAllAndCheck({&store}, reads);
  EXPECT_EQ(Stat(store, "errors"), 0u);
  EXPECT_EQ(Stat(store, "in_flight"), 0u);
  EXPECT_GE(Stat(store, "requests"), reads.size());
}

// The transfers run on several threads, each with its share of the connections, and every
// one of them serves requests.
TEST_F(S3Store, RequestsAreServedByEveryTransferThread) {
  const std::string data = Pattern(2 << 20, 9);
  Put("spread", data);
  StoreConfig config = Config();
  config.connections = 6;
  config.transfer_threads = 3;
  ObjectStore store(config);
  std::vector<RangeCheck> reads = RandomRanges({{"spread", data}}, 200);
  for (RangeCheck& read : reads) read.data = &data;
  ReadAllAndCheck({&store}, reads);
  const nlohmann::json threads = store.Stats()["transfer_threads"];
  ASSERT_EQ(threads.size(), 3u);
  uint64_t answered = 0;
  for (const nlohmann::json& count : threads) {
    EXPECT_GT(count.get<uint64_t>(), 0u) << threads.dump();
    answered += count.get<uint64_t>();
  }
  EXPECT_EQ(answered, reads.size());
  EXPECT_EQ(Stat(store, "errors"), 0u);
  EXPECT_EQ(Stat(store, "in_flight"), 0u);
}

// No more threads than connections: each thread needs one.
TEST_F(S3Store, TransferThreadsAreNoMoreThanConnections) {
  StoreConfig config = Config();
  config.connections = 2;
  config.transfer_threads = 8;
  ObjectStore store(config);
  EXPECT_EQ(store.Stats()["transfer_threads"].size(), 2u);
}

// A region learned from a wrong-region answer on one transfer thread signs the requests of
// every other: each of them is sent once, not refused first.
TEST_F(S3Store, ARegionLearnedOnOneThreadSignsOnEvery) {
  const std::string proxy_region = EnvOr("GPUFS_TEST_S3_REGION_PROXY_REGION");
  if (proxy_region.empty()) GTEST_SKIP() << "no region proxy: GPUFS_TEST_S3_REGION_PROXY is unset";
  Put("far", "far away");
  StoreConfig config = Config("GPUFS_TEST_S3_REGION_PROXY");
  ASSERT_NE(config.region, proxy_region);
  config.connections = 4;
  config.transfer_threads = 4;
  ObjectStore store(config);
  ASSERT_TRUE(store.HeadSync("far").ok());
  EXPECT_EQ(store.Region(), proxy_region);
  EXPECT_EQ(Stat(store, "requests"), 2u);  // refused, then signed for the bucket's region
  constexpr uint64_t kHeads = 12;
  for (uint64_t i = 0; i < kHeads; ++i) {
    Result<ObjectInfo> info = store.HeadSync("far");
    ASSERT_TRUE(info.ok()) << info.error().message;
    EXPECT_EQ(info->size, 8u);
  }
  EXPECT_EQ(Stat(store, "requests"), 2 + kHeads);
  const nlohmann::json stats = store.Stats();  // the loop's range lives in it
  for (const nlohmann::json& count : stats["transfer_threads"]) {
    EXPECT_GT(count.get<uint64_t>(), 0u);
  }
}

TEST_F(S3Store, GetWithExpectedInfoReadsWhileUnchanged) {
  const std::string data = Pattern(50'000, 2);
  Put("obj", data);
  ObjectStore store(Config());
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  std::string buffer(1000, '\0');
  Result<size_t> got = GetSync(store, {"obj", 49'000, 1000, buffer.data(), *info});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(buffer, data.substr(49'000));
}

TEST_F(S3Store, ReadPastTheEndFailsNamingTheObject) {
  Put("obj", Pattern(1000, 3));
  ObjectStore store(Config());
  std::string buffer(100, '\x5A');
  Result<size_t> got = GetSync(store, {"obj", 950, 100, buffer.data(), std::nullopt});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, EIO);
  EXPECT_NE(got.error().message.find(store.Describe("obj")), std::string::npos)
      << got.error().message;
}

TEST_F(S3Store, GetWholeReadsSmallObjectsAndRefusesLargerOnes) {
  const std::string data = Pattern(10'000, 4);
  Put("index", data);
  ObjectStore store(Config());
  Result<std::string> whole = store.GetWhole("index", 10'000);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(*whole, data);
  Result<std::string> refused = store.GetWhole("index", 9'999);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, EFBIG);
  EXPECT_NE(refused.error().message.find(store.Describe("index")), std::string::npos);
}

TEST_F(S3Store, ListReturnsEveryKeyAcrossPages) {
  std::map<std::string, size_t> expected;
  const std::vector<std::string> odd = {"a b",    "plus+sign", "amp&er", "caf\xC3\xA9", "x/y/z",
                                        "pct%41", "q?uery",    "lt<gt>", "tilde~",      "eq=1"};
  for (size_t i = 0; i < 23; ++i) {
    // (Appended piece by piece: GCC 12 warns of a false overlap in "k" + to_string(..).)
    std::string name = "sub/";
    name += i < odd.size() ? odd[i] : std::to_string(100 + i).insert(0, 1, 'k');
    Put(name, Pattern(i + 1, static_cast<uint32_t>(i)));
    expected[name] = i + 1;
  }
  Put("other/not-listed", "x");
  StoreConfig config = Config();
  config.list_page_size = 4;
  ObjectStore store(config);
  Result<std::vector<ObjectInfo>> listed = store.List("sub/");
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  std::map<std::string, size_t> got;
  for (const ObjectInfo& info : *listed) {
    got[info.name] = info.size;
    EXPECT_FALSE(info.etag.empty()) << info.name;
  }
  EXPECT_EQ(got, expected);
  EXPECT_GE(Stat(store, "requests"), 6u);  // 23 keys, 4 a page

  Result<std::vector<ObjectInfo>> everything = store.List("");
  ASSERT_TRUE(everything.ok()) << everything.error().message;
  EXPECT_EQ(everything->size(), expected.size() + 1);
}

TEST_F(S3Store, OverwrittenObjectFailsNamingItAndLeavesTheBufferAlone) {
  Put("obj", Pattern(65'536, 5));
  ObjectStore store(Config());
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  Put("obj", Pattern(65'536, 6));  // same size, other bytes
  std::string buffer(4096, '\xEE');
  Result<size_t> got = GetSync(store, {"obj", 4096, 4096, buffer.data(), *info});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, EIO);
  EXPECT_NE(got.error().message.find(store.Describe("obj")), std::string::npos)
      << got.error().message;
  EXPECT_NE(got.error().message.find("changed since mount"), std::string::npos)
      << got.error().message;
  EXPECT_EQ(buffer, std::string(4096, '\xEE'));
}

TEST_F(S3Store, DeletedObjectFailsNamingIt) {
  Put("obj", Pattern(10'000, 7));
  ObjectStore store(Config());
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  ASSERT_TRUE(Control("DELETE", ObjectPath(root_ + "obj")).ok());
  std::string buffer(100, '\xEE');
  Result<size_t> got = GetSync(store, {"obj", 0, 100, buffer.data(), *info});
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.error().code == ENOENT || got.error().code == EIO) << got.error().code;
  EXPECT_NE(got.error().message.find(store.Describe("obj")), std::string::npos)
      << got.error().message;
  EXPECT_EQ(buffer, std::string(100, '\xEE'));
  Result<ObjectInfo> gone = store.HeadSync("obj");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, ENOENT);
  EXPECT_EQ(Stat(store, "errors"), 2u);
}

TEST_F(S3Store, WrongSecretGivesTheStoresCodeAndNeverTheSecret) {
  Put("obj", "bytes");
  StoreConfig config = Config();
  Credentials keys = *config.credentials->Current();
  const std::string right = keys.secret_key;
  std::string wrong = right;
  wrong.replace(0, 5, "Wrong");
  keys.secret_key = wrong;
  config.credentials = CredentialProvider::Fixed(keys);
  ObjectStore store(config);
  Result<std::string> whole = store.GetWhole("obj", 100);
  ASSERT_FALSE(whole.ok());
  const std::string& message = whole.error().message;
  EXPECT_EQ(whole.error().code, EACCES);
  EXPECT_NE(message.find("SignatureDoesNotMatch"), std::string::npos) << message;
  EXPECT_NE(message.find(store.Describe("obj")), std::string::npos) << message;
  EXPECT_EQ(message.find(wrong), std::string::npos);
  EXPECT_EQ(message.find(right), std::string::npos);
  EXPECT_EQ(store.Stats().dump().find(wrong), std::string::npos);
  std::string buffer(5, '\0');
  Result<size_t> got = GetSync(store, {"obj", 0, 5, buffer.data(), std::nullopt});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.error().message.find("SignatureDoesNotMatch"), std::string::npos)
      << got.error().message;
}

TEST_F(S3Store, MissingBucketIsNamed) {
  StoreConfig config = Config();
  config.bucket = "gpufs-no-such-bucket";
  ObjectStore store(config);
  Result<std::string> whole = store.GetWhole("obj", 100);
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.error().code, ENOENT);
  EXPECT_NE(whole.error().message.find("NoSuchBucket"), std::string::npos) << whole.error().message;
  EXPECT_NE(whole.error().message.find("s3://gpufs-no-such-bucket/"), std::string::npos)
      << whole.error().message;
  Result<std::vector<ObjectInfo>> listed = store.List("");
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.error().message.find("NoSuchBucket"), std::string::npos)
      << listed.error().message;
}

TEST_F(S3Store, ProfileCredentialsFromTheSharedFileSign) {
  Put("obj", "profile bytes");
  TempDir home;
  std::filesystem::create_directories(home.path() / ".aws");
  std::ofstream(home.path() / ".aws" / "credentials")
      << "[other]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n"
      << "[test]\naws_access_key_id = " << EnvOr("GPUFS_TEST_S3_ACCESS_KEY")
      << "\naws_secret_access_key = " << EnvOr("GPUFS_TEST_S3_SECRET_KEY") << "\n";
  std::ofstream(home.path() / ".aws" / "config")
      << "[profile test]\nregion = " << EnvOr("GPUFS_TEST_S3_REGION")
      << "\nendpoint_url = " << EnvOr("GPUFS_TEST_S3_ENDPOINT") << "\n";
  Result<Location> location = ResolveLocation("s3://" + bucket_ + "/" + root_ + "obj", {},
                                              {{"HOME", home.path()}, {"AWS_PROFILE", "test"}});
  ASSERT_TRUE(location.ok()) << location.error().message;
  EXPECT_EQ(location->leaf, "obj");
  ObjectStore store(location->config);
  Result<std::string> whole = store.GetWhole(location->leaf, 100);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(*whole, "profile bytes");
}

TEST_F(S3Store, StoppedServerFailsWithinTheBudgetThenReadsAgain) {
  const std::string data = Pattern(20'000, 8);
  Put("obj", data);
  StoreConfig config = Config();
  config.max_attempts = 4;
  config.retry_budget = std::chrono::milliseconds(3'000);
  config.deadlines.connect = std::chrono::milliseconds(1'000);
  ObjectStore store(config);
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  {
    StartAgain start_again("/s3/start");
    ASSERT_TRUE(Control("POST", "/s3/stop").ok());
    std::string buffer(100, '\0');
    Result<size_t> got = GetSync(store, {"obj", 0, 100, buffer.data(), *info});
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.error().code, EIO);
    EXPECT_NE(got.error().message.find(store.Describe("obj")), std::string::npos)
        << got.error().message;
    EXPECT_NE(got.error().message.find("gave up"), std::string::npos) << got.error().message;
    EXPECT_GE(Stat(store, "retries"), 1u);
    EXPECT_EQ(Stat(store, "errors"), 1u);
  }
  std::string buffer(100, '\0');
  Result<size_t> got = GetSync(store, {"obj", 1000, 100, buffer.data(), *info});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(buffer, data.substr(1000, 100));
}

// --retry-seconds is a deadline, not a count: a store that refuses every connection is
// tried for the whole budget. Five retries take at most 0.1+0.2+0.4+0.8+1.6 s, so a budget
// of 4 s holds a sixth whatever the draws, past the five attempts of a count.
TEST_F(S3Store, RefusingServerIsRetriedUntilTheDeadlineNotForACount) {
  using namespace std::chrono_literals;
  Put("obj", "x");
  StoreConfig config = Config();
  config.retry_budget = 4'000ms;
  ObjectStore store(config);
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  StartAgain start_again("/s3/start");
  ASSERT_TRUE(Control("POST", "/s3/stop").ok());
  std::string buffer(1, '\0');
  const auto start = std::chrono::steady_clock::now();
  Result<size_t> got = GetSync(store, {"obj", 0, 1, buffer.data(), *info});
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, ETIMEDOUT);  // the store, not one answer
  EXPECT_NE(got.error().message.find("the retry deadline"), std::string::npos)
      << got.error().message;
  EXPECT_GE(elapsed, 4'000ms);
  EXPECT_GE(Stat(store, "retries"), 6u);
}

// A read asked again right after its give-up makes one attempt: EIO (not the deadline's
// ETIMEDOUT) at once while the store is still away, the bytes once it is back.
TEST_F(S3Store, OneAttemptIsNotRetried) {
  Put("obj", "x");
  StoreConfig config = Config();
  ObjectStore store(config);
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  std::string buffer(1, '\0');
  {
    StartAgain start_again("/s3/start");
    ASSERT_TRUE(Control("POST", "/s3/stop").ok());
    GetRequest request{"obj", 0, 1, buffer.data(), *info};
    request.one_attempt = true;
    Result<size_t> got = GetSync(store, request);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.error().code, EIO) << got.error().message;
    EXPECT_EQ(Stat(store, "retries"), 0u);
  }
  GetRequest request{"obj", 0, 1, buffer.data(), *info};
  request.one_attempt = true;
  Result<size_t> got = GetSync(store, request);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(buffer, "x");
}

TEST_F(S3Store, SlowDownIsRetried) {
  const std::string data = Pattern(20'000, 9);
  Put("obj", data);
  ObjectStore store(Config("GPUFS_TEST_S3_PROXY"));
  const uint64_t injected_before = std::stoull(Control("GET", "/proxy/injected").body);
  ASSERT_TRUE(Control("POST", "/proxy/set?fail_next=2&fail_status=503").ok());
  std::string buffer(500, '\0');
  Result<size_t> got = GetSync(store, {"obj", 100, 500, buffer.data(), std::nullopt});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(buffer, data.substr(100, 500));
  EXPECT_EQ(std::stoull(Control("GET", "/proxy/injected").body), injected_before + 2);
  EXPECT_EQ(Stat(store, "retries"), 2u);
  EXPECT_EQ(Stat(store, "requests"), 3u);
  EXPECT_EQ(Stat(store, "errors"), 0u);
}

TEST_F(S3Store, SlowDownPastTheAttemptsIsEioWithTheStoresWords) {
  Put("obj", "x");
  StoreConfig config = Config("GPUFS_TEST_S3_PROXY");
  config.max_attempts = 3;
  ObjectStore store(config);
  ASSERT_TRUE(Control("POST", "/proxy/set?fail_next=3&fail_status=503").ok());
  Result<std::string> whole = store.GetWhole("obj", 10);
  Control("POST", "/proxy/set?fail_next=0");
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.error().code, EIO);
  EXPECT_NE(whole.error().message.find("SlowDown"), std::string::npos) << whole.error().message;
  EXPECT_NE(whole.error().message.find("3 attempts"), std::string::npos) << whole.error().message;
  EXPECT_EQ(Stat(store, "retries"), 2u);
}

TEST_F(S3Store, StalledServerIsRetriedThenEio) {
  Put("obj", "x");
  StoreConfig config = Config("GPUFS_TEST_S3_PROXY");
  config.max_attempts = 2;
  config.deadlines.idle = std::chrono::milliseconds(1'000);
  ObjectStore store(config);
  ASSERT_TRUE(Control("POST", "/proxy/set?delay_ms=4000").ok());
  std::string buffer(1, '\0');
  Result<size_t> got = GetSync(store, {"obj", 0, 1, buffer.data(), std::nullopt});
  Control("POST", "/proxy/set?delay_ms=0");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, EIO);
  EXPECT_NE(got.error().message.find(store.Describe("obj")), std::string::npos)
      << got.error().message;
  EXPECT_NE(got.error().message.find("2 attempts"), std::string::npos) << got.error().message;
  EXPECT_EQ(Stat(store, "retries"), 1u);
}

TEST_F(S3Store, TricklingServerMissesEachDeadlineThenEio) {
  using namespace std::chrono_literals;
  const std::string data = Pattern(20'000, 11);
  Put("obj", data);
  StoreConfig config = Config("GPUFS_TEST_S3_PROXY");
  config.max_attempts = 2;
  config.retry_budget = 8'000ms;  // room for the second attempt on a loaded machine
  // Each attempt: 1 s to connect, 1 s more and 4 KB at 1 MiB/s, about 2 s in all; the
  // server sends 2 bytes a second, never idle for the 10 s curl watches.
  config.deadlines = TransferDeadlines{1'000ms, 10'000ms, 1'000ms, 1 << 20};
  ObjectStore store(config);
  ASSERT_TRUE(Control("POST", "/proxy/set?rate_bytes_per_s=2").ok());
  std::string buffer(4'000, '\0');
  const auto start = std::chrono::steady_clock::now();
  Result<size_t> got = GetSync(store, {"obj", 0, 4'000, buffer.data(), std::nullopt});
  const auto elapsed = std::chrono::steady_clock::now() - start;
  Control("POST", "/proxy/set?rate_bytes_per_s=0");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, EIO);
  EXPECT_NE(got.error().message.find("deadline"), std::string::npos) << got.error().message;
  EXPECT_NE(got.error().message.find("2 attempts"), std::string::npos) << got.error().message;
  EXPECT_EQ(Stat(store, "retries"), 1u);
  // Within the retry budget plus one attempt's deadline; generous, as it checks no hang.
  EXPECT_LT(elapsed, 8s + 2s + 20s);
}

TEST_F(S3Store, ClosingFailsWhatIsInFlight) {
  Put("obj", Pattern(1000, 10));
  std::atomic<int> ok{0}, cancelled{0}, other{0};
  {
    StoreConfig config = Config("GPUFS_TEST_S3_PROXY");
    config.connections = 4;  // the rest wait in the store's queue
    ASSERT_TRUE(Control("POST", "/proxy/set?delay_ms=5000").ok());
    ObjectStore store(config);
    std::vector<std::string> buffers(20, std::string(10, '\0'));
    for (std::string& buffer : buffers) {
      store.Get({"obj", 0, 10, buffer.data(), std::nullopt}, [&](Result<size_t> r) {
        if (r.ok()) {
          ++ok;
        } else if (r.error().code == ECANCELED) {
          ++cancelled;
        } else {
          ++other;
        }
      });
    }
  }  // the store closes with every read still queued or waiting for the proxy
  Control("POST", "/proxy/set?delay_ms=0");
  EXPECT_EQ(ok + cancelled + other, 20);
  EXPECT_GE(cancelled, 16);
  EXPECT_EQ(other, 0);
}

// --- HTTP ----------------------------------------------------------------------------

class HttpStore : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EnvOr("GPUFS_TEST_HTTP_URL").empty()) {
      GTEST_SKIP() << "no HTTP origin: GPUFS_TEST_HTTP_URL is unset "
                      "(tests/remote/run_store_test.py starts one)";
    }
    folder_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(Path(""));
  }

  std::filesystem::path Path(const std::string& name) const {
    return std::filesystem::path(EnvOr("GPUFS_TEST_HTTP_ROOT")) / folder_ / name;
  }

  void Write(const std::string& name, const std::string& data) const {
    std::filesystem::create_directories(Path(name).parent_path());
    std::ofstream(Path(name), std::ios::binary) << data;
  }

  StoreConfig Config() const {
    Result<Location> location =
        ResolveLocation(EnvOr("GPUFS_TEST_HTTP_URL") + "/" + folder_ + "/", {}, {});
    EXPECT_TRUE(location.ok()) << location.error().message;
    EXPECT_EQ(location->config.root, "/" + folder_ + "/");
    return location->config;
  }

  std::string folder_;
};

TEST_F(HttpStore, HeadGivesSizeAndEtag) {
  Write("obj", Pattern(12'345, 11));
  ObjectStore store(Config());
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->size, 12'345u);
  EXPECT_FALSE(info->etag.empty());
  EXPECT_EQ(store.Stats()["kind"], "http");
}

TEST_F(HttpStore, RangedGetsAreByteExact) {
  std::map<std::string, std::string> objects;
  for (uint32_t i = 0; i < 3; ++i) {
    const std::string name = "d/blob " + std::to_string(i);  // a space, encoded in the URL
    objects[name] = Pattern((1 << 20) + 11 * i, 20 + i);
    Write(name, objects[name]);
  }
  ObjectStore store(Config());
  std::vector<RangeCheck> reads = RandomRanges(objects, 300);
  ReadAllAndCheck({&store}, reads);
  EXPECT_EQ(Stat(store, "errors"), 0u);
}

// One blob of three members with their SHA-256, as a pack's index gives them to the store.
std::shared_ptr<const MemberDigests> DigestsOf(const std::string& blob) {
  DatasetSpec spec;
  spec.index_file = "test";
  spec.classes = {"c"};
  spec.has_sha256 = true;
  spec.groups = {GroupSpec{"blob", 0, blob.size(), 0}};
  const uint64_t cuts[] = {0, 100'000, 250'000, blob.size()};
  for (uint32_t m = 0; m < 3; ++m) {
    spec.members.push_back(
        MemberSpec{"c/" + std::to_string(m), 0, 0, cuts[m], cuts[m + 1] - cuts[m], 0, m + 1});
    spec.members.back().sha256 = Sha256Of(blob.data() + cuts[m], cuts[m + 1] - cuts[m]);
  }
  return *MemberDigests::FromCatalog(*CatalogFromSpec(spec));
}

uint64_t PeerRequests(const ObjectStore& store) {
  return store.Stats()["peers"][0]["requests"].get<uint64_t>();
}

// A peer that changes the bytes it passes on, headers intact: each member it spoiled is
// counted and read from the store, and the read gets the store's bytes. A range that cuts
// a member, which could not be checked, never goes to a peer.
TEST_F(HttpStore, APeerThatChangesBytesIsCaughtAndTheStoresBytesRead) {
  const std::string lying = EnvOr("GPUFS_TEST_HTTP_LYING_PEER");
  if (lying.empty()) GTEST_SKIP() << "no lying peer: GPUFS_TEST_HTTP_LYING_PEER is unset";
  const std::string blob = Pattern(300'000, 41);
  Write("blob", blob);
  StoreConfig config = Config();
  config.peers.urls = {lying};
  config.peers.block = 64 << 10;
  ObjectStore store(config);
  Result<ObjectInfo> info = store.HeadSync("blob");
  ASSERT_TRUE(info.ok()) << info.error().message;
  const auto digests = DigestsOf(blob);
  std::string buffer(blob.size(), '\0');
  Result<size_t> got =
      GetSync(store, GetRequest{"blob", 0, blob.size(), buffer.data(), *info, digests, 0});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_TRUE(buffer == blob);
  EXPECT_EQ(Stat(store, "peer_mismatches"), 3u);
  EXPECT_GT(PeerRequests(store), 0u);
  EXPECT_FALSE(store.Stats()["peers"][0]["up"].get<bool>());  // skipped like a failed one

  const uint64_t asked = PeerRequests(store);
  std::string part(100'000, '\0');
  got = GetSync(store, GetRequest{"blob", 50'000, part.size(), part.data(), *info, digests, 0});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_TRUE(part == blob.substr(50'000, part.size()));
  EXPECT_EQ(PeerRequests(store), asked);
}

// The origin itself as the peer: honest bytes pass their check and are served.
TEST_F(HttpStore, AnHonestPeersBytesPassTheirCheck) {
  const std::string blob = Pattern(300'000, 42);
  Write("blob", blob);
  StoreConfig config = Config();
  config.peers.urls = {EnvOr("GPUFS_TEST_HTTP_URL")};
  config.peers.block = 64 << 10;
  ObjectStore store(config);
  Result<ObjectInfo> info = store.HeadSync("blob");
  ASSERT_TRUE(info.ok()) << info.error().message;
  std::string buffer(blob.size(), '\0');
  Result<size_t> got =
      GetSync(store, GetRequest{"blob", 0, blob.size(), buffer.data(), *info, DigestsOf(blob), 0});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_TRUE(buffer == blob);
  EXPECT_EQ(Stat(store, "peer_mismatches"), 0u);
  EXPECT_EQ(Stat(store, "peer_bytes"), blob.size());
  EXPECT_EQ(Stat(store, "bytes"), 0u);
}

TEST_F(HttpStore, GetWholeReadsAFile) {
  Write("index.json", "{\"files\": 3}");
  ObjectStore store(Config());
  Result<std::string> whole = store.GetWhole("index.json", 1 << 20);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(*whole, "{\"files\": 3}");
}

TEST_F(HttpStore, ListingNeedsS3) {
  ObjectStore store(Config());
  Result<std::vector<ObjectInfo>> listed = store.List("");
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.error().code, ENOTSUP);
  EXPECT_NE(listed.error().message.find("s3"), std::string::npos) << listed.error().message;
}

TEST_F(HttpStore, ChangedFileFailsNamingIt) {
  Write("obj", Pattern(30'000, 12));
  ObjectStore store(Config());
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  Write("obj", Pattern(30'001, 13));  // nginx's ETag is mtime-size: the size changes it
  std::string buffer(1000, '\xEE');
  Result<size_t> got = GetSync(store, {"obj", 0, 1000, buffer.data(), *info});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, EIO);
  EXPECT_NE(got.error().message.find(store.Describe("obj")), std::string::npos)
      << got.error().message;
  EXPECT_NE(got.error().message.find("changed since mount"), std::string::npos)
      << got.error().message;
  EXPECT_EQ(buffer, std::string(1000, '\xEE'));
}

TEST_F(HttpStore, MissingFileIsENOENT) {
  ObjectStore store(Config());
  std::string buffer(10, '\0');
  Result<size_t> got = GetSync(store, {"nothing", 0, 10, buffer.data(), std::nullopt});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, ENOENT);
  EXPECT_NE(got.error().message.find(store.Describe("nothing")), std::string::npos)
      << got.error().message;
}

TEST_F(HttpStore, StoppedServerFailsThenReadsAgain) {
  const std::string data = Pattern(5000, 14);
  Write("obj", data);
  StoreConfig config = Config();
  config.max_attempts = 3;
  config.retry_budget = std::chrono::milliseconds(2'000);
  ObjectStore store(config);
  std::string buffer(100, '\0');
  {
    StartAgain start_again("/http/start");
    ASSERT_TRUE(Control("POST", "/http/stop").ok());
    Result<size_t> got = GetSync(store, {"obj", 0, 100, buffer.data(), std::nullopt});
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.error().code, EIO);
    EXPECT_NE(got.error().message.find(store.Describe("obj")), std::string::npos)
        << got.error().message;
    EXPECT_GE(Stat(store, "retries"), 1u);
  }
  Result<size_t> got = GetSync(store, {"obj", 200, 100, buffer.data(), std::nullopt});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(buffer, data.substr(200, 100));
}

TEST_F(HttpStore, UnsignedS3RequestsReadAPublicFolder) {
  const std::string data = Pattern(3000, 15);
  Write("public/obj", data);
  LocationOptions options;
  options.endpoint = EnvOr("GPUFS_TEST_HTTP_URL");
  options.no_sign_request = true;
  // The origin serves the folder as a bucket would, path-style: /BUCKET/KEY.
  Result<Location> location = ResolveLocation("s3://" + folder_ + "/public/", options, {});
  ASSERT_TRUE(location.ok()) << location.error().message;
  ASSERT_FALSE(location->config.credentials);
  ObjectStore store(location->config);
  std::string buffer(100, '\0');
  Result<size_t> got = GetSync(store, {"obj", 2900, 100, buffer.data(), std::nullopt});
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(buffer, data.substr(2900));
  Result<ObjectInfo> info = store.HeadSync("obj");
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->size, 3000u);
}

TEST_F(S3Store, UnsignedRequestsToAPrivateBucketAreDenied) {
  Put("obj", "private");
  LocationOptions options;
  options.endpoint = EnvOr("GPUFS_TEST_S3_ENDPOINT");
  options.no_sign_request = true;
  Result<Location> location = ResolveLocation("s3://" + bucket_ + "/" + root_, options, {});
  ASSERT_TRUE(location.ok()) << location.error().message;
  ObjectStore store(location->config);
  Result<std::string> whole = store.GetWhole("obj", 100);
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.error().code, EACCES);
  EXPECT_NE(whole.error().message.find("AccessDenied"), std::string::npos) << whole.error().message;
}

// --- both ----------------------------------------------------------------------------

TEST_F(S3Store, ConcurrentReadsAcrossS3AndHttpFromManyThreads) {
  if (EnvOr("GPUFS_TEST_HTTP_URL").empty()) GTEST_SKIP() << "no HTTP origin";
  const std::string data = Pattern(3 << 20, 30);
  Put("shared", data);
  const std::filesystem::path folder = std::filesystem::path(EnvOr("GPUFS_TEST_HTTP_ROOT")) /
                                       "ConcurrentReadsAcrossS3AndHttpFromManyThreads";
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "shared", std::ios::binary) << data;
  ObjectStore s3(Config());
  Result<Location> http = ResolveLocation(
      EnvOr("GPUFS_TEST_HTTP_URL") + "/ConcurrentReadsAcrossS3AndHttpFromManyThreads/", {}, {});
  ASSERT_TRUE(http.ok()) << http.error().message;
  ObjectStore origin(http->config);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::map<std::string, std::string> objects = {{"shared", data}};
      std::vector<RangeCheck> reads = RandomRanges(objects, 150, t);
      for (RangeCheck& read : reads) read.data = &data;
      ReadAllAndCheck({&s3, &origin}, reads);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(Stat(s3, "errors"), 0u);
  EXPECT_EQ(Stat(origin, "errors"), 0u);
}

}  // namespace
}  // namespace gpufs::remote
