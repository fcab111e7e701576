// ResolveLocation and the AWS files it reads, with the environment as a map and the files
// in a temporary HOME: what a URL names, and where credentials, region and endpoint come
// from when several places offer them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "source/remote/address/http_url.h"
#include "source/remote/credentials/aws_config.h"
#include "source/remote/credentials/credentials.h"
#include "source/remote/location.h"
#include "tests/unit/temp_dir.h"

namespace gpufs::remote {
namespace {

using Env = std::map<std::string, std::string>;

class Location_ : public ::testing::Test {
 protected:
  // Writes HOME/.aws/NAME.
  void WriteAws(const std::string& name, const std::string& text) {
    std::filesystem::create_directories(home_.path() / ".aws");
    std::ofstream(home_.path() / ".aws" / name) << text;
  }
  std::string AwsPath(const std::string& name) const {
    return (home_.path() / ".aws" / name).string();
  }
  // No test asks 169.254.169.254 for keys.
  Env WithHome(Env env) const {
    env["HOME"] = home_.path().string();
    env.emplace("AWS_EC2_METADATA_DISABLED", "true");
    return env;
  }
  Location Resolve(const std::string& url, Env env, LocationOptions options = {}) {
    Result<Location> location = ResolveLocation(url, options, WithHome(std::move(env)));
    EXPECT_TRUE(location.ok()) << location.error().message;
    return location.ok() ? *location : Location{};
  }
  Error ResolveError(const std::string& url, Env env, LocationOptions options = {}) {
    Result<Location> location = ResolveLocation(url, options, WithHome(std::move(env)));
    EXPECT_FALSE(location.ok()) << url;
    return location.ok() ? Error{} : location.error();
  }

  TempDir home_;
  const Env keys_ = {{"AWS_ACCESS_KEY_ID", "AKENV"}, {"AWS_SECRET_ACCESS_KEY", "env-secret"}};
};

TEST(RemoteUrl, S3AndHttpAreRemote) {
  EXPECT_TRUE(IsRemoteUrl("s3://b/k"));
  EXPECT_TRUE(IsRemoteUrl("http://h/x"));
  EXPECT_TRUE(IsRemoteUrl("https://h/x"));
  EXPECT_FALSE(IsRemoteUrl("/data/train"));
  EXPECT_FALSE(IsRemoteUrl("file:///data"));
  EXPECT_FALSE(IsRemoteUrl("s3:/b"));
}

// The shape is what the resolver finds, read from the text alone: no AWS file, no keys.
TEST_F(Location_, ShapeOfUrlIsTheLeafTheResolverFinds) {
  for (const char* url : {"s3://bucket/train/data.tar", "s3://bucket/train/", "s3://bucket",
                          "http://h/sets/train%2Etar", "https://h:8443/a/b?X-Amz-Signature=x",
                          "http://h/pack/", "http://h"}) {
    SCOPED_TRACE(url);
    const std::optional<UrlShape> shape = ShapeOfUrl(url);
    ASSERT_TRUE(shape);
    const Location l = Resolve(url, keys_);
    EXPECT_EQ(shape->leaf, l.leaf);
    EXPECT_EQ(shape->query, l.config.typed_object &&
                                l.config.typed_object->target.find('?') != std::string::npos);
  }
  EXPECT_EQ(ShapeOfUrl("http://h/sets/train%2Etar")->leaf, "train.tar");
  EXPECT_TRUE(ShapeOfUrl("http://h/a/b?sig=1")->query);
  // What the resolver refuses from the text alone has no shape.
  for (const char* url : {"s3:///k", "http://h/a%2Fb", "http://h/?q=1", "ftp://h/x", "/data"}) {
    EXPECT_FALSE(ShapeOfUrl(url)) << url;
    EXPECT_FALSE(ResolveLocation(url, {}, WithHome(keys_)).ok()) << url;
  }
}

TEST_F(Location_, S3FolderUrlHasARootAndNoLeaf) {
  const Location l = Resolve("s3://bucket/train/2024/", keys_);
  EXPECT_EQ(l.config.scheme, Scheme::kS3);
  EXPECT_EQ(l.config.bucket, "bucket");
  EXPECT_EQ(l.config.root, "train/2024/");
  EXPECT_EQ(l.leaf, "");
  EXPECT_EQ(l.url, "s3://bucket/train/2024/");
}

TEST_F(Location_, S3UrlWithoutTrailingSlashNamesAnObject) {
  const Location l = Resolve("s3://bucket/train/data.tar", keys_);
  EXPECT_EQ(l.config.root, "train/");
  EXPECT_EQ(l.leaf, "data.tar");
  const Location top = Resolve("s3://bucket/data.tar", keys_);
  EXPECT_EQ(top.config.root, "");
  EXPECT_EQ(top.leaf, "data.tar");
}

TEST_F(Location_, S3BucketAloneIsItsTop) {
  for (const char* url : {"s3://bucket", "s3://bucket/"}) {
    const Location l = Resolve(url, keys_);
    EXPECT_EQ(l.config.bucket, "bucket") << url;
    EXPECT_EQ(l.config.root, "") << url;
    EXPECT_EQ(l.leaf, "") << url;
  }
  EXPECT_NE(ResolveError("s3:///key", keys_).message.find("no bucket"), std::string::npos);
}

TEST_F(Location_, HttpUrlSplitsOriginRootAndLeaf) {
  const Location folder = Resolve("http://127.0.0.1:8080/data/train/", {});
  EXPECT_EQ(folder.config.scheme, Scheme::kHttp);
  EXPECT_EQ(folder.config.endpoint, "http://127.0.0.1:8080");
  EXPECT_EQ(folder.config.root, "/data/train/");
  EXPECT_EQ(folder.leaf, "");
  EXPECT_FALSE(folder.config.credentials);
  const Location file = Resolve("https://example.com/data/set.tar", {});
  EXPECT_EQ(file.config.endpoint, "https://example.com");
  EXPECT_EQ(file.config.root, "/data/");
  EXPECT_EQ(file.leaf, "set.tar");
  const Location bare = Resolve("http://example.com", {});
  EXPECT_EQ(bare.config.endpoint, "http://example.com");
  EXPECT_EQ(bare.config.root, "/");
  EXPECT_EQ(bare.leaf, "");
}

TEST_F(Location_, HttpUrlUserAndPasswordAreCredentialsNeverShown) {
  const Location l = Resolve("https://us%40r:hun%3Ater2@example.com/data/", {});
  ASSERT_TRUE(l.config.basic_auth);
  EXPECT_EQ(l.config.basic_auth->user, "us@r");
  EXPECT_EQ(l.config.basic_auth->password, "hun:ter2");
  EXPECT_EQ(l.config.endpoint, "https://example.com");
  EXPECT_EQ(l.url, "https://example.com/data/");
  const Error e = ResolveError("https://user:hunter2@/x", {});
  EXPECT_EQ(e.message.find("hunter2"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("no host"), std::string::npos) << e.message;
  EXPECT_NE(ResolveError("http:///x", {}).message.find("no host"), std::string::npos);
}

TEST_F(Location_, HttpUrlIsRequestedAsTyped) {
  const Location spaced = Resolve("http://h/d%20ir/with%20space.tar", {});
  EXPECT_EQ(spaced.config.root, "/d%20ir/");
  EXPECT_EQ(spaced.leaf, "with space.tar");
  ASSERT_TRUE(spaced.config.typed_object);
  EXPECT_EQ(spaced.config.typed_object->target, "with%20space.tar");
  const Location raw = Resolve("http://h/a b/c\"d.tar", {});
  EXPECT_EQ(raw.config.root, "/a%20b/");
  EXPECT_EQ(raw.config.typed_object->target, "c%22d.tar");
  EXPECT_EQ(raw.leaf, "c\"d.tar");
  const Location escaped = Resolve("http://h/a%23b%3F.tar", {});
  EXPECT_EQ(escaped.leaf, "a#b?.tar");
  EXPECT_EQ(escaped.config.typed_object->target, "a%23b%3F.tar");
  EXPECT_NE(ResolveError("http://h/a#b.tar", {}).message.find("%23"), std::string::npos);
}

TEST_F(Location_, HttpQueryIsKeptOnTheObjectAndNeverShown) {
  const Location l =
      Resolve("https://h/b/set.tar?X-Amz-Credential=K%2F1&X-Amz-Signature=abc123", {});
  EXPECT_EQ(l.leaf, "set.tar");
  EXPECT_EQ(l.config.typed_object->target, "set.tar?X-Amz-Credential=K%2F1&X-Amz-Signature=abc123");
  EXPECT_EQ(l.url, "https://h/b/set.tar?…");
  const Error folder = ResolveError("http://h/x/?sig=1", {});
  EXPECT_NE(folder.message.find("query"), std::string::npos) << folder.message;
  EXPECT_EQ(folder.message.find("sig=1"), std::string::npos) << folder.message;
}

TEST(HttpUrl, SecretsAreHiddenInPlace) {
  char arg[] = "https://user:secret@host/x?y=1";
  HideSecretsInPlace(arg);
  EXPECT_STREQ(arg, "https://user:******@host/x?y=1");
  char plain[] = "https://host/x@y";
  HideSecretsInPlace(plain);
  EXPECT_STREQ(plain, "https://host/x@y");
  char presigned[] = "https://h/b/t.tar?X-Amz-Date=1&X-Amz-Signature=abc&X-Amz-Security-Token=t";
  HideSecretsInPlace(presigned);
  EXPECT_STREQ(presigned,
               "https://h/b/t.tar?X-Amz-Date=1&X-Amz-Signature=***&X-Amz-Security-Token=*");
}

TEST_F(Location_, NetrcIsUsedOnlyWhenPrivate) {
  const std::string netrc = (home_.path() / "netrc").string();
  { std::ofstream(netrc) << "machine h login u password p\n"; }
  chmod(netrc.c_str(), 0644);
  std::string warning;
  EXPECT_EQ(SafeNetrcFile({{"NETRC", netrc}}, warning), "");
  EXPECT_NE(warning.find("chmod 600"), std::string::npos) << warning;
  chmod(netrc.c_str(), 0600);
  warning.clear();
  EXPECT_EQ(SafeNetrcFile({{"NETRC", netrc}}, warning), netrc);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(SafeNetrcFile({{"HOME", (home_.path() / "none").string()}}, warning), "");
}

TEST_F(Location_, OtherSchemesAreRefused) {
  EXPECT_NE(ResolveError("ftp://h/x", {}).message.find("ftp://h/x"), std::string::npos);
}

TEST_F(Location_, EnvironmentKeysAndTokenSign) {
  Env env = keys_;
  env["AWS_SESSION_TOKEN"] = "token";
  const Location l = Resolve("s3://b/", env);
  ASSERT_TRUE(l.config.credentials);
  EXPECT_EQ(l.config.credentials->Current()->access_key, "AKENV");
  EXPECT_EQ(l.config.credentials->Current()->secret_key, "env-secret");
  EXPECT_EQ(l.config.credentials->Current()->session_token, "token");
}

TEST_F(Location_, EnvironmentKeysWinOverTheProfile) {
  WriteAws("credentials", "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = f\n");
  EXPECT_EQ(Resolve("s3://b/", keys_).config.credentials->Current()->access_key, "AKENV");
  EXPECT_EQ(Resolve("s3://b/", {}).config.credentials->Current()->access_key, "AKFILE");
}

TEST_F(Location_, NamedProfileFromTheCredentialsFile) {
  WriteAws("credentials",
           "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = d\n\n"
           "# the team's keys\n[team]\naws_access_key_id = AKTEAM\n"
           "aws_secret_access_key = t\naws_session_token = tok\n");
  const Location l = Resolve("s3://b/", {{"AWS_PROFILE", "team"}});
  EXPECT_EQ(l.config.credentials->Current()->access_key, "AKTEAM");
  EXPECT_EQ(l.config.credentials->Current()->session_token, "tok");
}

TEST_F(Location_, ProfileKeysInTheConfigFileCount) {
  WriteAws("config", "[profile team]\naws_access_key_id = AKCONF\naws_secret_access_key = c\n");
  EXPECT_EQ(Resolve("s3://b/", {{"AWS_PROFILE", "team"}}).config.credentials->Current()->access_key,
            "AKCONF");
}

TEST_F(Location_, FilesNamedByTheEnvironmentReplaceTheHomeOnes) {
  WriteAws("credentials", "[default]\naws_access_key_id = AKHOME\naws_secret_access_key = h\n");
  const std::string other = (home_.path() / "elsewhere").string();
  std::ofstream(other) << "[default]\naws_access_key_id = AKOTHER\naws_secret_access_key = o\n";
  const std::string config = (home_.path() / "cfg").string();
  std::ofstream(config) << "[default]\nregion = eu-north-1\n";
  const Location l =
      Resolve("s3://b/", {{"AWS_SHARED_CREDENTIALS_FILE", other}, {"AWS_CONFIG_FILE", config}});
  EXPECT_EQ(l.config.credentials->Current()->access_key, "AKOTHER");
  EXPECT_EQ(l.config.region, "eu-north-1");
}

TEST_F(Location_, RegionPrecedence) {
  WriteAws("config", "[default]\nregion = eu-west-3\n");
  Env env = keys_;
  EXPECT_EQ(Resolve("s3://b/", env).config.region, "eu-west-3");
  env["AWS_DEFAULT_REGION"] = "ap-south-1";
  EXPECT_EQ(Resolve("s3://b/", env).config.region, "ap-south-1");
  env["AWS_REGION"] = "us-west-2";
  EXPECT_EQ(Resolve("s3://b/", env).config.region, "us-west-2");
  std::filesystem::remove(AwsPath("config"));
  EXPECT_EQ(Resolve("s3://b/", keys_).config.region, "us-east-1");
}

TEST_F(Location_, EndpointPrecedenceAndAddressing) {
  WriteAws("config", "[default]\nregion = eu-west-1\nendpoint_url = http://profile:9000/\n");
  Env env = keys_;
  Location l = Resolve("s3://b.with.dots/", env);
  EXPECT_EQ(l.config.endpoint, "http://profile:9000");
  EXPECT_TRUE(l.config.path_style);
  env["AWS_ENDPOINT_URL"] = "http://env:9000";
  EXPECT_EQ(Resolve("s3://b/", env).config.endpoint, "http://env:9000");
  EXPECT_EQ(Resolve("s3://b/", env, {.endpoint = "https://option:443/"}).config.endpoint,
            "https://option:443");
  std::filesystem::remove(AwsPath("config"));
  l = Resolve("s3://my-bucket/", keys_);
  EXPECT_EQ(l.config.endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_FALSE(l.config.path_style);  // AWS itself: virtual hosts
  EXPECT_TRUE(Resolve("s3://b.with.dots/", keys_).config.path_style);
  EXPECT_NE(ResolveError("s3://b/", keys_, {.endpoint = "ftp://x"}).message.find("ftp://x"),
            std::string::npos);
}

TEST_F(Location_, NestedS3EndpointInTheProfile) {
  WriteAws("config", "[default]\ns3 =\n  endpoint_url = http://nested:7480\n");
  EXPECT_EQ(Resolve("s3://b/", keys_).config.endpoint, "http://nested:7480");
}

TEST_F(Location_, NoSignRequestNeedsNoCredentials) {
  const Location l = Resolve("s3://public/", keys_, {.endpoint = "", .no_sign_request = true});
  EXPECT_FALSE(l.config.credentials);
  EXPECT_FALSE(
      Resolve("s3://public/", {}, {.endpoint = "", .no_sign_request = true}).config.credentials);
}

TEST_F(Location_, MissingCredentialsSayWhereTheyWereLookedFor) {
  WriteAws("credentials", "[someone-else]\naws_access_key_id = AK\naws_secret_access_key = s\n");
  const Error e = ResolveError("s3://b/", {});
  EXPECT_EQ(e.code, EACCES);
  EXPECT_NE(e.message.find("s3://b/"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("AWS_ACCESS_KEY_ID"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find(AwsPath("credentials")), std::string::npos) << e.message;
  EXPECT_NE(e.message.find(AwsPath("config")), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("--no-sign-request"), std::string::npos) << e.message;
}

TEST_F(Location_, AMissingNamedProfileIsNamed) {
  WriteAws("credentials", "[default]\naws_access_key_id = AK\naws_secret_access_key = s3cr3t\n");
  const Error e = ResolveError("s3://b/", {{"AWS_PROFILE", "prod"}});
  EXPECT_NE(e.message.find("'prod'"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find(AwsPath("credentials")), std::string::npos) << e.message;
  EXPECT_EQ(e.message.find("s3cr3t"), std::string::npos) << e.message;
}

TEST_F(Location_, HalfAKeyIsAnError) {
  const Error e = ResolveError("s3://b/", {{"AWS_ACCESS_KEY_ID", "AK"}});
  EXPECT_NE(e.message.find("secret access key"), std::string::npos) << e.message;
  WriteAws("credentials", "[default]\naws_secret_access_key = only-secret\n");
  const Error f = ResolveError("s3://b/", {});
  EXPECT_NE(f.message.find("access key id"), std::string::npos) << f.message;
  EXPECT_EQ(f.message.find("only-secret"), std::string::npos) << f.message;
}

TEST_F(Location_, AnUnreadableFileIsNamedWithItsLine) {
  WriteAws("config", "[default]\nregion = x\nthis is not a setting\n");
  const Error e = ResolveError("s3://b/", keys_);
  EXPECT_EQ(e.code, EINVAL);
  EXPECT_NE(e.message.find(AwsPath("config") + ":3"), std::string::npos) << e.message;
}

TEST_F(Location_, ConnectionsComeFromTheOptions) {
  EXPECT_EQ(Resolve("http://h/x/", {}, {.endpoint = "", .no_sign_request = false, .connections = 3})
                .config.connections,
            3u);
  EXPECT_EQ(Resolve("s3://b/", keys_, {.endpoint = "", .no_sign_request = false, .connections = 5})
                .config.connections,
            5u);
}

// --- the INI files themselves ------------------------------------------------------------

TEST(AwsIni, ParsesSectionsCommentsAndNestedSettings) {
  Result<IniFile> ini = ParseIni(
      "# comment\n; another\n\n[default]\nregion = eu-west-1 \r\n"
      "s3 =\n  addressing_style = path\n  endpoint_url=http://x\nafter = 1\n"
      "[profile  team ]\nkey=a=b\n",
      "cfg");
  ASSERT_TRUE(ini.ok()) << ini.error().message;
  const IniSection& def = ini->at("default");
  EXPECT_EQ(def.at("region"), "eu-west-1");
  EXPECT_EQ(def.at("s3.addressing_style"), "path");
  EXPECT_EQ(def.at("s3.endpoint_url"), "http://x");
  EXPECT_EQ(def.at("after"), "1");
  const IniSection* team = FindProfile(*ini, "team", true);
  ASSERT_NE(team, nullptr);
  EXPECT_EQ(team->at("key"), "a=b");
  EXPECT_EQ(FindProfile(*ini, "default", true), &def);
  EXPECT_EQ(FindProfile(*ini, "team", false), nullptr);  // credentials: [team], not [profile]
}

TEST(AwsIni, ConfigFileProfilesNeedThePrefixButDefaultMayHaveIt) {
  Result<IniFile> ini = ParseIni("[team]\na = 1\n[profile default]\nb = 2\n", "cfg");
  ASSERT_TRUE(ini.ok());
  EXPECT_EQ(FindProfile(*ini, "team", true), nullptr);
  ASSERT_NE(FindProfile(*ini, "default", true), nullptr);
  EXPECT_EQ(FindProfile(*ini, "default", true)->at("b"), "2");
  ASSERT_NE(FindProfile(*ini, "team", false), nullptr);
}

TEST(AwsIni, ErrorsNameTheFileAndLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"key = before any section\n", "f:1"},
      {"[default]\n\njust words\n", "f:3"},
      {"[default\n", "f:1"},
      {"[]\n", "f:1"},
      {"[x]\n = value\n", "f:2"},
  };
  for (const auto& [text, where] : cases) {
    Result<IniFile> ini = ParseIni(text, "f");
    ASSERT_FALSE(ini.ok()) << text;
    EXPECT_EQ(ini.error().code, EINVAL);
    EXPECT_EQ(ini.error().message.rfind(std::string("cannot parse ") + where, 0), 0u)
        << ini.error().message;
  }
}

// The CA bundle as the AWS CLI picks it for s3:// (option, AWS_CA_BUNDLE, profile) and as
// the curl tool does for https:// (option, CURL_CA_BUNDLE, SSL_CERT_FILE).
TEST_F(Location_, CaBundleFollowsTheAwsCliForS3AndCurlForHttps) {
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  WriteAws("option.pem", pem);
  WriteAws("env.pem", pem);
  WriteAws("profile.pem", pem);
  WriteAws("config", "[default]\nca_bundle = " + AwsPath("profile.pem") + "\n");
  Env env = keys_;
  EXPECT_EQ(Resolve("s3://b/", env).config.ca_bundle, AwsPath("profile.pem"));
  env["AWS_CA_BUNDLE"] = AwsPath("env.pem");
  EXPECT_EQ(Resolve("s3://b/", env).config.ca_bundle, AwsPath("env.pem"));
  LocationOptions options;
  options.ca_bundle = AwsPath("option.pem");
  EXPECT_EQ(Resolve("s3://b/", env, options).config.ca_bundle, AwsPath("option.pem"));
  // AWS_CA_BUNDLE is the AWS tools'; an https:// source takes curl's variables.
  EXPECT_EQ(Resolve("https://h/d/", env).config.ca_bundle, "");
  EXPECT_EQ(Resolve("https://h/d/", {{"SSL_CERT_FILE", AwsPath("env.pem")}}).config.ca_bundle,
            AwsPath("env.pem"));
  EXPECT_EQ(Resolve("https://h/d/", {{"SSL_CERT_FILE", AwsPath("env.pem")},
                                     {"CURL_CA_BUNDLE", AwsPath("profile.pem")}})
                .config.ca_bundle,
            AwsPath("profile.pem"));
  EXPECT_EQ(Resolve("https://h/d/", env, options).config.ca_bundle, AwsPath("option.pem"));
}

TEST_F(Location_, UnreadableCaBundleIsRefusedNamingTheFile) {
  LocationOptions options;
  options.ca_bundle = AwsPath("missing.pem");
  const Error missing = ResolveError("s3://b/", keys_, options);
  EXPECT_EQ(missing.code, ENOENT);
  EXPECT_NE(missing.message.find(AwsPath("missing.pem") + " (--ca-bundle)"), std::string::npos)
      << missing.message;
  WriteAws("config", "not a certificate\n");
  const Error not_pem = ResolveError("https://h/", {{"SSL_CERT_FILE", AwsPath("config")}});
  EXPECT_EQ(not_pem.code, EINVAL);
  EXPECT_NE(not_pem.message.find("no PEM certificate"), std::string::npos) << not_pem.message;
  EXPECT_NE(not_pem.message.find("SSL_CERT_FILE"), std::string::npos) << not_pem.message;
}

}  // namespace
}  // namespace gpufs::remote
