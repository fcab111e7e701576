// An http(s) source URL as the user typed it, and what is sent and shown of it.
//
// One rule for the whole URL: what the user typed is what is requested. A typed URL is
// taken as already encoded ("with%20space.tar" names the file "with space.tar"); only
// bytes a URL cannot hold (a space, a quote, a byte above 127) are %-encoded, so a '#' or
// '?' in a file name is typed %23 or %3F. A '?query' is kept verbatim on every request to
// the object the URL names (a presigned URL's signature); a '#fragment' is never sent, so
// it is refused. "user:password@" gives HTTP basic credentials for that host alone.
//
// Messages, logs, the mount table and user.gpufs.source show the URL without its user and
// password, and with a query as "?…": a query may hold a signature.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"

namespace gpufs::remote {

struct HttpUrl {
  std::string origin;  // "https://host:port", no user or password
  std::string path;    // "/" at least; encoded as typed, bytes a URL cannot hold %-encoded
  std::string query;   // without the '?', verbatim; empty: none
  std::string user;    // %-decoded; empty: none
  std::optional<std::string> password;  // %-decoded
  // How messages name it: origin + path, and "?…" for a query.
  std::string Shown() const;
};

// Errors (EINVAL) name the URL as Shown, never its password.
Result<HttpUrl> ParseHttpUrl(std::string_view typed);

// A query shown in a message: "?…", or nothing for none.
std::string ShownQuery(std::string_view query);

// Overwrites, in place, the secrets of an http(s) URL with '*': the password of its
// "user:password@", and the values of a presigned query's X-Amz-Signature and
// X-Amz-Security-Token, so that the process's argv (ps, /proc/PID/cmdline) stops showing
// them. Other text is left.
void HideSecretsInPlace(char* arg);

// The .netrc file curl may take HTTP credentials from: $NETRC, else $HOME/.netrc; empty
// when there is none. One that others could read or write, or that another user owns, is
// not used: `warning` then says why (a file of passwords is kept private, as ssh keeps its
// keys).
std::string SafeNetrcFile(const std::map<std::string, std::string>& env, std::string& warning);

}  // namespace gpufs::remote
