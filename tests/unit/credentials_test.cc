// The credential chain without a server: which source a mount would use from the
// environment and the AWS files, the refresh timing rules, and the parsers of what
// credential_process, IMDS, container endpoints and STS answer.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "source/remote/credentials/credential_chain.h"
#include "source/remote/credentials/credential_http.h"
#include "source/remote/credentials/credential_trust.h"
#include "source/remote/credentials/credentials.h"
#include "source/remote/credentials/sts.h"
#include "tests/unit/temp_dir.h"

namespace gpufs::remote {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

const WallClock::time_point kNoon = WallClock::from_time_t(1'800'000'000);

TEST(RefreshDue, LongLivedKeysRefreshFiveMinutesBeforeExpiry) {
  EXPECT_EQ(RefreshDue(kNoon, kNoon + minutes(60)), kNoon + minutes(55));
}

TEST(RefreshDue, ShortLivedKeysRefreshHalfwayThroughTheirLifetime) {
  EXPECT_EQ(RefreshDue(kNoon, kNoon + seconds(30)), kNoon + seconds(15));
  EXPECT_EQ(RefreshDue(kNoon, kNoon + minutes(8)), kNoon + minutes(4));
}

TEST(RefreshDue, KeysThatCameExpiredAreNotAskedForAgainAtOnce) {
  EXPECT_EQ(RefreshDue(kNoon, kNoon - seconds(5)), kNoon + minutes(1));
}

TEST(RefreshBackoff, DoublesToAMinuteAndNeverPastHalfTheTimeLeft) {
  EXPECT_EQ(RefreshBackoff(1, kNoon, std::nullopt), seconds(1));
  EXPECT_EQ(RefreshBackoff(3, kNoon, std::nullopt), seconds(4));
  EXPECT_EQ(RefreshBackoff(30, kNoon, std::nullopt), seconds(60));
  EXPECT_EQ(RefreshBackoff(30, kNoon, kNoon + seconds(20)), seconds(10));
  EXPECT_EQ(RefreshBackoff(30, kNoon, kNoon + seconds(1)), seconds(1));
}

Reply Refusal(long status, const std::string& code) {
  Reply reply;
  reply.status = status;
  reply.text = "<Error><Code>" + code + "</Code><Message>m</Message></Error>";
  return reply;
}

TEST(CredentialRefusal, ExpiredUnknownOrSuspendedKeysAreRenewed) {
  for (const char* code : {"ExpiredToken", "InvalidAccessKeyId", "InvalidToken", "UserSuspended"}) {
    EXPECT_TRUE(IsCredentialRefusal(Refusal(403, code), false)) << code;
  }
  EXPECT_FALSE(IsCredentialRefusal(Refusal(403, "AccessDenied"), false));
  EXPECT_TRUE(IsCredentialRefusal(Refusal(403, "AccessDenied"), true));  // radosgw's expiry
  EXPECT_FALSE(IsCredentialRefusal(Refusal(404, "NoSuchKey"), true));
  EXPECT_FALSE(IsCredentialRefusal(Refusal(400, "ExpiredToken"), true));
}

TEST(IsoTime, ParsesWhatStsAndImdsWrite) {
  const auto plain = ParseIsoTime("2027-01-15T08:00:00Z");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(FormatIsoTime(*plain), "2027-01-15T08:00:00Z");
  const auto fraction = ParseIsoTime("2027-01-15T08:00:00.048437824Z");
  ASSERT_TRUE(fraction.ok()) << fraction.error().message;
  EXPECT_EQ(*fraction, *plain);
  EXPECT_TRUE(ParseIsoTime("2027-01-15T08:00:00+00:00").ok());
  EXPECT_FALSE(ParseIsoTime("2027-01-15T08:00:00+02:00").ok());
  EXPECT_FALSE(ParseIsoTime("tomorrow").ok());
}

TEST(CredentialJson, VersionOneOfCredentialProcess) {
  const auto set = ParseCredentialJson(
      R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SK", "SessionToken": "T",
          "Expiration": "2027-01-15T08:00:00Z"})",
      true);
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set->keys.access_key, "AK");
  EXPECT_EQ(set->keys.session_token, "T");
  ASSERT_TRUE(set->expires);
  EXPECT_EQ(FormatIsoTime(*set->expires), "2027-01-15T08:00:00Z");
}

TEST(CredentialJson, ErrorsSayWhatIsMissingButNeverAValue) {
  auto message = [](const char* text, bool version_one) {
    const auto set = ParseCredentialJson(text, version_one);
    return set.ok() ? std::string("ok") : set.error().message;
  };
  EXPECT_EQ(message(R"({"AccessKeyId": "AK", "SecretAccessKey": "S3CR"})", true),
            "its JSON has no \"Version\": 1");
  EXPECT_EQ(message(R"({"Version": 1, "AccessKeyId": "AK"})", true),
            "its JSON has no SecretAccessKey");
  EXPECT_EQ(message("not json", true), "the answer is not a JSON object");
  const std::string bad = message(R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "S3CR",
                  "Expiration": "soon"})",
                                  true);
  EXPECT_NE(bad.find("its Expiration"), std::string::npos) << bad;
  EXPECT_EQ(bad.find("S3CR"), std::string::npos) << bad;
  // IMDS and container endpoints call the session token "Token" and have no Version.
  const auto imds = ParseCredentialJson(
      R"({"Code": "Success", "AccessKeyId": "AK", "SecretAccessKey": "S", "Token": "T"})", false);
  ASSERT_TRUE(imds.ok()) << imds.error().message;
  EXPECT_EQ(imds->keys.session_token, "T");
  EXPECT_FALSE(imds->expires);
}

TEST(StsAnswer, CredentialsOrTheRefusalWithItsCode) {
  const auto set = ParseStsAnswer(
      200,
      "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>AK</AccessKeyId>"
      "<SecretAccessKey>SK</SecretAccessKey><SessionToken>T</SessionToken>"
      "<Expiration>2027-01-15T08:00:00Z</Expiration></Credentials></AssumeRoleResult>"
      "</AssumeRoleResponse>");
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set->keys.secret_key, "SK");
  EXPECT_TRUE(set->expires);
  const auto refused =
      ParseStsAnswer(403,
                     "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
                     "<Message>not trusted</Message></Error></ErrorResponse>");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message, "STS answered 403 AccessDenied: not trusted");
}

TEST(SplitCommand, SplitsAsAShellWould) {
  const auto words = SplitCommand(R"(/usr/bin/tool --name 'a b' "c \"d\"" e\ f)");
  ASSERT_TRUE(words.ok()) << words.error().message;
  EXPECT_EQ(*words, (std::vector<std::string>{"/usr/bin/tool", "--name", "a b", "c \"d\"", "e f"}));
  EXPECT_FALSE(SplitCommand("tool 'open").ok());
  EXPECT_FALSE(SplitCommand("   ").ok());
}

TEST(CredentialProcess, RunsTheProgramAndNamesItsFailure) {
  auto good = ProcessSource(
      R"(sh -c 'echo "{\"Version\": 1, \"AccessKeyId\": \"AK\", \"SecretAccessKey\": \"SK\"}"')",
      "profile 'p' in F");
  const auto set = good->Fetch();
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set->keys.access_key, "AK");
  auto bad = ProcessSource("sh -c 'echo broken >&2; exit 2'", "profile 'p' in F");
  const auto failed = bad->Fetch();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().message,
            "cannot get credentials from credential_process of profile 'p' in F: the program "
            "exited with status 2: broken");
}

// A source that counts its fetches and hands out a new key each time.
class CountingSource final : public CredentialSource {
 public:
  explicit CountingSource(std::optional<WallClock::duration> lifetime) : lifetime_(lifetime) {}
  Result<CredentialSet> Fetch() override {
    CredentialSet set{{"AK" + std::to_string(++fetches_), "SK", ""}, std::nullopt};
    if (lifetime_) set.expires = WallClock::now() + *lifetime_;
    return set;
  }
  std::string Describe() const override { return "counting"; }

 private:
  std::optional<WallClock::duration> lifetime_;
  int fetches_ = 0;
};

TEST(CredentialProvider, AskedForNewKeysFetchesThemOnItsThread) {
  auto provider = CredentialProvider::Start(std::make_unique<CountingSource>(std::nullopt));
  ASSERT_TRUE(provider.ok()) << provider.error().message;
  EXPECT_EQ((*provider)->Current()->access_key, "AK1");
  const uint64_t before = (*provider)->Attempts();
  (*provider)->RequestRefresh();
  while ((*provider)->Attempts() == before) std::this_thread::yield();
  EXPECT_EQ((*provider)->Current()->access_key, "AK2");
  const nlohmann::json stats = (*provider)->Stats();
  EXPECT_EQ(stats["source"], "counting");
  EXPECT_EQ(stats["refreshes"], 1);
  EXPECT_TRUE(stats["expires_in_s"].is_null());
}

TEST(CredentialProvider, ShortLivedKeysAreRefreshedBeforeTheyExpire) {
  auto provider = CredentialProvider::Start(std::make_unique<CountingSource>(seconds(2)));
  ASSERT_TRUE(provider.ok());
  EXPECT_LE((*provider)->Stats()["expires_in_s"].get<int64_t>(), 2);
  while ((*provider)->Current()->access_key == "AK1") std::this_thread::yield();  // at ~1 s
  EXPECT_EQ((*provider)->Current()->access_key, "AK2");
}

// Keys once, then only failures.
class FailingSource final : public CredentialSource {
 public:
  Result<CredentialSet> Fetch() override {
    if (fetched_++ == 0) return CredentialSet{{"AK", "SK", ""}, WallClock::now() + minutes(60)};
    return Fail(EACCES, "cannot get credentials from failing: down");
  }
  std::string Describe() const override { return "failing"; }

 private:
  int fetched_ = 0;
};

TEST(CredentialProvider, AFailedRefreshKeepsTheKeysItHas) {
  auto provider = CredentialProvider::Start(std::make_unique<FailingSource>());
  ASSERT_TRUE(provider.ok());
  const uint64_t before = (*provider)->Attempts();
  (*provider)->RequestRefresh();
  while ((*provider)->Attempts() == before) std::this_thread::yield();
  EXPECT_EQ((*provider)->Current()->access_key, "AK");
  const nlohmann::json stats = (*provider)->Stats();
  EXPECT_EQ(stats["refreshes"], 0);
  EXPECT_EQ(stats["refresh_failures"], 1);
  EXPECT_GT(stats["expires_in_s"].get<int64_t>(), 3000);
}

TEST(CredentialProvider, FixedKeysAreNeverRefreshed) {
  auto provider = CredentialProvider::Fixed({"AK", "SK", ""});
  const uint64_t before = provider->Attempts();
  provider->RequestRefresh();
  EXPECT_GT(provider->Attempts(), before);  // the asker is not left waiting
  EXPECT_EQ(provider->Current()->access_key, "AK");
}

// Which source the chain picks, with sources that would run a program or ask a server
// left unfetched: their refusal names them.
class Chain_ : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_.path() / name) << text;
  }
  Result<std::shared_ptr<CredentialProvider>> Resolve(Env env,
                                                      const std::string& profile = "default") {
    env["AWS_EC2_METADATA_DISABLED"] = "true";
    env_ = std::move(env);
    Result<AwsFiles> files =
        LoadAwsFiles((dir_.path() / "credentials").string(), (dir_.path() / "config").string());
    EXPECT_TRUE(files.ok());
    ChainInput input{&env_, profile, std::move(*files), "us-east-1", false, {}};
    looked_.clear();
    return ResolveCredentials(input, looked_);
  }
  std::string ErrorOf(Env env, const std::string& profile = "default") {
    auto provider = Resolve(std::move(env), profile);
    return provider.ok() ? "ok" : provider.error().message;
  }

  TempDir dir_;
  Env env_;
  std::vector<std::string> looked_;
  const Env keys_ = {{"AWS_ACCESS_KEY_ID", "AKENV"}, {"AWS_SECRET_ACCESS_KEY", "SKENV"}};
};

TEST_F(Chain_, EnvironmentKeysComeFirstAndAreNeverRefreshed) {
  Write("credentials", "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = s\n");
  Env env = keys_;
  env["AWS_WEB_IDENTITY_TOKEN_FILE"] = "/token";
  auto provider = Resolve(env);
  ASSERT_TRUE(provider.ok()) << provider.error().message;
  EXPECT_EQ((*provider)->Current()->access_key, "AKENV");
  EXPECT_FALSE((*provider)->Refreshable());
}

TEST_F(Chain_, WebIdentityComesBeforeTheProfile) {
  Write("credentials", "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = s\n");
  EXPECT_EQ(ErrorOf({{"AWS_WEB_IDENTITY_TOKEN_FILE", "/token"}, {"AWS_ROLE_ARN", "arn:r"}}),
            "cannot use AWS_WEB_IDENTITY_TOKEN_FILE: not fetched here");
  EXPECT_EQ(ErrorOf({{"AWS_WEB_IDENTITY_TOKEN_FILE", "/token"}}),
            "cannot use AWS_WEB_IDENTITY_TOKEN_FILE /token: AWS_ROLE_ARN is not set");
}

TEST_F(Chain_, ProfileKeysComeBeforeCredentialProcessAndTheContainer) {
  Write("config", "[default]\ncredential_process = /bin/keys\n");
  const Env container = {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c"}};
  EXPECT_NE(ErrorOf(container).find("cannot use the credential_process of profile 'default'"),
            std::string::npos);
  Write("credentials", "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = s\n");
  auto provider = Resolve(container);
  ASSERT_TRUE(provider.ok()) << provider.error().message;
  EXPECT_EQ((*provider)->Current()->access_key, "AKFILE");
  EXPECT_TRUE((*provider)->Refreshable());  // the file is watched
}

TEST_F(Chain_, TheContainerThenNothingWithWhereItLooked) {
  EXPECT_EQ(ErrorOf({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c"}}),
            "cannot use a container endpoint: not fetched here");
  EXPECT_NE(ErrorOf({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://192.0.2.1/c"}})
                .find("cannot use AWS_CONTAINER_CREDENTIALS_FULL_URI 'http://192.0.2.1/c': "
                      "plain http to 192.0.2.1, which is not loopback or the container agent"),
            std::string::npos);
  auto none = Resolve({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  ASSERT_EQ(looked_.size(), 3u);
  EXPECT_NE(looked_[1].find("AWS_CONTAINER_CREDENTIALS_FULL_URI"), std::string::npos);
}

TEST(ContainerSource, ARelativeUriIsOnTheContainerAgentAndWinsOverAFullOne) {
  const Env env = {{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc"},
                   {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c"}};
  auto source = ContainerSource(env);
  ASSERT_TRUE(source.ok()) << source.error().message;
  EXPECT_EQ((*source)->Describe(), "container endpoint http://169.254.170.2/v2/credentials/abc");
  auto none = ContainerSource({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

// Each way a URI could send the container's token to another host over plain http.
TEST(ContainerSource, UrisThatLeadElsewhereAreRefusedAndLoopbackIsUsed) {
  const auto error_of = [](const char* name, const char* value) {
    auto source = ContainerSource({{name, value}});
    return source.ok() ? std::string("ok") : source.error().message;
  };
  const char* kRelative = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";
  const char* kFull = "AWS_CONTAINER_CREDENTIALS_FULL_URI";
  EXPECT_EQ(error_of(kRelative, "@192.0.2.1:80/x"),
            "cannot use AWS_CONTAINER_CREDENTIALS_RELATIVE_URI '@192.0.2.1:80/x': it must be a "
            "path beginning with '/'");
  EXPECT_NE(error_of(kFull, "http://127.0.0.1@192.0.2.1/c").find("a user:password@"),
            std::string::npos);
  EXPECT_NE(error_of(kFull, "http://127.0.0.1:x@192.0.2.1/c").find("a user:password@"),
            std::string::npos);
  // A name that merely starts like a loopback address: not resolvable here, refused anyway.
  EXPECT_NE(error_of(kFull, "http://127.0.0.1.invalid/c")
                .find("cannot use AWS_CONTAINER_CREDENTIALS_FULL_URI 'http://127.0.0.1.invalid/c'"),
            std::string::npos);
  EXPECT_NE(error_of(kFull, "http://192.0.2.1:8080/c").find("which is not loopback"),
            std::string::npos);
  EXPECT_NE(error_of(kFull, "ftp://127.0.0.1/c").find("not an http:// or https:// URL"),
            std::string::npos);
  for (const char* fine :
       {"http://127.0.0.1:1/c", "http://127.9.9.9/c", "http://[::1]:1/c", "http://localhost:1/c",
        "http://169.254.170.23/v1/credentials", "https://creds.example.com/c"}) {
    EXPECT_EQ(error_of(kFull, fine), "ok") << fine;
  }
  EXPECT_EQ(error_of(kRelative, "/v2/credentials/abc"), "ok");
}

TEST_F(Chain_, StsOverPlainHttpToAnotherHostIsRefusedBeforeAnyTokenIsRead) {
  Write("config",
        "[default]\nrole_arn = arn:r\nweb_identity_token_file = /etc/shadow\nservices = s\n"
        "[services s]\nsts =\n  endpoint_url = http://192.0.2.1:8080\n");
  EXPECT_NE(ErrorOf({}).find("cannot use the sts endpoint_url of profile 'default' in " +
                             (dir_.path() / "config").string() +
                             " 'http://192.0.2.1:8080': plain http to 192.0.2.1"),
            std::string::npos)
      << ErrorOf({});
  EXPECT_NE(ErrorOf({{"AWS_ENDPOINT_URL_STS", "http://192.0.2.1"},
                     {"AWS_WEB_IDENTITY_TOKEN_FILE", "/etc/shadow"},
                     {"AWS_ROLE_ARN", "arn:r"}})
                .find("cannot use AWS_ENDPOINT_URL_STS 'http://192.0.2.1': plain http"),
            std::string::npos);
  // Loopback over http, and any host over https, are fine (refused here only for fetching).
  for (const char* fine : {"http://127.0.0.1:9000", "https://sts.example.com"}) {
    EXPECT_EQ(ErrorOf({{"AWS_ENDPOINT_URL_STS", fine},
                       {"AWS_WEB_IDENTITY_TOKEN_FILE", "/token"},
                       {"AWS_ROLE_ARN", "arn:r"}}),
              "cannot use AWS_WEB_IDENTITY_TOKEN_FILE: not fetched here");
  }
}

TEST_F(Chain_, AwsFilesOthersMayWriteAreRefusedWithTheFix) {
  Write("config", "[default]\ncredential_process = /bin/keys\n");
  const std::string config = (dir_.path() / "config").string();
  ASSERT_EQ(chmod(config.c_str(), 0664), 0);
  Result<AwsFiles> files = LoadAwsFiles("", config);
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.error().message, "cannot use the AWS config file " + config +
                                       ": others may write it (mode 0664); chmod go-w " + config);
  ASSERT_EQ(chmod(config.c_str(), 0644), 0);
  EXPECT_TRUE(LoadAwsFiles("", config).ok());
  if (geteuid() != 0) GTEST_SKIP() << "not root: cannot give the file to another user";
  ASSERT_EQ(chown(config.c_str(), 65534, 65534), 0);
  files = LoadAwsFiles("", config);
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.error().message.find("cannot use the AWS config file " + config +
                                       ": it is owned by uid 65534, neither you (uid 0) nor "
                                       "root; run gpufsd as the file's owner"),
            std::string::npos)
      << files.error().message;
}

TEST(TokenFile, IsARegularFileOfTrustedOwnerAndBounded) {
  TempDir dir;
  const std::string token = (dir.path() / "token").string();
  std::ofstream(token) << "header.payload.signature\n";
  auto read = ReadTokenFile(token);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(*read, "header.payload.signature");
  std::ofstream(token) << std::string(kMaxTokenFileBytes + 1, 'x');
  read = ReadTokenFile(token);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message, "cannot use the token file " + token + ": it holds more than " +
                                      std::to_string(kMaxTokenFileBytes) +
                                      " bytes, more than such a file ever needs");
  read = ReadTokenFile("/dev/zero");  // once read whole, growing the daemon until killed
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.error().message.find("/dev/zero: it is not a regular file"), std::string::npos);
  std::filesystem::create_symlink(token, dir.path() / "link");  // as Kubernetes mounts it
  std::ofstream(token) << "rotated";
  read = ReadTokenFile((dir.path() / "link").string());
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(*read, "rotated");
  if (geteuid() != 0) GTEST_SKIP() << "not root: cannot give the file to another user";
  ASSERT_EQ(chown(token.c_str(), 65534, 65534), 0);
  read = ReadTokenFile(token);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.error().message.find("it is owned by uid 65534"), std::string::npos);
}

TEST_F(Chain_, SourceProfileLoopsAreRefused) {
  Write("config",
        "[profile a]\nrole_arn = arn:a\nsource_profile = b\n"
        "[profile b]\nrole_arn = arn:b\nsource_profile = a\n");
  // With fetching off the first role would refuse before its source is followed; the loop
  // is found while the chain is built, before anything is fetched.
  env_ = {};
  Result<AwsFiles> files =
      LoadAwsFiles((dir_.path() / "credentials").string(), (dir_.path() / "config").string());
  ASSERT_TRUE(files.ok());
  ChainInput input{&env_, "a", std::move(*files), "us-east-1", true, {}};
  auto provider = ResolveCredentials(input, looked_);
  ASSERT_FALSE(provider.ok());
  EXPECT_EQ(provider.error().message, "cannot use profile 'a': source_profile loops (a -> b -> a)");
}

TEST_F(Chain_, ServicesSectionsNameEndpoints) {
  Write("config",
        "[profile team]\nservices = local\n[services local]\ns3 =\n  endpoint_url = "
        "http://127.0.0.1:7480\nsts =\n  endpoint_url = http://127.0.0.1:9000\n");
  Result<AwsFiles> files =
      LoadAwsFiles((dir_.path() / "credentials").string(), (dir_.path() / "config").string());
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(ServiceEndpoint(*files, "team", "s3"), "http://127.0.0.1:7480");
  EXPECT_EQ(ServiceEndpoint(*files, "team", "sts"), "http://127.0.0.1:9000");
  EXPECT_EQ(ServiceEndpoint(*files, "default", "s3"), "");
}

}  // namespace
}  // namespace gpufs::remote
