// How a request to a store is addressed: its URL (path-style, virtual-host or an http
// origin's), the headers every request carries, and ListObjectsV2's query.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "source/remote/address/exchange.h"
#include "source/remote/address/store_config.h"

namespace gpufs::remote {

// The URL of `name` (or of the bucket, for a listing), with `query` already in canonical
// order: curl signs the path and query exactly as they are sent.
std::string UrlOf(const StoreConfig& config, const std::string& name, const std::string& query,
                  bool bucket_only);

// The headers every request carries (the payload hash radosgw asks of a signed request, the
// requester-pays header).
std::vector<std::string> BaseHeaders(const StoreConfig& config);

// An exchange for `object` with what every request carries; the caller adds the sink.
Exchange Request(const StoreConfig& config, const std::string& object, const char* verb,
                 std::string url);

// ListObjectsV2's query, its parameters in the sorted order SigV4 signs.
std::string ListQuery(const std::string& prefix, const std::string& token, unsigned page_size);

// "http://host:port/path?query" as the authority ("host:port") and the rest ("/path?query").
std::pair<std::string, std::string> SplitUrl(const std::string& url);

}  // namespace gpufs::remote
