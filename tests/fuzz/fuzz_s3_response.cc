// Fuzzes what the object store parses of a server's answer: ListObjectsV2 pages, S3 error
// documents and Content-Range headers, all straight from the network.
//
// Each parser either refuses the input with EIO or returns something its caller may trust:
// a listing page whose keys are non-empty and whose truncation comes with a token to go on
// from, an error with a code, a range inside its object.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "source/remote/address/s3_xml.h"
#include "source/remote/transfer/responses.h"

namespace gpufs::fuzz {
namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

void CheckListing(std::string_view input) {
  Result<remote::ListPage> page = remote::ParseListObjectsV2(input);
  if (!page.ok()) {
    Require(page.error().code == EIO, "a refused listing is not EIO");
    Require(page.error().message.starts_with("cannot parse a listing: "),
            "a refused listing does not say so");
    return;
  }
  Require(!page->truncated || !page->next_token.empty(), "truncated without a token");
  for (const remote::ObjectInfo& info : page->objects) Require(!info.name.empty(), "an empty key");
}

void CheckError(std::string_view input) {
  const std::optional<remote::S3Error> error = remote::ParseS3Error(input);
  if (error) Require(!error->code.empty(), "an error without a code");
  remote::Reply reply;
  reply.status = 400 + static_cast<long>(input.size() % 200);
  reply.text = std::string(input);
  const Error status = remote::StatusError(reply, "read", "s3://b/k");
  Require(status.message.starts_with("cannot read s3://b/k: "), "a status error names no object");
  (void)remote::IsRetryableStatus(reply.status, input);
}

void CheckRange(std::string_view input) {
  Result<remote::ContentRange> range = remote::ParseContentRange(input);
  if (range.ok()) {
    Require(range->first <= range->last && range->last < range->total, "a range outside");
  }
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  gpufs::fuzz::CheckListing(input);
  gpufs::fuzz::CheckError(input);
  gpufs::fuzz::CheckRange(input);
  return 0;
}
