#include "source/remote/address/s3_xml.h"

#include <charconv>

#include <pugixml.hpp>

#include "source/remote/address/url.h"

namespace gpufs::remote {
namespace {

Result<pugi::xml_node> ParseRoot(pugi::xml_document& doc, std::string_view xml,
                                 const char* root_name) {
  const pugi::xml_parse_result parsed = doc.load_buffer(xml.data(), xml.size());
  if (!parsed) {
    return Fail(EIO, "not XML ({} at byte {})", parsed.description(), parsed.offset);
  }
  const pugi::xml_node root = doc.document_element();
  if (std::string_view(root.name()) != root_name) {
    return Fail(EIO, "<{}> where <{}> was expected", root.name(), root_name);
  }
  return root;
}

std::string_view Text(const pugi::xml_node& parent, const char* name) {
  return parent.child(name).text().get();
}

Result<ObjectInfo> ParseContents(const pugi::xml_node& contents, bool url_encoded) {
  const std::string_view raw_key = Text(contents, "Key");
  std::optional<std::string> key =
      url_encoded ? PercentDecode(raw_key, true) : std::string(raw_key);
  if (!key || key->empty()) return Fail(EIO, "an entry has no usable Key ('{}')", raw_key);
  const std::string_view size = Text(contents, "Size");
  ObjectInfo info{std::move(*key), 0, std::string(Text(contents, "ETag"))};
  const auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), info.size);
  if (size.empty() || ec != std::errc() || end != size.data() + size.size()) {
    return Fail(EIO, "the Size of {} is '{}', not a byte count", info.name, size);
  }
  return info;
}

}  // namespace

std::optional<S3Error> ParseS3Error(std::string_view body) {
  pugi::xml_document doc;
  const Result<pugi::xml_node> root = ParseRoot(doc, body, "Error");
  if (!root.ok()) return std::nullopt;
  S3Error error{std::string(Text(*root, "Code")), std::string(Text(*root, "Message"))};
  if (error.code.empty()) return std::nullopt;
  return error;
}

Result<ListPage> ParseListObjectsV2(std::string_view xml) {
  pugi::xml_document doc;
  Result<pugi::xml_node> root = ParseRoot(doc, xml, "ListBucketResult");
  if (!root.ok()) return Fail(EIO, "cannot parse a listing: {}", root.error().message);
  const std::string_view encoding = Text(*root, "EncodingType");
  if (!encoding.empty() && encoding != "url") {
    return Fail(EIO, "cannot parse a listing: unknown EncodingType '{}'", encoding);
  }
  ListPage page;
  for (const pugi::xml_node& contents : root->children("Contents")) {
    Result<ObjectInfo> info = ParseContents(contents, encoding == "url");
    if (!info.ok()) return Fail(EIO, "cannot parse a listing: {}", info.error().message);
    page.objects.push_back(std::move(*info));
  }
  const std::string_view truncated = Text(*root, "IsTruncated");
  if (truncated != "true" && truncated != "false") {
    return Fail(EIO, "cannot parse a listing: IsTruncated is '{}'", truncated);
  }
  page.truncated = truncated == "true";
  page.next_token = Text(*root, "NextContinuationToken");
  if (page.truncated && page.next_token.empty()) {
    return Fail(EIO, "cannot parse a listing: truncated, but no NextContinuationToken");
  }
  return page;
}

}  // namespace gpufs::remote
