// The integration test's handle on its servers: where they are (GPUFS_TEST_* variables, set
// by run_store_test.py) and the runner's control server, which stores and deletes objects,
// stops and starts servers and sets the fault proxy.
#pragma once

#include <curl/curl.h>

#include <cstdlib>
#include <string>

namespace gpufs::remote::testing {

inline std::string EnvOr(const char* name, const std::string& fallback = "") {
  const char* value = std::getenv(name);
  return value == nullptr ? fallback : value;
}

struct ControlAnswer {
  long status = 0;  // 0: the control server could not be reached
  std::string body;
  bool ok() const { return status == 200; }
};

// One request to the control server; blocks until it answers.
inline ControlAnswer Control(const std::string& method, const std::string& path,
                             const std::string& body = "") {
  ControlAnswer answer;
  CURL* easy = curl_easy_init();
  const std::string url = EnvOr("GPUFS_TEST_CONTROL_URL") + path;
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  if (method == "PUT" || method == "POST") {
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(
      easy, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t count, void* out) {
        static_cast<std::string*>(out)->append(data, size * count);
        return size * count;
      });
  if (curl_easy_perform(easy) == CURLE_OK) {
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &answer.status);
  }
  curl_easy_cleanup(easy);
  return answer;
}

// The control server's path of an object's key: each byte not safe in a path escaped.
inline std::string ObjectPath(const std::string& key) {
  CURL* easy = curl_easy_init();
  char* escaped = curl_easy_escape(easy, key.data(), static_cast<int>(key.size()));
  std::string path = "/s3/object/" + std::string(escaped);
  curl_free(escaped);
  curl_easy_cleanup(easy);
  return path;
}

}  // namespace gpufs::remote::testing
