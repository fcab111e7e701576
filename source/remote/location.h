// A source's URL resolved to a store: ResolveLocation turns s3://, http:// and https://
// URLs, with the options and the AWS tools' environment and files, into the StoreConfig
// that reaches the store and the credentials that sign for it (location.cc).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "source/remote/address/store_config.h"

namespace gpufs::remote {

// What the URL names and how to reach it, from the URL, the options and the conventions of
// the AWS tools (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE,
// AWS_SHARED_CREDENTIALS_FILE and ~/.aws/credentials, AWS_CONFIG_FILE and ~/.aws/config
// with region and endpoint_url, AWS_REGION, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL).
struct LocationOptions {
  std::string endpoint;          // --endpoint; wins over the environment and profile
  bool no_sign_request = false;  // --no-sign-request: public buckets
  unsigned connections = kDefaultConnections;
  // False: only keys written in the environment or the AWS files; no program is run and no
  // server asked for keys (the fuzzer of the AWS files).
  bool active_credential_sources = true;
  std::string ca_bundle{};  // --ca-bundle; wins over the environment and profile (tls.h)
};

struct Location {
  StoreConfig config;  // root: the URL's folder
  std::string leaf;    // the URL's last segment when it names an object, else empty
  // For messages and user.gpufs.source: as given, without a password or a query's
  // signature (http_url.h).
  std::string url;
  // What the caller should tell the user before it goes on (a .netrc left unused, say).
  std::vector<std::string> warnings;
};

// `env` maps names to values (the process environment in the daemon, a fixture in tests).
// Errors name the URL, or the profile or file at fault. A URL ending in '/' names a folder
// (no leaf); otherwise its last segment is the leaf and the root is the folder holding it:
// s3://b/train/ is root "train/", s3://b/train/set.tar is root "train/", leaf "set.tar".
Result<Location> ResolveLocation(std::string_view url, const LocationOptions& options,
                                 const std::map<std::string, std::string>& env);

// What a URL names, from its text alone: the leaf ResolveLocation would find, and whether
// a query came with it (a presigned URL's). Nothing is read and no credentials are sought,
// so a caller can settle the URL's shape (a folder's ends in '/') before the one
// resolution that fetches them. nullopt: ResolveLocation refuses the text itself.
struct UrlShape {
  std::string leaf;  // empty: the URL names a folder (or a bucket)
  bool query = false;
};
std::optional<UrlShape> ShapeOfUrl(std::string_view url);

// True for s3://, http:// and https:// sources.
bool IsRemoteUrl(std::string_view source);

}  // namespace gpufs::remote
