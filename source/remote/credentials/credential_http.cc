#include "source/remote/credentials/credential_http.h"

#include <curl/curl.h>

#include <memory>

#include "source/remote/credentials/tls.h"

namespace gpufs::remote {
namespace {

constexpr size_t kMaxAnswer = 1 << 20;

size_t Collect(char* data, size_t size, size_t count, void* out) {
  auto* body = static_cast<std::string*>(out);
  const size_t n = size * count;
  if (body->size() + n > kMaxAnswer) return 0;
  body->append(data, n);
  return n;
}

struct EasyDeleter {
  void operator()(CURL* easy) const { curl_easy_cleanup(easy); }
};
struct ListDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

std::string StringField(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

Result<HttpAnswer> CallHttp(const HttpCall& call) {
  std::unique_ptr<CURL, EasyDeleter> easy(curl_easy_init());
  std::unique_ptr<curl_slist, ListDeleter> headers;
  for (const std::string& header : call.headers) {
    headers.reset(curl_slist_append(headers.release(), header.c_str()));
  }
  HttpAnswer answer;
  char error[CURL_ERROR_SIZE] = {};
  CURL* e = easy.get();
  curl_easy_setopt(e, CURLOPT_URL, call.url.c_str());
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  SetTls(e, true, call.ca_bundle);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);  // keys and tokens go to this host only
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(call.connect_timeout.count()));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(call.timeout.count()));
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Collect);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error);
  if (call.method == "POST" || call.method == "PUT") {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, call.body.c_str());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(call.body.size()));
    if (call.method == "PUT") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
  }
  std::string scope;
  if (call.sigv4) {
    scope = "aws:amz:" + call.sigv4_scope;
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, scope.c_str());
    curl_easy_setopt(e, CURLOPT_USERNAME, call.sigv4->access_key.c_str());
    curl_easy_setopt(e, CURLOPT_PASSWORD, call.sigv4->secret_key.c_str());
  }
  const CURLcode result = curl_easy_perform(e);
  if (result != CURLE_OK) {
    return Fail(EIO, "{}: {}", call.url, error[0] != '\0' ? error : curl_easy_strerror(result));
  }
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &answer.status);
  return answer;
}

Result<CredentialSet> ParseCredentialJson(std::string_view text, bool version_one) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Fail(EINVAL, "the answer is not a JSON object");
  if (version_one && (!j.contains("Version") || j["Version"] != 1)) {
    return Fail(EINVAL, "its JSON has no \"Version\": 1");
  }
  CredentialSet set;
  set.keys.access_key = StringField(j, "AccessKeyId");
  set.keys.secret_key = StringField(j, "SecretAccessKey");
  set.keys.session_token = StringField(j, version_one ? "SessionToken" : "Token");
  if (set.keys.access_key.empty()) return Fail(EINVAL, "its JSON has no AccessKeyId");
  if (set.keys.secret_key.empty()) return Fail(EINVAL, "its JSON has no SecretAccessKey");
  const std::string expiration = StringField(j, "Expiration");
  if (!expiration.empty()) {
    Result<WallClock::time_point> expires = ParseIsoTime(expiration);
    if (!expires.ok()) return Fail(EINVAL, "its Expiration: {}", expires.error().message);
    set.expires = *expires;
  } else if (j.contains("Expiration")) {
    return Fail(EINVAL, "its Expiration is not a string");
  }
  return set;
}

}  // namespace gpufs::remote
