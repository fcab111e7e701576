#include "source/remote/credentials/tls.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpufs::remote {

Result<std::string> PickCaBundle(
    const std::vector<std::pair<std::string_view, std::string>>& candidates) {
  // A bundle is a few hundred KiB; a FIFO or a device named by mistake is not read at all.
  constexpr uint64_t kMaxBundle = 64 << 20;
  for (const auto& [from, path] : candidates) {
    if (path.empty()) continue;
    // Refused here, at mount, rather than by every request later with curl's error 77.
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      return Fail(errno, "cannot read the CA bundle {} ({}): {}", path, from, strerror(errno));
    }
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > kMaxBundle) {
      return Fail(EINVAL, "cannot use the CA bundle {} ({}): not a regular file of at most 64 MiB",
                  path, from);
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return Fail(errno != 0 ? errno : EIO, "cannot read the CA bundle {} ({}): {}", path, from,
                  strerror(errno != 0 ? errno : EIO));
    }
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return Fail(EINVAL, "cannot use the CA bundle {} ({}): it holds no PEM certificate", path,
                  from);
    }
    // Absolute: the daemon leaves its working folder when it detaches.
    return std::filesystem::absolute(path).string();
  }
  return std::string();
}

void SetTls(CURL* easy, bool verify, const std::string& ca_bundle) {
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, verify ? 1L : 0L);
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, verify ? 2L : 0L);
  if (!ca_bundle.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, ca_bundle.c_str());
}

std::string TlsHint(CURLcode code, bool s3) {
  if (code == CURLE_PEER_FAILED_VERIFICATION) {
    return fmt::format(
        "; if the server's certificate comes from a private CA, name the CA with --ca-bundle "
        "FILE (or {})",
        s3 ? "AWS_CA_BUNDLE, or ca_bundle in the profile" : "SSL_CERT_FILE or CURL_CA_BUNDLE");
  }
  if (code == CURLE_SSL_CACERT_BADFILE) return "; check the file given to --ca-bundle";
  return "";
}

}  // namespace gpufs::remote
