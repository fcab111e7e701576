// The places AWS keys come from, each a CredentialSource (credentials.h): the
// environment, a profile's keys in the AWS files, a credential_process program, STS
// (sts.cc), a container's credential endpoint and the EC2 instance metadata service.
// credential_chain.h picks one in the AWS SDKs' order.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "source/remote/credentials/aws_config.h"
#include "source/remote/credentials/credentials.h"

namespace gpufs::remote {

using Env = std::map<std::string, std::string>;

// ~/.aws/credentials and ~/.aws/config as read now: paths (empty: not set) and contents
// (empty when the file is missing).
struct AwsFiles {
  std::string credentials_path;
  std::string config_path;
  IniFile credentials;
  IniFile config;
};

Result<AwsFiles> LoadAwsFiles(std::string credentials_path, std::string config_path);

// A profile's settings, the credentials file's over the config file's.
IniSection MergedProfile(const AwsFiles& files, const std::string& profile);

// The file that holds `key` of `profile` (the credentials file first), for messages.
std::string FileOf(const AwsFiles& files, const std::string& profile, const std::string& key);

// Keys from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN: never refreshed.
std::unique_ptr<CredentialSource> EnvSource(Credentials keys);

// aws_access_key_id and aws_secret_access_key of `profile`, read again when either file
// changes (inode, size or mtime).
std::unique_ptr<CredentialSource> ProfileKeysSource(AwsFiles files, std::string profile);

// The JSON (Version 1) that `command` prints, split into words as a shell would and run
// without one; `origin` names where the command was configured, for messages.
std::unique_ptr<CredentialSource> ProcessSource(std::string command, std::string origin);

// Words of a command line as POSIX sh splits them: blanks separate, '...' is literal,
// "..." and \ escape. EINVAL for an unclosed quote or an empty command.
Result<std::vector<std::string>> SplitCommand(std::string_view command);

// AWS_CONTAINER_CREDENTIALS_FULL_URI or _RELATIVE_URI (on 169.254.170.2), with
// AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN as its Authorization header. Null when
// neither URI is set; EINVAL for a full URI over http to a host that is not loopback or a
// container agent's.
Result<std::unique_ptr<CredentialSource>> ContainerSource(const Env& env);

// IMDSv2 at AWS_EC2_METADATA_SERVICE_ENDPOINT or 169.254.169.254: a session token, the
// instance's role, its keys. One attempt with a 1 s connect timeout, as the SDKs make.
std::unique_ptr<CredentialSource> ImdsSource(std::string endpoint);

}  // namespace gpufs::remote
