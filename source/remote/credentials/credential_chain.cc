#include "source/remote/credentials/credential_chain.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "source/remote/credentials/credential_trust.h"
#include "source/remote/credentials/sts.h"

namespace gpufs::remote {
namespace {

using SourcePtr = std::unique_ptr<CredentialSource>;

std::string Get(const Env& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

std::string Value(const IniSection& section, const char* key) {
  auto it = section.find(key);
  return it == section.end() ? "" : it->second;
}

bool IsTrue(std::string value) {
  std::transform(value.begin(), value.end(), value.begin(), ::tolower);
  return value == "true";
}

class Chain {
 public:
  explicit Chain(const ChainInput& input) : in_(input), env_(*input.env) {}

  // Where STS is called; its requests carry a token or a session token, so plain http
  // only to this machine.
  Result<StsTarget> Sts(const std::string& profile) const {
    std::string endpoint = Get(env_, "AWS_ENDPOINT_URL_STS");
    std::string what = "AWS_ENDPOINT_URL_STS";
    if (endpoint.empty()) {
      endpoint = ServiceEndpoint(in_.files, profile, "sts");
      what =
          fmt::format("the sts endpoint_url of profile '{}' in {}", profile, in_.files.config_path);
    }
    if (endpoint.empty()) endpoint = fmt::format("https://sts.{}.amazonaws.com", in_.region);
    while (endpoint.ends_with('/')) endpoint.pop_back();
    // Resolved only when the chain will call it: a chain built to be checked (the fuzzer)
    // looks up no name.
    if (Status safe = CheckSecretEndpoint(endpoint, what, false, in_.active_sources); !safe.ok()) {
      return safe.error();
    }
    return StsTarget{endpoint, in_.region, in_.ca_bundle};
  }

  Status Active(const std::string& what) const {
    if (in_.active_sources) return Ok{};
    return Fail(EINVAL, "cannot use {}: not fetched here", what);
  }

  // The source of `profile`'s keys; null when it has none. `chain` holds the profiles
  // that led here through source_profile, to refuse a loop.
  Result<SourcePtr> Profile(const std::string& profile, std::vector<std::string> chain) {
    const std::string origin = fmt::format("profile '{}'", profile);
    if (std::find(chain.begin(), chain.end(), profile) != chain.end()) {
      chain.push_back(profile);
      return Fail(EINVAL, "cannot use {}: source_profile loops ({})", origin,
                  fmt::join(chain, " -> "));
    }
    const IniSection settings = MergedProfile(in_.files, profile);
    const bool has_keys = !Value(settings, "aws_access_key_id").empty() ||
                          !Value(settings, "aws_secret_access_key").empty();
    const std::string role_arn = Value(settings, "role_arn");
    // A profile that is its own source_profile uses its own keys to assume the role.
    if (!role_arn.empty() && !(has_keys && !chain.empty())) {
      chain.push_back(profile);
      return Role(profile, settings, role_arn, std::move(chain));
    }
    if (!Value(settings, "web_identity_token_file").empty()) {
      return Fail(EINVAL, "cannot use {} in {}: web_identity_token_file without role_arn", origin,
                  FileOf(in_.files, profile, "web_identity_token_file"));
    }
    if (has_keys) return ProfileKeysSource(in_.files, profile);
    const std::string process = Value(settings, "credential_process");
    if (!process.empty()) {
      const std::string where =
          fmt::format("{} in {}", origin, FileOf(in_.files, profile, "credential_process"));
      if (Status active = Active("the credential_process of " + where); !active.ok()) {
        return active.error();
      }
      return ProcessSource(process, where);
    }
    if (!chain.empty()) {
      return Fail(EINVAL,
                  "cannot use {} as a source_profile: it has no keys, role_arn or "
                  "credential_process in {} or {}",
                  origin, in_.files.credentials_path, in_.files.config_path);
    }
    return SourcePtr();
  }

  Result<SourcePtr> Role(const std::string& profile, const IniSection& settings,
                         const std::string& role_arn, std::vector<std::string> chain) {
    RoleRequest role{
        role_arn, Value(settings, "role_session_name"), Value(settings, "external_id"),
        Value(settings, "duration_seconds"),
        fmt::format("profile '{}' in {}", profile, FileOf(in_.files, profile, "role_arn"))};
    Result<StsTarget> sts = Sts(profile);
    if (!sts.ok()) return sts.error();
    if (Status active = Active("the role_arn of " + role.origin); !active.ok()) {
      return active.error();
    }
    const std::string token_file = Value(settings, "web_identity_token_file");
    if (!token_file.empty()) return WebIdentitySource(*sts, role, token_file);
    const std::string source_profile = Value(settings, "source_profile");
    const std::string credential_source = Value(settings, "credential_source");
    Result<SourcePtr> base = SourcePtr();
    if (!source_profile.empty()) {
      base = source_profile == profile ? ProfileKeysSource(in_.files, profile)
                                       : Profile(source_profile, std::move(chain));
    } else if (credential_source == "Environment") {
      base = EnvSource({Get(env_, "AWS_ACCESS_KEY_ID"), Get(env_, "AWS_SECRET_ACCESS_KEY"),
                        Get(env_, "AWS_SESSION_TOKEN")});
    } else if (credential_source == "EcsContainer") {
      base = ContainerSource(env_);
    } else if (credential_source == "Ec2InstanceMetadata") {
      base = Imds();
    } else {
      return Fail(EINVAL,
                  "cannot use {}: role_arn needs source_profile, credential_source "
                  "(Environment, EcsContainer, Ec2InstanceMetadata) or web_identity_token_file",
                  role.origin);
    }
    if (!base.ok()) return base.error();
    if (*base == nullptr)
      return Fail(EINVAL, "cannot use {}: its credential source has no keys", role.origin);
    return AssumeRoleSource(std::move(*sts), std::move(role), std::move(*base));
  }

  SourcePtr Imds() const {
    std::string endpoint = Get(env_, "AWS_EC2_METADATA_SERVICE_ENDPOINT");
    return ImdsSource(endpoint.empty() ? "http://169.254.169.254" : endpoint);
  }

  Result<SourcePtr> WebIdentityFromEnv() {
    const std::string token_file = Get(env_, "AWS_WEB_IDENTITY_TOKEN_FILE");
    if (token_file.empty()) return SourcePtr();
    RoleRequest role{Get(env_, "AWS_ROLE_ARN"), Get(env_, "AWS_ROLE_SESSION_NAME"), "", "",
                     "AWS_WEB_IDENTITY_TOKEN_FILE"};
    if (role.role_arn.empty()) {
      return Fail(EINVAL, "cannot use AWS_WEB_IDENTITY_TOKEN_FILE {}: AWS_ROLE_ARN is not set",
                  token_file);
    }
    Result<StsTarget> sts = Sts(in_.profile);
    if (!sts.ok()) return sts.error();
    if (Status active = Active("AWS_WEB_IDENTITY_TOKEN_FILE"); !active.ok()) return active.error();
    return WebIdentitySource(std::move(*sts), std::move(role), token_file);
  }

  Result<SourcePtr> FromEnv() {
    Credentials keys{Get(env_, "AWS_ACCESS_KEY_ID"), Get(env_, "AWS_SECRET_ACCESS_KEY"),
                     Get(env_, "AWS_SESSION_TOKEN")};
    if (keys.access_key.empty() && keys.secret_key.empty()) return SourcePtr();
    if (keys.access_key.empty() || keys.secret_key.empty()) {
      return Fail(EINVAL,
                  "cannot use the credentials of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: {} "
                  "is missing",
                  keys.access_key.empty() ? "the access key id" : "the secret access key");
    }
    return EnvSource(std::move(keys));
  }

  // The first configured source, or null with `looked` saying what was missing.
  Result<SourcePtr> Configured(std::vector<std::string>& looked) {
    for (auto step : {&Chain::FromEnv, &Chain::WebIdentityFromEnv}) {
      Result<SourcePtr> source = (this->*step)();
      if (!source.ok() || *source) return source;
    }
    looked.push_back("AWS_WEB_IDENTITY_TOKEN_FILE (not set)");
    Result<SourcePtr> profile = Profile(in_.profile, {});
    if (!profile.ok() || *profile) return profile;
    Result<SourcePtr> container = ContainerSource(env_);
    if (!container.ok() || *container) {
      if (container.ok()) {
        if (Status active = Active("a container endpoint"); !active.ok()) return active.error();
      }
      return container;
    }
    looked.push_back(
        "a container endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI and _RELATIVE_URI "
        "not set)");
    return SourcePtr();
  }

  const ChainInput& in_;
  const Env& env_;
};

}  // namespace

std::string ServiceEndpoint(const AwsFiles& files, const std::string& profile,
                            std::string_view service) {
  const IniSection settings = MergedProfile(files, profile);
  const std::string services = Value(settings, "services");
  if (services.empty()) return "";
  for (const auto& [name, section] : files.config) {
    if (!name.starts_with("services") || name.size() < 9) continue;
    std::string_view rest = std::string_view(name).substr(8);
    if (rest.find_first_not_of(" \t") == 0) continue;  // [servicesX]
    rest.remove_prefix(rest.find_first_not_of(" \t"));
    if (rest != services) continue;
    auto it = section.find(std::string(service) + ".endpoint_url");
    if (it != section.end()) return it->second;
  }
  return "";
}

Result<std::shared_ptr<CredentialProvider>> ResolveCredentials(const ChainInput& input,
                                                               std::vector<std::string>& looked) {
  Chain chain(input);
  Result<SourcePtr> source = chain.Configured(looked);
  if (!source.ok()) return source.error();
  std::shared_ptr<CredentialProvider> provider;
  if (*source) {
    Result<std::shared_ptr<CredentialProvider>> started =
        CredentialProvider::Start(std::move(*source));
    if (!started.ok()) return started.error();
    provider = std::move(*started);
  } else if (IsTrue(Get(*input.env, "AWS_EC2_METADATA_DISABLED")) || !input.active_sources) {
    looked.push_back("instance metadata (AWS_EC2_METADATA_DISABLED)");
    return provider;
  } else {
    Result<std::shared_ptr<CredentialProvider>> started = CredentialProvider::Start(chain.Imds());
    if (!started.ok()) {
      looked.push_back(started.error().message);
      return provider;
    }
    provider = std::move(*started);
  }
  spdlog::info("credentials: {}{}", provider->Describe(), provider->ExpiryText());
  return provider;
}

}  // namespace gpufs::remote
