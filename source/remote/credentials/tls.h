// How gpufs checks a store's certificate: always, against the system's CAs or a bundle the
// user names (a private CA), unless a test rig turns checking off (--no-verify-tls).
//
// Which bundle: for s3:// sources as the AWS CLI picks it (--ca-bundle, AWS_CA_BUNDLE,
// the profile's ca_bundle); for http(s):// sources as the curl tool does (--ca-bundle,
// CURL_CA_BUNDLE, SSL_CERT_FILE). libcurl itself reads none of these variables.
#pragma once

#include <curl/curl.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"

namespace gpufs::remote {

// The first candidate that is set ({where it came from, the path}), checked to be a
// readable file of PEM certificates; empty when none is set. Errors (EINVAL, or the
// errno of the open) name the file and where it came from.
Result<std::string> PickCaBundle(
    const std::vector<std::pair<std::string_view, std::string>>& candidates);

// Sets an easy handle's certificate checks: `verify` (peer and host name), against
// `ca_bundle` when not empty, else curl's default store.
void SetTls(CURL* easy, bool verify, const std::string& ca_bundle);

// What a user can do about a failure of `code` (of an s3:// store when `s3`), to follow
// curl's own text; empty when nothing is to say.
std::string TlsHint(CURLcode code, bool s3);

}  // namespace gpufs::remote
