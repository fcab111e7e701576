#include "source/remote/credentials/sts.h"

#include <pugixml.hpp>

#include "source/remote/address/url.h"
#include "source/remote/credentials/credential_http.h"
#include "source/remote/credentials/credential_trust.h"

namespace gpufs::remote {
namespace {

std::string SessionName(const RoleRequest& role) {
  if (!role.session_name.empty()) return role.session_name;
  return fmt::format("gpufs-{}", WallClock::to_time_t(WallClock::now()));
}

// A form body (application/x-www-form-urlencoded), keys in the order given.
std::string Form(std::initializer_list<std::pair<std::string, std::string>> fields) {
  std::string body;
  for (const auto& [key, value] : fields) {
    if (value.empty()) continue;
    if (!body.empty()) body += "&";
    body += key + "=" + EncodeQueryValue(value);
  }
  return body;
}

Result<CredentialSet> Call(const StsTarget& target, HttpCall call) {
  call.method = "POST";
  call.url = target.endpoint + "/";
  call.ca_bundle = target.ca_bundle;
  call.headers.push_back("Content-Type: application/x-www-form-urlencoded; charset=utf-8");
  call.headers.push_back("Accept: application/xml");
  call.timeout = std::chrono::milliseconds(10'000);
  call.connect_timeout = std::chrono::milliseconds(3000);
  Result<HttpAnswer> answer = CallHttp(call);
  if (!answer.ok()) return answer.error();
  return ParseStsAnswer(answer->status, answer->body);
}

class AssumeRole final : public CredentialSource {
 public:
  AssumeRole(StsTarget target, RoleRequest role, std::unique_ptr<CredentialSource> base)
      : target_(std::move(target)), role_(std::move(role)), base_(std::move(base)) {}

  Result<CredentialSet> Fetch() override {
    Result<CredentialSet> base = base_->Fetch();
    if (!base.ok()) return Failure(base.error().message);
    HttpCall call;
    call.body = Form({{"Action", "AssumeRole"},
                      {"DurationSeconds", role_.duration_s},
                      {"ExternalId", role_.external_id},
                      {"RoleArn", role_.role_arn},
                      {"RoleSessionName", SessionName(role_)},
                      {"Version", "2011-06-15"}});
    call.sigv4 = base->keys;
    call.sigv4_scope = target_.region + ":sts";
    if (!base->keys.session_token.empty()) {
      call.headers.push_back("X-Amz-Security-Token: " + base->keys.session_token);
    }
    Result<CredentialSet> set = Call(target_, std::move(call));
    if (!set.ok()) return Failure(set.error().message);
    return set;
  }

  std::string Describe() const override {
    return fmt::format("role {} of {} via STS {}", role_.role_arn, role_.origin, target_.endpoint);
  }
  bool Changed() override { return base_->Changed(); }

 private:
  Error Failure(const std::string& why) const {
    return Fail(EACCES, "cannot assume role {} of {}: {}", role_.role_arn, role_.origin, why);
  }

  StsTarget target_;
  RoleRequest role_;
  std::unique_ptr<CredentialSource> base_;
};

class WebIdentity final : public CredentialSource {
 public:
  WebIdentity(StsTarget target, RoleRequest role, std::string token_file)
      : target_(std::move(target)), role_(std::move(role)), token_file_(std::move(token_file)) {}

  Result<CredentialSet> Fetch() override {
    Result<std::string> token = ReadTokenFile(token_file_);
    if (!token.ok()) return Failure(token.error().message);
    const std::string& text = *token;
    if (text.empty()) return Failure("the token file is empty");
    HttpCall call;
    call.body = Form({{"Action", "AssumeRoleWithWebIdentity"},
                      {"RoleArn", role_.role_arn},
                      {"RoleSessionName", SessionName(role_)},
                      {"Version", "2011-06-15"},
                      {"WebIdentityToken", text}});
    Result<CredentialSet> set = Call(target_, std::move(call));
    if (!set.ok()) return Failure(set.error().message);
    return set;
  }

  std::string Describe() const override {
    return fmt::format("web identity (role {}) via STS {}", role_.role_arn, target_.endpoint);
  }

 private:
  Error Failure(const std::string& why) const {
    return Fail(EACCES, "cannot assume role {} with web identity from {} ({}): {}", role_.role_arn,
                token_file_, role_.origin, why);
  }

  StsTarget target_;
  RoleRequest role_;
  std::string token_file_;
};

}  // namespace

Result<CredentialSet> ParseStsAnswer(long status, std::string_view xml) {
  pugi::xml_document doc;
  if (!doc.load_buffer(xml.data(), xml.size())) {
    return Fail(EACCES, "STS answered HTTP {} with no XML", status);
  }
  const pugi::xml_node root = doc.document_element();
  if (status != 200 || std::string_view(root.name()) == "ErrorResponse") {
    const pugi::xml_node error = root.child("Error") ? root.child("Error") : root;
    return Fail(EACCES, "STS answered {} {}: {}", status, error.child("Code").text().get(),
                error.child("Message").text().get());
  }
  pugi::xml_node result;
  for (const pugi::xml_node child : root.children()) {
    if (std::string_view(child.name()).ends_with("Result")) result = child;
  }
  const pugi::xml_node keys = result.child("Credentials");
  CredentialSet set;
  set.keys = {keys.child("AccessKeyId").text().get(), keys.child("SecretAccessKey").text().get(),
              keys.child("SessionToken").text().get()};
  if (set.keys.access_key.empty() || set.keys.secret_key.empty()) {
    return Fail(EACCES, "STS answered <{}> without Credentials", root.name());
  }
  const std::string expiration = keys.child("Expiration").text().get();
  if (!expiration.empty()) {
    Result<WallClock::time_point> expires = ParseIsoTime(expiration);
    if (!expires.ok()) return Fail(EACCES, "STS's Expiration: {}", expires.error().message);
    set.expires = *expires;
  }
  return set;
}

std::unique_ptr<CredentialSource> AssumeRoleSource(StsTarget target, RoleRequest role,
                                                   std::unique_ptr<CredentialSource> base) {
  return std::make_unique<AssumeRole>(std::move(target), std::move(role), std::move(base));
}

std::unique_ptr<CredentialSource> WebIdentitySource(StsTarget target, RoleRequest role,
                                                    std::string token_file) {
  return std::make_unique<WebIdentity>(std::move(target), std::move(role), std::move(token_file));
}

}  // namespace gpufs::remote
