// The HTTP calls of credential sources (STS, container and instance metadata endpoints):
// synchronous libcurl easy transfers on the provider's thread, short deadlines, one
// attempt (the provider retries with backoff), TLS verified.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "source/remote/credentials/credentials.h"

namespace gpufs::remote {

struct HttpCall {
  std::string method = "GET";  // GET, PUT, POST
  std::string url;
  std::vector<std::string> headers;  // "Name: value"; may hold a secret (never logged)
  std::string body;                  // POST/PUT body
  std::optional<Credentials> sigv4;  // sign as "aws:amz:REGION:SERVICE"
  std::string sigv4_scope;           // "REGION:sts"
  std::string ca_bundle;             // empty: the system's CAs (tls.h)
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds timeout{5000};
};

struct HttpAnswer {
  long status = 0;
  std::string body;  // at most 1 MiB
};

// Errors (EIO) read "URL: <curl's reason>"; any HTTP status is an answer.
Result<HttpAnswer> CallHttp(const HttpCall& call);

// The credential JSON of credential_process, container endpoints and IMDS: AccessKeyId,
// SecretAccessKey, Token or SessionToken, Expiration. `version_one` requires "Version": 1
// (credential_process). Errors (EINVAL) say which field is wrong, never a value.
Result<CredentialSet> ParseCredentialJson(std::string_view text, bool version_one);

}  // namespace gpufs::remote
