// What the object store makes of an answer, without a server: Content-Range, S3 error
// documents, ListObjectsV2 pages, the checks on a ranged GET, and the retry schedule.
#include <gtest/gtest.h>

#include <random>

#include "source/remote/address/s3_xml.h"
#include "source/remote/address/url.h"
#include "source/remote/transfer/backoff.h"
#include "source/remote/transfer/latency_histogram.h"
#include "source/remote/transfer/responses.h"

namespace gpufs::remote {
namespace {

constexpr const char* kObject = "s3://b/k";

Reply Partial(uint64_t first, uint64_t last, uint64_t total, std::string etag = "\"e\"") {
  Reply reply;
  reply.status = 206;
  reply.content_range = fmt::format("bytes {}-{}/{}", first, last, total);
  reply.body_bytes = last - first + 1;
  reply.etag = std::move(etag);
  return reply;
}

Reply ErrorReply(long status, std::string body) {
  Reply reply;
  reply.status = status;
  reply.text = std::move(body);
  return reply;
}

TEST(ProbeReply, GivesSizeAndEtagFromTheRange) {
  Result<ObjectInfo> info = CheckProbeReply(Partial(0, 0, 1234, "\"x\""), kObject, "k");
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->size, 1234u);
  EXPECT_EQ(info->etag, "\"x\"");
}

TEST(ProbeReply, AServerIgnoringRangeIsRefusedSayingWhy) {
  Reply whole;
  whole.status = 200;
  whole.not_partial = true;
  const Error e = CheckProbeReply(whole, "http://h/train.tar", "train.tar").error();
  EXPECT_EQ(e.code, EOPNOTSUPP);
  EXPECT_EQ(e.message,
            "cannot use http://h/train.tar: the server ignores Range requests (it answered 200 "
            "with the whole file to a ranged GET); serve it with nginx or another server that "
            "supports ranges (nginx: max_ranges must not be 0)");
  EXPECT_EQ(CheckProbeReply(ErrorReply(403, ""), kObject, "k").error().code, EACCES);
}

TEST(ContentRange, ParsesFirstLastAndTotal) {
  Result<ContentRange> r = ParseContentRange("bytes 10-19/100");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->first, 10u);
  EXPECT_EQ(r->last, 19u);
  EXPECT_EQ(r->total, 100u);
  Result<ContentRange> big = ParseContentRange("bytes 0-0/18446744073709551615");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->total, 18446744073709551615ull);
}

TEST(ContentRange, RefusesAnythingElse) {
  for (const char* bad :
       {"", "bytes", "bytes */100", "bytes 10-19/*", "items 0-1/2", "bytes 19-10/100",
        "bytes 0-100/100", "bytes 0-9/100 ", "bytes  0-9/100", "bytes -1-9/100", "bytes +1-9/100",
        "bytes 0-9/18446744073709551616", "bytes 0x1-9/100", "bytes 0-9/100/3"}) {
    Result<ContentRange> r = ParseContentRange(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_EQ(r.error().code, EIO);
    EXPECT_NE(r.error().message.find("Content-Range"), std::string::npos);
  }
}

TEST(RangeReply, AcceptsExactlyTheBytesAsked) {
  Result<size_t> got = CheckRangeReply(Partial(100, 199, 1000), kObject, 100, 100, std::nullopt);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(*got, 100u);
}

TEST(RangeReply, RefusesOtherBytes) {
  struct Case {
    Reply reply;
    uint64_t offset;
    size_t length;
    const char* says;
  };
  Reply whole;
  whole.status = 200;
  whole.not_partial = true;
  Reply short_body = Partial(0, 99, 1000);
  short_body.body_bytes = 60;
  Reply overflow = Partial(0, 99, 1000);
  overflow.overflow = true;
  Reply garbled = Partial(0, 99, 1000);
  garbled.content_range = "bytes 0-99";
  const Case cases[] = {
      {whole, 100, 100, "whole object"},
      {Partial(0, 99, 1000), 100, 100, "0-99 sent"},
      {Partial(100, 149, 1000), 100, 100, "100-149 sent"},
      {Partial(100, 199, 150), 100, 100, "Content-Range"},  // last past total
      {short_body, 0, 100, "60 bytes received"},
      {overflow, 0, 100, "more than"},
      {garbled, 0, 100, "Content-Range"},
      {Partial(900, 999, 1000), 900, 101, "holds 1000"},
  };
  for (const Case& c : cases) {
    Result<size_t> got = CheckRangeReply(c.reply, kObject, c.offset, c.length, std::nullopt);
    ASSERT_FALSE(got.ok()) << c.says;
    EXPECT_EQ(got.error().code, EIO);
    EXPECT_EQ(got.error().message.rfind("cannot read s3://b/k: ", 0), 0u) << got.error().message;
    EXPECT_NE(got.error().message.find(c.says), std::string::npos) << got.error().message;
  }
}

TEST(RangeReply, AChangedObjectIsNamed) {
  const ObjectInfo seen{"k", 1000, "\"old\""};
  const Reply changed[] = {Partial(0, 9, 1000, "\"new\""), Partial(0, 9, 1001, "\"old\""),
                           ErrorReply(412, "<Error><Code>PreconditionFailed</Code></Error>")};
  for (const Reply& reply : changed) {
    Result<size_t> got = CheckRangeReply(reply, kObject, 0, 10, seen);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.error().code, EIO);
    EXPECT_NE(got.error().message.find("s3://b/k: it changed since mount"), std::string::npos)
        << got.error().message;
  }
  EXPECT_TRUE(CheckRangeReply(Partial(0, 9, 1000, "\"old\""), kObject, 0, 10, seen).ok());
  // A mount that saw no ETag checks the size alone.
  EXPECT_TRUE(
      CheckRangeReply(Partial(0, 9, 1000, "\"x\""), kObject, 0, 10, ObjectInfo{"k", 1000, ""})
          .ok());
}

TEST(StatusErrors, CarryTheStoresCodeAndMessage) {
  const Error denied = StatusError(
      ErrorReply(403,
                 "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>"
                 "<Message>The request signature we calculated does not match</Message></Error>"),
      "read", kObject);
  EXPECT_EQ(denied.code, EACCES);
  EXPECT_EQ(denied.message,
            "cannot read s3://b/k: access denied (HTTP 403, SignatureDoesNotMatch: The request "
            "signature we calculated does not match)");
  const Error missing = StatusError(
      ErrorReply(404, "<Error><Code>NoSuchBucket</Code><BucketName>b</BucketName></Error>"), "list",
      kObject);
  EXPECT_EQ(missing.code, ENOENT);
  EXPECT_NE(missing.message.find("cannot list s3://b/k: "), std::string::npos);
  EXPECT_NE(missing.message.find("NoSuchBucket"), std::string::npos);
  const Error html = StatusError(ErrorReply(400, "<html>bad</html>"), "stat", kObject);
  EXPECT_EQ(html.code, EIO);
  EXPECT_EQ(html.message, "cannot stat s3://b/k: the server answered HTTP 400");
}

TEST(StatusErrors, RetryOnlyWhatMayPass) {
  EXPECT_TRUE(IsRetryableStatus(500, ""));
  EXPECT_TRUE(IsRetryableStatus(503, "<Error><Code>SlowDown</Code></Error>"));
  EXPECT_TRUE(IsRetryableStatus(429, ""));
  EXPECT_TRUE(IsRetryableStatus(400, "<Error><Code>SlowDown</Code></Error>"));
  EXPECT_FALSE(IsRetryableStatus(403,
                                 "<Error><Code>AccessDenied</Code>"
                                 "<Message>SlowDown</Message></Error>"));
  EXPECT_FALSE(IsRetryableStatus(404, ""));
  EXPECT_FALSE(IsRetryableStatus(412, ""));
  EXPECT_FALSE(IsRetryableStatus(206, ""));
}

TEST(HeadReply, GivesSizeAndEtag) {
  Reply reply;
  reply.status = 200;
  reply.content_length = 42;
  reply.etag = "\"abc\"";
  Result<ObjectInfo> info = CheckHeadReply(reply, kObject, "k");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 42u);
  EXPECT_EQ(info->etag, "\"abc\"");
  reply.content_length.reset();
  EXPECT_NE(CheckHeadReply(reply, kObject, "k").error().message.find("Content-Length"),
            std::string::npos);
  EXPECT_EQ(CheckHeadReply(ErrorReply(404, ""), kObject, "k").error().code, ENOENT);
}

TEST(S3ErrorXml, DecodesEntitiesAndRefusesOtherDocuments) {
  std::optional<S3Error> e = ParseS3Error(
      "<Error><Code>InvalidArgument</Code><Message>a &lt;b&gt; &amp; &#233;</Message></Error>");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "InvalidArgument");
  EXPECT_EQ(e->message, "a <b> & \xC3\xA9");
  EXPECT_FALSE(ParseS3Error(""));
  EXPECT_FALSE(ParseS3Error("<html><body>502 Bad Gateway</body></html>"));
  EXPECT_FALSE(ParseS3Error("<Error><Message>no code</Message></Error>"));
  EXPECT_FALSE(ParseS3Error("<Error><Code>Trunc"));
}

constexpr const char* kPage = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated>
  <NextContinuationToken>tok/en+=</NextContinuationToken>
  <Contents><Key>p/a &amp; b</Key><Size>10</Size><ETag>&quot;e1&quot;</ETag></Contents>
  <Contents><Key>p/c&lt;d</Key><Size>0</Size><ETag>"e2"</ETag></Contents>
</ListBucketResult>)";

TEST(ListObjectsV2, ParsesKeysSizesEtagsAndTheNextToken) {
  Result<ListPage> page = ParseListObjectsV2(kPage);
  ASSERT_TRUE(page.ok()) << page.error().message;
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].name, "p/a & b");
  EXPECT_EQ(page->objects[0].size, 10u);
  EXPECT_EQ(page->objects[0].etag, "\"e1\"");
  EXPECT_EQ(page->objects[1].name, "p/c<d");
  EXPECT_EQ(page->objects[1].size, 0u);
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "tok/en+=");
}

TEST(ListObjectsV2, DecodesUrlEncodedKeys) {
  Result<ListPage> page = ParseListObjectsV2(
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
      "<Contents><Key>a+b%2Bc%2Fd%C3%A9</Key><Size>1</Size></Contents></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.error().message;
  EXPECT_EQ(page->objects.at(0).name, "a b+c/d\xC3\xA9");
  EXPECT_FALSE(page->truncated);
}

TEST(ListObjectsV2, TheLastPageNeedsNoToken) {
  Result<ListPage> page =
      ParseListObjectsV2("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>");
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->objects.empty());
}

TEST(ListObjectsV2, RefusesWhatItCannotTrust) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "not XML"},
      {"<Error><Code>x</Code></Error>", "<Error>"},
      {"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
       "NextContinuationToken"},
      {"<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>", "IsTruncated"},
      {"<ListBucketResult></ListBucketResult>", "IsTruncated"},
      {"<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key>"
       "<Size>-1</Size></Contents></ListBucketResult>",
       "Size"},
      {"<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key>"
       "<Size>99999999999999999999</Size></Contents></ListBucketResult>",
       "Size"},
      {"<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Size>1</Size>"
       "</Contents></ListBucketResult>",
       "Key"},
      {"<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
       "<Contents><Key>bad%zz</Key><Size>1</Size></Contents></ListBucketResult>",
       "Key"},
      {"<ListBucketResult><EncodingType>gzip</EncodingType></ListBucketResult>", "EncodingType"},
  };
  for (const auto& [xml, says] : cases) {
    Result<ListPage> page = ParseListObjectsV2(xml);
    ASSERT_FALSE(page.ok()) << xml;
    EXPECT_EQ(page.error().code, EIO);
    EXPECT_NE(page.error().message.find(says), std::string::npos) << page.error().message;
  }
}

TEST(UrlEncoding, EncodesAsSigV4Signs) {
  EXPECT_EQ(EncodePath("a b/c+d/e~f_g.h-i"), "a%20b/c%2Bd/e~f_g.h-i");
  EXPECT_EQ(EncodePath("caf\xC3\xA9?#%"), "caf%C3%A9%3F%23%25");
  EXPECT_EQ(EncodeQueryValue("a/b=c&d"), "a%2Fb%3Dc%26d");
  EXPECT_EQ(PercentDecode("a%2Fb+c", false), "a/b+c");
  EXPECT_EQ(PercentDecode("a%2fb+c", true), "a/b c");
  EXPECT_FALSE(PercentDecode("%4", false));
  EXPECT_FALSE(PercentDecode("%", false));
  EXPECT_FALSE(PercentDecode("%g0", false));
}

TEST(Backoff, StaysWithinTheExponentialBoundAndTheCap) {
  std::mt19937_64 random(1);
  const BackoffPolicy policy{std::chrono::milliseconds(50), std::chrono::milliseconds(2'000)};
  for (unsigned retry = 0; retry < 70; ++retry) {
    const int64_t bound = std::min<int64_t>(2'000, retry < 20 ? 50ll << retry : 2'000);
    int64_t longest = 0;
    for (int i = 0; i < 200; ++i) {
      const int64_t ms = BackoffDelay(retry, random, policy).count();
      ASSERT_GE(ms, 0);
      ASSERT_LE(ms, bound) << "retry " << retry;
      longest = std::max(longest, ms);
    }
    EXPECT_GT(longest, bound / 2) << "retry " << retry << ": full jitter spans the bound";
  }
}

TEST(LatencyHistogram, PercentilesLandNearTheValues) {
  LatencyHistogram histogram;
  EXPECT_EQ(histogram.PercentileMs(0.5), 0.0);
  for (int i = 0; i < 98; ++i) histogram.Record(std::chrono::milliseconds(10));
  histogram.Record(std::chrono::milliseconds(500));
  histogram.Record(std::chrono::milliseconds(500));
  EXPECT_EQ(histogram.count(), 100u);
  EXPECT_NEAR(histogram.PercentileMs(0.5), 10.0, 1.0);
  EXPECT_NEAR(histogram.PercentileMs(0.99), 500.0, 50.0);
}

}  // namespace
}  // namespace gpufs::remote
