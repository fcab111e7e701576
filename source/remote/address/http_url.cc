#include "source/remote/address/http_url.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "source/remote/address/url.h"

namespace gpufs::remote {
namespace {

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// RFC 3986's unreserved, sub-delims, ':' '@' '/' and '%' (an escape): what a path or a
// query may hold as typed. '?' may also stand in a query.
bool AllowedAsTyped(char c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("-._~!$&'()*+,;=:@/%?", c) != nullptr && c != '\0';
}

// `text` with every byte a URL cannot hold %-encoded, and a '%' that starts no escape too.
std::string EncodeDisallowed(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool escape = c == '%' && i + 2 < text.size() && IsHex(text[i + 1]) && IsHex(text[i + 2]);
    if (AllowedAsTyped(c) && (c != '%' || escape)) {
      out += c;
      continue;
    }
    const auto byte = static_cast<unsigned char>(c);
    out += '%';
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

}  // namespace

std::string ShownQuery(std::string_view query) { return query.empty() ? "" : "?…"; }

std::string HttpUrl::Shown() const { return origin + path + ShownQuery(query); }

Result<HttpUrl> ParseHttpUrl(std::string_view typed) {
  const size_t scheme_end = typed.find("://");
  HttpUrl url;
  const size_t authority_at = scheme_end + 3;
  const size_t authority_end = std::min(typed.find_first_of("/?#", authority_at), typed.size());
  std::string_view authority = typed.substr(authority_at, authority_end - authority_at);
  const size_t at = authority.rfind('@');
  std::string_view userinfo;
  if (at != std::string_view::npos) {
    userinfo = authority.substr(0, at);
    authority.remove_prefix(at + 1);
  }
  url.origin = std::string(typed.substr(0, authority_at)) + std::string(authority);
  std::string_view rest = typed.substr(authority_end);
  const size_t hash = rest.find('#');
  const std::string_view fragment =
      hash == std::string_view::npos ? std::string_view() : rest.substr(hash);
  rest = rest.substr(0, hash);
  const size_t question = rest.find('?');
  url.path = EncodeDisallowed(rest.substr(0, question));
  if (url.path.empty()) url.path = "/";
  if (question != std::string_view::npos) url.query = EncodeDisallowed(rest.substr(question + 1));
  if (authority.empty()) return Fail(EINVAL, "cannot use {}: no host", url.Shown());
  if (!fragment.empty()) {
    return Fail(EINVAL,
                "cannot use {}: a '#' starts a fragment, which is never sent to the server; "
                "type a '#' in a file name as %23 (and a '?' as %3F)",
                url.Shown());
  }
  if (!userinfo.empty()) {
    const size_t colon = userinfo.find(':');
    auto user = PercentDecode(userinfo.substr(0, colon), false);
    std::optional<std::string> password;
    if (colon != std::string_view::npos)
      password = PercentDecode(userinfo.substr(colon + 1), false);
    if (!user || (colon != std::string_view::npos && !password)) {
      return Fail(EINVAL, "cannot use {}: its user or password holds a malformed %-escape",
                  url.Shown());
    }
    url.user = std::move(*user);
    url.password = std::move(password);
  }
  return url;
}

// Overwrites the value of each `name=` parameter of the query in `arg` (from `query_at`).
static void HideParameter(char* arg, size_t query_at, std::string_view name) {
  const std::string_view text(arg);
  for (size_t at = query_at; at < text.size();) {
    const size_t end = std::min(text.find('&', at), text.size());
    const std::string_view parameter = text.substr(at, end - at);
    if (parameter.size() > name.size() && parameter.starts_with(name) &&
        parameter[name.size()] == '=') {
      std::memset(arg + at + name.size() + 1, '*', parameter.size() - name.size() - 1);
    }
    at = end + 1;
  }
}

void HideSecretsInPlace(char* arg) {
  const std::string_view text(arg);
  if (!text.starts_with("http://") && !text.starts_with("https://")) return;
  const size_t authority_at = text.find("://") + 3;
  const size_t end = std::min(text.find_first_of("/?#", authority_at), text.size());
  const size_t query = text.find('?', authority_at);
  if (query != std::string_view::npos) {
    for (const std::string_view name : {"X-Amz-Signature", "X-Amz-Security-Token"}) {
      HideParameter(arg, query + 1, name);
    }
  }
  const size_t at = text.substr(0, end).rfind('@');
  if (at == std::string_view::npos || at < authority_at) return;
  const size_t colon = text.substr(0, at).find(':', authority_at);
  if (colon == std::string_view::npos) return;
  std::memset(arg + colon + 1, '*', at - colon - 1);
}

std::string SafeNetrcFile(const std::map<std::string, std::string>& env, std::string& warning) {
  std::string path;
  if (auto it = env.find("NETRC"); it != env.end()) path = it->second;
  if (path.empty()) {
    auto home = env.find("HOME");
    if (home == env.end() || home->second.empty()) return "";
    path = home->second + "/.netrc";
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  if (!S_ISREG(st.st_mode)) {
    warning = fmt::format("not using {} for HTTP credentials: not a regular file", path);
    return "";
  }
  if (st.st_uid != getuid()) {
    warning = fmt::format(
        "not using {} for HTTP credentials: it belongs to uid {}, not to this user ({})", path,
        st.st_uid, getuid());
    return "";
  }
  if ((st.st_mode & 077) != 0) {
    warning = fmt::format(
        "not using {} for HTTP credentials: others may read or change it (mode {:04o}); "
        "`chmod 600 {}` makes it private",
        path, st.st_mode & 07777, path);
    return "";
  }
  return path;
}

}  // namespace gpufs::remote
