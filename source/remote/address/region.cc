#include "source/remote/address/region.h"

#include <algorithm>

#include "source/remote/address/s3_xml.h"

namespace gpufs::remote {
namespace {

bool IsRegionName(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

// The text of the first <Region>..</Region> in `body`; empty when there is none.
std::string_view RegionElement(std::string_view body) {
  constexpr std::string_view kOpen = "<Region>";
  constexpr std::string_view kClose = "</Region>";
  const size_t at = body.find(kOpen);
  if (at == std::string_view::npos) return {};
  const size_t from = at + kOpen.size();
  const size_t to = body.find(kClose, from);
  return to == std::string_view::npos ? std::string_view{} : body.substr(from, to - from);
}

// "... expecting 'eu-west-1'": AuthorizationHeaderMalformed's message names the region.
std::string_view ExpectedInMessage(std::string_view message) {
  constexpr std::string_view kExpecting = "expecting '";
  const size_t at = message.find(kExpecting);
  if (at == std::string_view::npos) return {};
  const size_t from = at + kExpecting.size();
  const size_t to = message.find('\'', from);
  return to == std::string_view::npos ? std::string_view{} : message.substr(from, to - from);
}

std::string AwsHost(const std::string& region) { return "s3." + region + ".amazonaws.com"; }

}  // namespace

std::optional<std::string> RegionOfAnswer(const Reply& reply) {
  const bool redirect = reply.status == 301 || reply.status == 307;
  const std::optional<S3Error> s3 = ParseS3Error(reply.text);
  // A 400 is about the region only when the store says so (a HEAD's has no body: its
  // header alone says it).
  const bool wrong_region =
      reply.status == 400 && (!s3 || s3->code == "AuthorizationHeaderMalformed");
  if (!redirect && !wrong_region) return std::nullopt;
  std::string_view region = reply.bucket_region;
  if (region.empty()) region = RegionElement(reply.text);
  if (region.empty() && s3) region = ExpectedInMessage(s3->message);
  if (!IsRegionName(region)) return std::nullopt;
  return std::string(region);
}

std::string EndpointOfRegion(const std::string& endpoint, const std::string& from,
                             const std::string& region) {
  if (endpoint != "https://" + AwsHost(from)) return endpoint;
  return "https://" + AwsHost(region);
}

void MoveToRegion(StoreConfig& config, const std::string& region) {
  config.endpoint = EndpointOfRegion(config.endpoint, config.region, region);
  config.region = region;
}

BucketRegion::BucketRegion(std::string region, std::string endpoint)
    : first_(region), endpoint_(std::move(endpoint)), region_(std::move(region)) {}

std::string BucketRegion::Get() const {
  std::lock_guard lock(mu_);
  return region_;
}

bool BucketRegion::Learn(const std::string& region) {
  std::lock_guard lock(mu_);
  if (region == region_) return false;
  region_ = region;
  return true;
}

std::string BucketRegion::Retarget(const std::string& url) const {
  const std::string region = Get();
  const std::string to = EndpointOfRegion(endpoint_, first_, region);
  if (to == endpoint_) return url;
  // The URL's authority names the first region's host (path style), or the bucket under it
  // (virtual hosts); only that host changes.
  const std::string from_host = AwsHost(first_);
  const size_t authority_end = url.find('/', url.find("://") + 3);
  const size_t at = url.find(from_host);
  if (at == std::string::npos || at > authority_end) return url;
  return url.substr(0, at) + AwsHost(region) + url.substr(at + from_host.size());
}

}  // namespace gpufs::remote
