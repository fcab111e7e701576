// AWS STS as a credential source: AssumeRole signed with another source's keys (a
// profile's role_arn + source_profile) and AssumeRoleWithWebIdentity, unsigned, with a
// token read from a file each time (Kubernetes rotates it).
#pragma once

#include <memory>
#include <string>

#include "source/remote/credentials/credentials.h"

namespace gpufs::remote {

struct StsTarget {
  std::string endpoint;   // "https://sts.us-east-1.amazonaws.com", no trailing slash
  std::string region;     // signs AssumeRole
  std::string ca_bundle;  // a private CA the store's profile names (its ca_bundle)
};

struct RoleRequest {
  std::string role_arn;
  std::string session_name;  // empty: "gpufs-<unix time>"
  std::string external_id;   // AssumeRole only; empty: none
  std::string duration_s;    // AssumeRole's DurationSeconds (duration_seconds); empty: STS's
  std::string origin;        // where the role was configured, for messages
};

std::unique_ptr<CredentialSource> AssumeRoleSource(StsTarget target, RoleRequest role,
                                                   std::unique_ptr<CredentialSource> base);
std::unique_ptr<CredentialSource> WebIdentitySource(StsTarget target, RoleRequest role,
                                                    std::string token_file);

// The Credentials of an STS answer (<AssumeRoleResult>, <AssumeRoleWithWebIdentityResult>),
// or EACCES "STS answered STATUS CODE: MESSAGE" for an <ErrorResponse>.
Result<CredentialSet> ParseStsAnswer(long status, std::string_view xml);

}  // namespace gpufs::remote
