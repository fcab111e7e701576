#include "source/remote/transfer/store_requests.h"

#include <fmt/format.h>

#include <algorithm>

#include "source/remote/address/url.h"

namespace gpufs::remote {

// The URL of `name` (or of the bucket, for a listing), with `query` already in canonical
// order: curl signs the path and query exactly as they are sent.
std::string UrlOf(const StoreConfig& config, const std::string& name, const std::string& query,
                  bool bucket_only) {
  std::string url;
  if (config.scheme == Scheme::kHttp) {
    const bool typed = config.typed_object && config.typed_object->name == name;
    url = config.endpoint + config.root + (typed ? config.typed_object->target : EncodePath(name));
  } else if (config.path_style) {
    url = config.endpoint + "/" + EncodePath(config.bucket);
    if (!bucket_only) url += "/" + EncodePath(config.root + name);
  } else {
    const size_t host = config.endpoint.find("//") + 2;
    url = config.endpoint.substr(0, host) + config.bucket + "." + config.endpoint.substr(host) +
          "/" + (bucket_only ? "" : EncodePath(config.root + name));
  }
  if (!query.empty()) url += "?" + query;
  return url;
}

// The headers every request carries. radosgw refuses a signed request without a payload
// hash, and curl 7.88 signs with the one it is given. A session token goes with each
// attempt's keys (transfer_loop.cc).
std::vector<std::string> BaseHeaders(const StoreConfig& config) {
  std::vector<std::string> headers;
  if (config.scheme == Scheme::kS3 && config.request_payer) {
    headers.push_back("x-amz-request-payer: requester");
  }
  if (config.scheme == Scheme::kS3 && config.credentials) {
    headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
  }
  return headers;
}

// An exchange for `object` with what every request carries; the caller adds the sink.
Exchange Request(const StoreConfig& config, const std::string& object, const char* verb,
                 std::string url) {
  Exchange exchange;
  exchange.object = object;
  exchange.verb = verb;
  exchange.url = std::move(url);
  exchange.headers = BaseHeaders(config);
  return exchange;
}

// ListObjectsV2's query, its parameters in the sorted order SigV4 signs.
std::string ListQuery(const std::string& prefix, const std::string& token, unsigned page_size) {
  std::string query;
  if (!token.empty()) query += "continuation-token=" + EncodeQueryValue(token) + "&";
  query += "encoding-type=url&list-type=2";
  if (page_size > 0) query += fmt::format("&max-keys={}", page_size);
  if (!prefix.empty()) query += "&prefix=" + EncodeQueryValue(prefix);
  return query;
}

// "http://host:port/path?query" as the authority ("host:port") and the rest ("/path?query").
std::pair<std::string, std::string> SplitUrl(const std::string& url) {
  const size_t authority = url.find("://") + 3;
  const size_t path = std::min(url.find('/', authority), url.size());
  return {url.substr(authority, path - authority), url.substr(path)};
}

}  // namespace gpufs::remote
