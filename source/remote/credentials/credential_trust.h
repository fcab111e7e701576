// What a credential source may act on. A daemon that runs as root reads the AWS files and
// token files that its environment names (HOME, AWS_CONFIG_FILE, a profile's
// web_identity_token_file) and calls the endpoints they name. Whoever can write those
// files could make root run their credential_process or send a root-only file to a
// server of their choosing; so the files must be root's or the daemon user's, and secrets
// go over plain http only to this machine or to the container agent.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"

namespace gpufs::remote {

// The most a token file may hold: STS takes a web identity token of at most 20,000
// characters, and a container's Authorization token is far shorter.
inline constexpr size_t kMaxTokenFileBytes = 20 << 10;
// The most one of the AWS files may hold.
inline constexpr size_t kMaxAwsFileBytes = 1 << 20;

// The contents of `path` (`what` names it in messages: "the AWS config file"), or nullopt
// when there is no such file. Refused (EPERM), naming the file, the reason and the fix: a
// file that is not regular, owned by neither this user nor root, writable by group or
// others (OpenTrustedFile), or larger than `max_bytes`. A link is followed and its target
// checked.
Result<std::optional<std::string>> ReadTrustedFile(const std::string& path, std::string_view what,
                                                   size_t max_bytes);

// A token file's contents (ReadTrustedFile, kMaxTokenFileBytes) without its line end; a
// missing file is an error. Read anew at each fetch: Kubernetes rotates it.
Result<std::string> ReadTokenFile(const std::string& path);

// Whether secrets may be sent to `url`: https anywhere; plain http only when every address
// its host resolves to is loopback, or (with `agent`) the ECS or EKS container agent's
// (169.254.170.2, 169.254.170.23, fd00:ec2::23), as the AWS SDKs decide. A user:password@
// is refused (it hides the real host from a reader). EINVAL names `what` and the URL.
// Without `resolve` (nothing will be sent: a chain built only to be checked), a host name
// is not looked up and passes; an address is still checked.
Status CheckSecretEndpoint(std::string_view url, std::string_view what, bool agent,
                           bool resolve = true);

}  // namespace gpufs::remote
