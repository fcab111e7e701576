#include "source/remote/credentials/credential_trust.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "base/private_files.h"
#include "source/remote/address/http_url.h"

namespace gpufs::remote {
namespace {

std::string FixFor(const std::string& path, const std::string& reason) {
  if (reason.starts_with("others may write")) return fmt::format("chmod go-w {}", path);
  if (reason.starts_with("it is owned by")) {
    return "run gpufsd as the file's owner, or name a file of yours or root's (HOME, "
           "AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE, the profile's settings)";
  }
  return "name a regular file";
}

bool IsAllowedAddress(const sockaddr* address, bool agent) {
  if (address->sa_family == AF_INET) {
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr);
    if ((ip >> 24) == 127) return true;
    return agent && (ip == 0xA9FEAA02 || ip == 0xA9FEAA17);  // 169.254.170.2 and .23
  }
  if (address->sa_family == AF_INET6) {
    const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&ip)) return true;
    in6_addr eks{};
    inet_pton(AF_INET6, "fd00:ec2::23", &eks);
    return agent && std::memcmp(&ip, &eks, sizeof(ip)) == 0;
  }
  return false;
}

// The host of "http://host:port" or "http://[v6]:port", brackets removed.
std::string HostOf(std::string_view origin) {
  std::string_view authority = origin.substr(origin.find("://") + 3);
  if (authority.starts_with('[')) return std::string(authority.substr(1, authority.find(']') - 1));
  return std::string(authority.substr(0, authority.rfind(':')));
}

}  // namespace

Result<std::optional<std::string>> ReadTrustedFile(const std::string& path, std::string_view what,
                                                   size_t max_bytes) {
  Result<UniqueFd> fd = OpenTrustedFile(path, geteuid(), true);
  if (!fd.ok() && fd.error().code == ENOENT) return std::optional<std::string>();
  if (!fd.ok()) {
    return Fail(EPERM, "cannot use {} {}: {}; {}", what, path, fd.error().message,
                FixFor(path, fd.error().message));
  }
  // Read in pieces up to one byte past the cap: a file that grows (or never ends) costs
  // at most the cap, and a small one no more than itself.
  std::string text;
  char piece[16 << 10];
  while (text.size() <= max_bytes) {
    const size_t want = std::min(sizeof(piece), max_bytes + 1 - text.size());
    const ssize_t n = read(fd->get(), piece, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Fail(EIO, "cannot read {} {}: {}", what, path, strerror(errno));
    if (n == 0) break;
    text.append(piece, static_cast<size_t>(n));
  }
  if (text.size() > max_bytes) {
    return Fail(EPERM,
                "cannot use {} {}: it holds more than {} bytes, more than such a file ever needs",
                what, path, max_bytes);
  }
  return std::optional<std::string>(std::move(text));
}

Result<std::string> ReadTokenFile(const std::string& path) {
  Result<std::optional<std::string>> read =
      ReadTrustedFile(path, "the token file", kMaxTokenFileBytes);
  if (!read.ok()) return read.error();
  if (!*read) return Fail(ENOENT, "cannot read the token file {}: {}", path, strerror(ENOENT));
  std::string token = std::move(**read);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return token;
}

Status CheckSecretEndpoint(std::string_view url, std::string_view what, bool agent, bool resolve) {
  if (url.starts_with("https://")) return Ok{};
  const auto refuse = [&](std::string_view why) {
    return Fail(EINVAL, "cannot use {} '{}': {}", what, url, why);
  };
  if (!url.starts_with("http://")) return refuse("not an http:// or https:// URL");
  Result<HttpUrl> parsed = ParseHttpUrl(url);
  if (!parsed.ok()) return refuse(parsed.error().message);
  if (!parsed->user.empty() || parsed->password) {
    return refuse("a user:password@ in a credential endpoint's URL is not allowed");
  }
  const std::string host = HostOf(parsed->origin);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = resolve ? 0 : AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (const int err = getaddrinfo(host.c_str(), nullptr, &hints, &found); err != 0) {
    if (!resolve && err == EAI_NONAME) return Ok{};
    return refuse(fmt::format("cannot resolve {}: {}", host, gai_strerror(err)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, freeaddrinfo);
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (!IsAllowedAddress(a->ai_addr, agent)) {
      return refuse(fmt::format(
          "plain http to {}, which is not loopback{}: credentials and tokens go over https, "
          "or over http only to this machine",
          host, agent ? " or the container agent" : ""));
    }
  }
  return Ok{};
}

}  // namespace gpufs::remote
