// The region an S3 bucket is in, as requests are signed for it, learned from the store when
// the one configured is wrong. As the AWS CLI does: a store that answers 301
// PermanentRedirect, or 400 AuthorizationHeaderMalformed ("the region 'us-east-1' is wrong;
// expecting 'eu-west-1'"), names the bucket's region in an x-amz-bucket-region header or a
// <Region> in its error body; the request is signed again for that region and sent at once,
// and so is every later one. On AWS itself (an endpoint s3.REGION.amazonaws.com) the
// requests also go to that region's endpoint.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "source/remote/address/exchange.h"
#include "source/remote/address/store_config.h"

namespace gpufs::remote {

// The bucket's region as a wrong-region answer names it; nullopt for any other answer, or
// a name that is not a region (lower-case letters, digits and '-').
std::optional<std::string> RegionOfAnswer(const Reply& reply);

// `endpoint` for `region`: AWS's own endpoint of that region when `endpoint` is AWS's of
// `from`; any other endpoint (radosgw, MinIO) is kept.
std::string EndpointOfRegion(const std::string& endpoint, const std::string& from,
                             const std::string& region);

// Sets `config` to sign for `region`, and on AWS to send there.
void MoveToRegion(StoreConfig& config, const std::string& region);

// The region requests are signed for, shared by the store's transfer threads (each signs
// with it and may learn another) and any thread that reads it for stats. Thread-safe.
class BucketRegion {
 public:
  BucketRegion(std::string region, std::string endpoint);
  std::string Get() const;
  // Records `region`; true when it differs from the one before.
  bool Learn(const std::string& region);
  // `url` sent to the current region's endpoint (on AWS); unchanged elsewhere.
  std::string Retarget(const std::string& url) const;

 private:
  const std::string first_;     // the configured region, whose endpoint the URLs name
  const std::string endpoint_;  // the configured endpoint
  mutable std::mutex mu_;
  std::string region_;  // guarded by mu_
};

}  // namespace gpufs::remote
