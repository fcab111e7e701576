// Percent-encoding as S3 signs it (SigV4's canonical URI and query): every byte but the
// unreserved A-Z a-z 0-9 - _ . ~ becomes %XX in upper-case hex. Requests are built in this
// form already, because curl 7.88 signs the path and query exactly as they are sent.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpufs::remote {

// A key or URL path: each segment encoded, the '/' between segments kept.
std::string EncodePath(std::string_view path);
// A query parameter's name or value: '/' encoded too.
std::string EncodeQueryValue(std::string_view value);
// %XX decoded; nullopt on a malformed escape. With `plus_is_space`, '+' is a space, as in
// S3 listings asked for with encoding-type=url.
std::optional<std::string> PercentDecode(std::string_view text, bool plus_is_space);

}  // namespace gpufs::remote
