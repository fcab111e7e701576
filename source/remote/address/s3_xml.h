// The XML an S3 store answers with: error documents and ListObjectsV2 pages. Both come
// from the network, so both parsers refuse what they do not understand rather than guess,
// and neither trusts a size, a count or a token it has not checked.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "source/remote/address/store_config.h"

namespace gpufs::remote {

struct S3Error {
  std::string code;     // e.g. NoSuchKey, AccessDenied, SlowDown
  std::string message;  // the store's words; may be empty
};

// <Error><Code>..</Code><Message>..</Message></Error>; nullopt for any other body (an
// HTML page, nothing, a document without a Code).
std::optional<S3Error> ParseS3Error(std::string_view body);

struct ListPage {
  std::vector<ObjectInfo> objects;  // names are whole keys, decoded
  bool truncated = false;
  std::string next_token;  // NextContinuationToken: set when truncated
};

// One page of a ListObjectsV2 answer (<ListBucketResult>). Keys are URL-decoded when the
// page says <EncodingType>url</EncodingType>. Errors (EIO) say what is wrong with it.
Result<ListPage> ParseListObjectsV2(std::string_view xml);

}  // namespace gpufs::remote
