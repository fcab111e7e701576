// ResolveLocation: from a URL and the AWS tools' conventions to a StoreConfig.
//
// Precedence, as the AWS CLI has it: credentials from the chain of credential_chain.h
// (environment, web identity, the profile (AWS_PROFILE, default "default") in the AWS
// files, a container endpoint, IMDS). Region: AWS_REGION, AWS_DEFAULT_REGION, the
// profile's region, us-east-1. Endpoint: --endpoint, AWS_ENDPOINT_URL_S3,
// AWS_ENDPOINT_URL, the profile's `services` section's s3 endpoint_url, the profile's
// endpoint_url, then AWS itself.
//
// A URL ending in '/' names a folder; otherwise its last segment names an object (the
// leaf) and the root is the folder holding it.
#include "source/remote/location.h"

#include "source/remote/address/http_url.h"
#include "source/remote/address/url.h"
#include "source/remote/credentials/aws_config.h"
#include "source/remote/credentials/credential_chain.h"
#include "source/remote/credentials/credential_trust.h"
#include "source/remote/credentials/tls.h"
#include "source/remote/location.h"

namespace gpufs::remote {
namespace {

std::string Get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

std::string Setting(const IniSection* section, const std::string& key) {
  if (section == nullptr) return "";
  auto it = section->find(key);
  return it == section->end() ? "" : it->second;
}

// One of the AWS files: where it is, and its profile's settings when it has them.
struct AwsFile {
  std::string path;  // empty: neither its variable nor HOME is set
  IniFile ini;
  const IniSection* profile = nullptr;
};

Result<AwsFile> LoadAwsFile(const Env& env, const char* variable, const char* home_relative,
                            const std::string& profile, bool config_file) {
  AwsFile file;
  file.path = Get(env, variable);
  if (file.path.empty() && !Get(env, "HOME").empty()) {
    file.path = Get(env, "HOME") + "/" + home_relative;
  }
  if (file.path.empty()) return file;
  const char* what = config_file ? "the AWS config file" : "the AWS credentials file";
  Result<std::optional<std::string>> text = ReadTrustedFile(file.path, what, kMaxAwsFileBytes);
  if (!text.ok()) return text.error();
  if (!*text) return file;  // a missing file holds no profile; the caller says where it looked
  Result<IniFile> ini = ParseIni(**text, file.path);
  if (!ini.ok()) return ini.error();
  file.ini = std::move(*ini);
  file.profile = FindProfile(file.ini, profile, config_file);
  return file;
}

std::string_view StripTrailingSlashes(std::string_view s) {
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return s;
}

bool IsHttpUrl(std::string_view s) { return s.starts_with("http://") || s.starts_with("https://"); }

// Splits "folder/leaf" at its last '/': a trailing '/' leaves no leaf.
void SplitLeaf(std::string_view path, std::string& root, std::string& leaf) {
  const size_t slash = path.rfind('/');
  root = std::string(path.substr(0, slash == std::string_view::npos ? 0 : slash + 1));
  leaf = std::string(path.substr(root.size()));
}

// An http(s) URL's last segment as the object's name (%-decoded); nullopt when it is not a
// file name.
std::optional<std::string> LeafName(std::string_view segment) {
  auto name = PercentDecode(segment, false);
  if (!name || name->find('/') != std::string::npos) return std::nullopt;
  return name;
}

// s3://BUCKET/ROOT/LEAF: its bucket, and the folder and last segment of the key after it.
void SplitS3(std::string_view url, std::string& bucket, std::string& root, std::string& leaf) {
  const std::string_view rest = url.substr(5);  // after "s3://"
  const size_t slash = rest.find('/');
  bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) SplitLeaf(rest.substr(slash + 1), root, leaf);
}

// The URL as typed (http_url.h): its folder is the root, its last segment (decoded) the
// leaf, which is then asked for exactly as typed, its query included.
Result<Location> ResolveHttp(std::string_view typed, const LocationOptions& options,
                             const Env& env) {
  Result<HttpUrl> url = ParseHttpUrl(typed);
  if (!url.ok()) return url.error();
  Location location;
  location.url = url->Shown();
  StoreConfig& config = location.config;
  config.scheme = Scheme::kHttp;
  config.endpoint = url->origin;
  config.connections = options.connections;
  Result<std::string> bundle = PickCaBundle({{"--ca-bundle", options.ca_bundle},
                                             {"CURL_CA_BUNDLE", Get(env, "CURL_CA_BUNDLE")},
                                             {"SSL_CERT_FILE", Get(env, "SSL_CERT_FILE")}});
  if (!bundle.ok()) return bundle.error();
  config.ca_bundle = std::move(*bundle);
  std::string leaf;
  SplitLeaf(url->path, config.root, leaf);
  if (leaf.empty() && !url->query.empty()) {
    return Fail(EINVAL,
                "cannot use {}: a query is kept only on a URL that names one object (a "
                "presigned URL of a tar archive), not a folder",
                location.url);
  }
  if (!leaf.empty()) {
    auto name = LeafName(leaf);
    if (!name) {
      return Fail(EINVAL, "cannot use {}: its last segment is not a file name", location.url);
    }
    location.leaf = *name;
    config.typed_object = TypedObject{*name, leaf + (url->query.empty() ? "" : "?" + url->query)};
  }
  if (!url->user.empty() || url->password) {
    config.basic_auth = BasicAuth{url->user, url->password.value_or("")};
    return location;  // a .netrc is not read
  }
  std::string warning;
  config.netrc_file = SafeNetrcFile(env, warning);
  if (!warning.empty()) location.warnings.push_back(std::move(warning));
  return location;
}

std::string Looked(const std::string& profile, const AwsFile& credentials, const AwsFile& config) {
  std::string where = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY";
  for (const AwsFile* file : {&credentials, &config}) {
    if (file->path.empty()) continue;
    where += fmt::format(", profile '{}' in {} ({})", profile, file->path,
                         file->profile       ? "no keys there"
                         : file->ini.empty() ? "no such file, or empty"
                                             : "no such profile");
  }
  return where;
}

Result<std::string> ResolveEndpoint(const LocationOptions& options, const Env& env,
                                    const AwsFile& config, const std::string& services_endpoint,
                                    const std::string& region, bool& custom) {
  custom = true;
  std::string endpoint = options.endpoint;
  for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    if (endpoint.empty()) endpoint = Get(env, name);
  }
  if (endpoint.empty()) endpoint = services_endpoint;  // [services NAME] s3 = endpoint_url
  if (endpoint.empty()) endpoint = Setting(config.profile, "s3.endpoint_url");
  if (endpoint.empty()) endpoint = Setting(config.profile, "endpoint_url");
  if (endpoint.empty()) {
    custom = false;
    return fmt::format("https://s3.{}.amazonaws.com", region);
  }
  if (!IsHttpUrl(endpoint) || endpoint.find_first_of("?#@") != std::string::npos) {
    return Fail(EINVAL, "cannot use endpoint '{}': not an http:// or https:// URL of a server",
                endpoint);
  }
  return std::string(StripTrailingSlashes(endpoint));
}

// A bucket that can be a host name label, as virtual-host addressing needs.
bool IsDnsBucket(std::string_view bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (const char c : bucket) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return bucket.front() != '-' && bucket.back() != '-';
}

// The region (AWS_REGION, AWS_DEFAULT_REGION, the profile's, us-east-1) and the CA bundle
// (--ca-bundle, AWS_CA_BUNDLE, the profile's), as the AWS CLI picks them.
Status PickRegionAndCa(StoreConfig& config, const LocationOptions& options, const Env& env,
                       const AwsFile& config_file, const std::string& profile) {
  config.region.clear();
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (config.region.empty()) config.region = Get(env, name);
  }
  if (config.region.empty()) config.region = Setting(config_file.profile, "region");
  if (config.region.empty()) config.region = "us-east-1";
  Result<std::string> bundle = PickCaBundle(
      {{"--ca-bundle", options.ca_bundle},
       {"AWS_CA_BUNDLE", Get(env, "AWS_CA_BUNDLE")},
       {"ca_bundle of profile '" + profile + "'", Setting(config_file.profile, "ca_bundle")}});
  if (!bundle.ok()) return bundle.error();
  config.ca_bundle = std::move(*bundle);
  return Ok{};
}

// The keys that sign requests to `url`, from the chain; refused, naming what was looked at,
// when there are none or a named profile is in neither file.
Result<std::shared_ptr<CredentialProvider>> FindCredentials(std::string_view url,
                                                            const ChainInput& chain,
                                                            bool named_profile,
                                                            const AwsFile& credentials_file,
                                                            const AwsFile& config_file) {
  const Env& env = *chain.env;
  const std::string& profile = chain.profile;
  const bool env_keys =
      !Get(env, "AWS_ACCESS_KEY_ID").empty() || !Get(env, "AWS_SECRET_ACCESS_KEY").empty();
  if (named_profile && !env_keys && !credentials_file.profile && !config_file.profile) {
    return Fail(EINVAL, "cannot use profile '{}' (AWS_PROFILE) for {}: not in {}", profile, url,
                Looked(profile, credentials_file, config_file));
  }
  std::vector<std::string> looked;
  Result<std::shared_ptr<CredentialProvider>> found = ResolveCredentials(chain, looked);
  if (!found.ok()) return found.error();
  if (!*found) {
    return Fail(EACCES,
                "cannot sign requests to {}: no credentials (looked at {}, {}); "
                "--no-sign-request reads a public bucket",
                url, Looked(profile, credentials_file, config_file), fmt::join(looked, ", "));
  }
  return found;
}

Result<Location> ResolveS3(std::string_view url, const LocationOptions& options, const Env& env) {
  Location location;
  StoreConfig& config = location.config;
  SplitS3(url, config.bucket, config.root, location.leaf);
  const std::string& bucket = config.bucket;
  if (bucket.empty()) return Fail(EINVAL, "cannot use {}: no bucket", url);
  location.url = std::string(url);
  config.scheme = Scheme::kS3;
  config.connections = options.connections;

  std::string profile = Get(env, "AWS_PROFILE");
  const bool named_profile = !profile.empty();
  if (!named_profile) profile = "default";
  Result<AwsFile> credentials_file =
      LoadAwsFile(env, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials", profile, false);
  if (!credentials_file.ok()) return credentials_file.error();
  Result<AwsFile> config_file = LoadAwsFile(env, "AWS_CONFIG_FILE", ".aws/config", profile, true);
  if (!config_file.ok()) return config_file.error();

  if (Status s = PickRegionAndCa(config, options, env, *config_file, profile); !s) {
    return s.error();
  }
  ChainInput chain{
      &env,
      profile,
      AwsFiles{credentials_file->path, config_file->path, credentials_file->ini, config_file->ini},
      config.region,
      options.active_credential_sources,
      config.ca_bundle};
  bool custom = true;
  Result<std::string> endpoint =
      ResolveEndpoint(options, env, *config_file, ServiceEndpoint(chain.files, profile, "s3"),
                      config.region, custom);
  if (!endpoint.ok()) return endpoint.error();
  config.endpoint = std::move(*endpoint);
  // Virtual hosts only on AWS itself, and only for buckets that can be a host name.
  config.path_style = custom || !IsDnsBucket(bucket);

  if (options.no_sign_request) return location;
  Result<std::shared_ptr<CredentialProvider>> found =
      FindCredentials(url, chain, named_profile, *credentials_file, *config_file);
  if (!found.ok()) return found.error();
  config.credentials = std::move(*found);
  return location;
}

}  // namespace

std::optional<UrlShape> ShapeOfUrl(std::string_view url) {
  UrlShape shape;
  std::string bucket, root, segment;
  if (url.starts_with("s3://")) {
    SplitS3(url, bucket, root, shape.leaf);
    if (bucket.empty()) return std::nullopt;
    return shape;
  }
  if (!IsHttpUrl(url)) return std::nullopt;
  Result<HttpUrl> parsed = ParseHttpUrl(url);
  if (!parsed.ok()) return std::nullopt;
  SplitLeaf(parsed->path, root, segment);
  shape.query = !parsed->query.empty();
  if (segment.empty()) {
    if (shape.query) return std::nullopt;  // a folder with a query is refused
    return shape;
  }
  auto name = LeafName(segment);
  if (!name) return std::nullopt;
  shape.leaf = std::move(*name);
  return shape;
}

bool IsRemoteUrl(std::string_view source) {
  return source.starts_with("s3://") || IsHttpUrl(source);
}

Result<Location> ResolveLocation(std::string_view url, const LocationOptions& options,
                                 const std::map<std::string, std::string>& env) {
  if (url.starts_with("s3://")) return ResolveS3(url, options, env);
  if (IsHttpUrl(url)) return ResolveHttp(url, options, env);
  return Fail(EINVAL, "cannot use {}: not an s3://, http:// or https:// URL", url);
}

}  // namespace gpufs::remote
