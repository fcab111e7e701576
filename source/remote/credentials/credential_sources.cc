#include "source/remote/credentials/credential_sources.h"

#include <sys/stat.h>

#include <cstring>

#include "source/remote/credentials/credential_http.h"
#include "source/remote/credentials/credential_trust.h"

namespace gpufs::remote {
namespace {

std::string Value(const IniSection& section, const std::string& key) {
  auto it = section.find(key);
  return it == section.end() ? "" : it->second;
}

Result<IniFile> LoadIni(const std::string& path, std::string_view what) {
  if (path.empty()) return IniFile{};
  Result<std::optional<std::string>> text = ReadTrustedFile(path, what, kMaxAwsFileBytes);
  if (!text.ok()) return text.error();
  if (!*text) return IniFile{};  // a missing file holds no profile
  return ParseIni(**text, path);
}

// What identifies a file's contents without reading it.
struct FileStamp {
  ino_t inode = 0;
  off_t size = -1;
  timespec mtime{};
  bool operator==(const FileStamp& o) const {
    return inode == o.inode && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec;
  }
};

FileStamp StampOf(const std::string& path) {
  struct stat st {};
  if (path.empty() || stat(path.c_str(), &st) != 0) return {};
  return {st.st_ino, st.st_size, st.st_mtim};
}

class EnvKeys final : public CredentialSource {
 public:
  explicit EnvKeys(Credentials keys) : keys_(std::move(keys)) {}
  Result<CredentialSet> Fetch() override { return CredentialSet{keys_, std::nullopt}; }
  std::string Describe() const override { return "environment (AWS_ACCESS_KEY_ID)"; }
  bool Refreshable() const override { return false; }

 private:
  Credentials keys_;
};

class ProfileKeys final : public CredentialSource {
 public:
  ProfileKeys(AwsFiles files, std::string profile)
      : files_(std::move(files)), profile_(std::move(profile)) {
    Stamp();
  }

  Result<CredentialSet> Fetch() override {
    Stamp();
    Result<AwsFiles> files = LoadAwsFiles(files_.credentials_path, files_.config_path);
    if (!files.ok()) return files.error();
    files_ = std::move(*files);
    const IniSection profile = MergedProfile(files_, profile_);
    CredentialSet set;
    set.keys = {Value(profile, "aws_access_key_id"), Value(profile, "aws_secret_access_key"),
                Value(profile, "aws_session_token")};
    if (set.keys.access_key.empty() || set.keys.secret_key.empty()) {
      return Fail(EACCES, "cannot use the credentials of {}: {} is missing", Describe(),
                  set.keys.access_key.empty() ? "the access key id" : "the secret access key");
    }
    return set;
  }

  std::string Describe() const override {
    return fmt::format("profile '{}' in {}", profile_,
                       FileOf(files_, profile_, "aws_access_key_id"));
  }

  bool Changed() override {
    return !(StampOf(files_.credentials_path) == credentials_stamp_ &&
             StampOf(files_.config_path) == config_stamp_);
  }

 private:
  void Stamp() {
    credentials_stamp_ = StampOf(files_.credentials_path);
    config_stamp_ = StampOf(files_.config_path);
  }

  AwsFiles files_;
  std::string profile_;
  FileStamp credentials_stamp_;
  FileStamp config_stamp_;
};

class ContainerEndpoint final : public CredentialSource {
 public:
  ContainerEndpoint(std::string url, std::string token, std::string token_file)
      : url_(std::move(url)), token_(std::move(token)), token_file_(std::move(token_file)) {}

  Result<CredentialSet> Fetch() override {
    HttpCall call;
    call.url = url_;
    call.timeout = std::chrono::milliseconds(5000);
    std::string token = token_;
    if (!token_file_.empty()) {
      Result<std::string> read = ReadTokenFile(token_file_);
      if (!read.ok()) return Failure(read.error().message);
      token = std::move(*read);
    }
    if (!token.empty()) call.headers.push_back("Authorization: " + token);
    Result<HttpAnswer> answer = CallHttp(call);
    if (!answer.ok()) return Failure(answer.error().message);
    if (answer->status != 200) {
      return Failure(fmt::format("it answered HTTP {}", answer->status));
    }
    Result<CredentialSet> set = ParseCredentialJson(answer->body, false);
    if (!set.ok()) return Failure(set.error().message);
    return set;
  }

  std::string Describe() const override { return "container endpoint " + url_; }

 private:
  Error Failure(const std::string& why) const {
    return Fail(EACCES, "cannot get credentials from the {}: {}", Describe(), why);
  }

  std::string url_;
  std::string token_;
  std::string token_file_;
};

class Imds final : public CredentialSource {
 public:
  explicit Imds(std::string endpoint) : endpoint_(std::move(endpoint)) {}

  Result<CredentialSet> Fetch() override {
    HttpCall put{.method = "PUT", .url = endpoint_ + "/latest/api/token"};
    put.headers = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
    put.timeout = std::chrono::milliseconds(2000);
    Result<HttpAnswer> token = CallHttp(put);
    if (!token.ok()) return Failure(token.error().message);
    if (token->status != 200) return Failure(fmt::format("a token: HTTP {}", token->status));
    const std::string header = "X-aws-ec2-metadata-token: " + token->body;
    const std::string base = endpoint_ + "/latest/meta-data/iam/security-credentials/";
    HttpCall get{.url = base, .headers = {header}};
    get.timeout = std::chrono::milliseconds(2000);
    Result<HttpAnswer> roles = CallHttp(get);
    if (!roles.ok()) return Failure(roles.error().message);
    if (roles->status != 200 || roles->body.empty()) {
      return Failure(fmt::format("no instance role (HTTP {})", roles->status));
    }
    role_ = roles->body.substr(0, roles->body.find('\n'));
    get.url = base + role_;
    Result<HttpAnswer> keys = CallHttp(get);
    if (!keys.ok()) return Failure(keys.error().message);
    if (keys->status != 200) {
      return Failure(fmt::format("the keys of role {}: HTTP {}", role_, keys->status));
    }
    Result<CredentialSet> set = ParseCredentialJson(keys->body, false);
    if (!set.ok()) return Failure(set.error().message);
    return set;
  }

  std::string Describe() const override {
    return fmt::format("instance metadata (IMDSv2{}) at {}", role_.empty() ? "" : ", role " + role_,
                       endpoint_);
  }

 private:
  Error Failure(const std::string& why) const {
    return Fail(EACCES, "cannot get credentials from {}: {}", Describe(), why);
  }

  std::string endpoint_;
  std::string role_;  // as the service named it last
};

}  // namespace

Result<AwsFiles> LoadAwsFiles(std::string credentials_path, std::string config_path) {
  AwsFiles files;
  files.credentials_path = std::move(credentials_path);
  files.config_path = std::move(config_path);
  Result<IniFile> credentials = LoadIni(files.credentials_path, "the AWS credentials file");
  if (!credentials.ok()) return credentials.error();
  Result<IniFile> config = LoadIni(files.config_path, "the AWS config file");
  if (!config.ok()) return config.error();
  files.credentials = std::move(*credentials);
  files.config = std::move(*config);
  return files;
}

IniSection MergedProfile(const AwsFiles& files, const std::string& profile) {
  IniSection merged;
  if (const IniSection* config = FindProfile(files.config, profile, true)) merged = *config;
  if (const IniSection* credentials = FindProfile(files.credentials, profile, false)) {
    for (const auto& [key, value] : *credentials) merged[key] = value;
  }
  return merged;
}

std::string FileOf(const AwsFiles& files, const std::string& profile, const std::string& key) {
  const IniSection* credentials = FindProfile(files.credentials, profile, false);
  if (credentials != nullptr && credentials->contains(key)) return files.credentials_path;
  const IniSection* config = FindProfile(files.config, profile, true);
  if (config != nullptr && config->contains(key)) return files.config_path;
  return files.credentials_path.empty() ? files.config_path : files.credentials_path;
}

std::unique_ptr<CredentialSource> EnvSource(Credentials keys) {
  return std::make_unique<EnvKeys>(std::move(keys));
}

std::unique_ptr<CredentialSource> ProfileKeysSource(AwsFiles files, std::string profile) {
  return std::make_unique<ProfileKeys>(std::move(files), std::move(profile));
}

Result<std::unique_ptr<CredentialSource>> ContainerSource(const Env& env) {
  auto get = [&env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  std::string url = get("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  const std::string relative = get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  if (!relative.empty()) {
    // A path on the ECS agent: anything else ("@host/", "host/") would move the request
    // elsewhere with the container's token.
    if (!relative.starts_with('/')) {
      return Fail(EINVAL,
                  "cannot use AWS_CONTAINER_CREDENTIALS_RELATIVE_URI '{}': it must be a path "
                  "beginning with '/'",
                  relative);
    }
    url = "http://169.254.170.2" + relative;
  } else if (url.empty()) {
    return std::unique_ptr<CredentialSource>();
  } else if (Status safe = CheckSecretEndpoint(url, "AWS_CONTAINER_CREDENTIALS_FULL_URI", true);
             !safe.ok()) {
    return safe.error();
  }
  return std::unique_ptr<CredentialSource>(
      std::make_unique<ContainerEndpoint>(std::move(url), get("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
                                          get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")));
}

std::unique_ptr<CredentialSource> ImdsSource(std::string endpoint) {
  while (endpoint.ends_with('/')) endpoint.pop_back();
  return std::make_unique<Imds>(std::move(endpoint));
}

}  // namespace gpufs::remote
