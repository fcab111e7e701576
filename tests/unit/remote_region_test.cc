// Learning a bucket's region from a wrong-region answer, as the AWS CLI does.
#include "source/remote/address/region.h"

#include <gtest/gtest.h>

namespace gpufs::remote {
namespace {

Reply Answer(long status, std::string header, std::string body) {
  Reply reply;
  reply.status = status;
  reply.bucket_region = std::move(header);
  reply.text = std::move(body);
  return reply;
}

TEST(RegionOfAnswer, PermanentRedirectNamesItInTheHeaderOrBody) {
  EXPECT_EQ(RegionOfAnswer(Answer(301, "eu-west-1", "")), "eu-west-1");  // a HEAD: no body
  EXPECT_EQ(RegionOfAnswer(Answer(301, "",
                                  "<Error><Code>PermanentRedirect</Code><Message>m</Message>"
                                  "<Region>ap-south-2</Region></Error>")),
            "ap-south-2");
}

TEST(RegionOfAnswer, AuthorizationHeaderMalformedNamesItInTheMessage) {
  EXPECT_EQ(RegionOfAnswer(
                Answer(400, "",
                       "<Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization "
                       "header is malformed; the region 'us-east-1' is wrong; expecting "
                       "'eu-west-1'</Message></Error>")),
            "eu-west-1");
  EXPECT_EQ(RegionOfAnswer(Answer(400, "eu-west-1", "")), "eu-west-1");
}

TEST(RegionOfAnswer, OtherAnswersAndOddNamesAreNotRegions) {
  EXPECT_FALSE(RegionOfAnswer(Answer(200, "eu-west-1", "")));  // a HEAD bucket's own header
  EXPECT_FALSE(RegionOfAnswer(Answer(403, "eu-west-1", "")));
  EXPECT_FALSE(
      RegionOfAnswer(Answer(400, "eu-west-1", "<Error><Code>InvalidArgument</Code></Error>")));
  EXPECT_FALSE(RegionOfAnswer(Answer(301, "", "")));
  EXPECT_FALSE(RegionOfAnswer(Answer(301, "evil.com/x", "")));
  EXPECT_FALSE(RegionOfAnswer(Answer(301, "EU West", "")));
}

TEST(BucketRegion, MovesAwsRequestsToTheRegionsEndpointOnly) {
  BucketRegion aws("us-east-1", "https://s3.us-east-1.amazonaws.com");
  EXPECT_EQ(aws.Retarget("https://s3.us-east-1.amazonaws.com/b/k"),
            "https://s3.us-east-1.amazonaws.com/b/k");
  EXPECT_TRUE(aws.Learn("eu-west-1"));
  EXPECT_FALSE(aws.Learn("eu-west-1"));
  EXPECT_EQ(aws.Get(), "eu-west-1");
  EXPECT_EQ(aws.Retarget("https://s3.us-east-1.amazonaws.com/b/s3.us-east-1.amazonaws.com"),
            "https://s3.eu-west-1.amazonaws.com/b/s3.us-east-1.amazonaws.com");
  EXPECT_EQ(aws.Retarget("https://bkt.s3.us-east-1.amazonaws.com/k"),
            "https://bkt.s3.eu-west-1.amazonaws.com/k");
  BucketRegion own("us-east-1", "http://127.0.0.1:7480");
  own.Learn("eu-test-1");
  EXPECT_EQ(own.Get(), "eu-test-1");
  EXPECT_EQ(own.Retarget("http://127.0.0.1:7480/b/k"), "http://127.0.0.1:7480/b/k");
}

TEST(MoveToRegion, SetsTheRegionAndOnAwsTheEndpoint) {
  StoreConfig aws;
  aws.region = "us-east-1";
  aws.endpoint = "https://s3.us-east-1.amazonaws.com";
  MoveToRegion(aws, "eu-west-1");
  EXPECT_EQ(aws.region, "eu-west-1");
  EXPECT_EQ(aws.endpoint, "https://s3.eu-west-1.amazonaws.com");
  StoreConfig own;
  own.endpoint = "https://minio.lan:9000";
  MoveToRegion(own, "eu-west-1");
  EXPECT_EQ(own.region, "eu-west-1");
  EXPECT_EQ(own.endpoint, "https://minio.lan:9000");
}

}  // namespace
}  // namespace gpufs::remote
