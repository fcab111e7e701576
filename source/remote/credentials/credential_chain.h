// Which credentials a mount signs with, in the AWS SDKs' order: (1) AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY; (2) AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN; (3) the
// profile in the AWS files: role_arn (with source_profile, credential_source or
// web_identity_token_file), static keys, credential_process; (4) a container endpoint
// (AWS_CONTAINER_CREDENTIALS_FULL_URI or _RELATIVE_URI); (5) IMDSv2, unless
// AWS_EC2_METADATA_DISABLED=true. The first source configured is used; its failure fails
// the mount with its reason, except IMDS's, which means "none found".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "source/remote/credentials/credential_sources.h"

namespace gpufs::remote {

struct ChainInput {
  const Env* env = nullptr;
  std::string profile;  // AWS_PROFILE or "default"
  AwsFiles files;
  std::string region;
  // False: keys written in the environment or the files only; a source that would run a
  // program or call a server is an error (the fuzzer).
  bool active_sources = true;
  std::string ca_bundle;  // the store's (tls.h): STS is called with the same trust
};

// Null when no source has keys; `looked` then lists the sources after the files and why
// each had none. Errors name the source and what is wrong with it.
Result<std::shared_ptr<CredentialProvider>> ResolveCredentials(const ChainInput& input,
                                                               std::vector<std::string>& looked);

// The profile's `services = NAME` section's `SERVICE.endpoint_url` ([services NAME] in the
// config file, `s3 =` then an indented `endpoint_url = ...`); empty when not set.
std::string ServiceEndpoint(const AwsFiles& files, const std::string& profile,
                            std::string_view service);

}  // namespace gpufs::remote
