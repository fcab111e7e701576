#include "source/remote/address/peers.h"

#include <xxhash.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace gpufs::remote {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Why `url` cannot name a peer, or empty when it can; `url` loses a trailing '/'.
std::string CheckPeerUrl(std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "want http://HOST[:PORT]";
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") return "want http:// or https://";
  if (url.size() > scheme_end + 3 && url.ends_with('/')) url.pop_back();
  const std::string_view rest = std::string_view(url).substr(scheme_end + 3);
  if (rest.empty()) return "no host";
  if (rest.find_first_of("/?#") != std::string_view::npos) {
    return "a peer is a proxy's address: no path, query or fragment";
  }
  if (rest.find('@') != std::string_view::npos) return "no user or password in a peer's URL";
  if (std::any_of(rest.begin(), rest.end(),
                  [](unsigned char c) { return c <= ' ' || c == '"' || c == '\\' || c >= 0x7f; })) {
    return "blanks, quotes and backslashes have no place in a peer's address";
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos && rest.back() != ']') {
    const std::string_view port = rest.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return "the port is not a number";
    }
  }
  return {};
}

}  // namespace

Result<std::vector<std::string>> ParsePeerList(std::string_view list) {
  std::vector<std::string> urls;
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    std::string url(Trim(list.substr(start, comma - start)));
    start = comma + 1;
    if (url.empty()) continue;
    if (std::string why = CheckPeerUrl(url); !why.empty()) {
      return Fail(EINVAL, "cannot use peer '{}': {}", url, why);
    }
    if (!seen.insert(url).second) return Fail(EINVAL, "cannot use peer '{}': listed twice", url);
    urls.push_back(std::move(url));
  }
  if (urls.empty()) return Fail(EINVAL, "cannot use the peer list '{}': it names no peer", list);
  return urls;
}

Result<std::vector<std::string>> ReadPeerFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Fail(ENOENT, "cannot read peer file {}: {}", path.string(), strerror(errno));
  std::string joined;
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view text = Trim(std::string_view(line).substr(0, line.find('#')));
    if (text.empty()) continue;
    if (text.find(',') != std::string_view::npos || text.find(' ') != std::string_view::npos) {
      return Fail(EINVAL, "cannot read peer file {}: '{}': one URL per line", path.string(), text);
    }
    joined += std::string(text) + ",";
  }
  auto urls = ParsePeerList(joined);
  if (!urls)
    return Fail(EINVAL, "cannot read peer file {}: {}", path.string(), urls.error().message);
  return urls;
}

namespace {

constexpr size_t kMinSecret = 16;
constexpr size_t kMaxSecret = 512;

// Up to `most` bytes of a regular file no other user may read or write. Opened without
// waiting: a fifo at the path is refused below, not waited on for a writer.
Result<std::string> ReadPrivateFile(const std::filesystem::path& path, size_t most) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return Fail(errno, "cannot read {}: {}", path.string(), strerror(errno));
  struct stat st {};
  std::string text(most, '\0');
  ssize_t n = -1;
  int error = 0;
  // Owned by this user or root: a file another user owns is theirs to read or replace.
  const auto trusted_owner = [&st] { return st.st_uid == geteuid() || st.st_uid == 0; };
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) == 0 && trusted_owner()) {
    n = read(fd, text.data(), text.size());
    error = errno;
  }
  close(fd);
  if (!S_ISREG(st.st_mode)) return Fail(EINVAL, "cannot use {}: not a regular file", path.string());
  if ((st.st_mode & 077) != 0) {
    return Fail(EACCES, "cannot use {}: other users may read it (mode {:o}); chmod 600 it",
                path.string(), st.st_mode & 07777);
  }
  if (!trusted_owner()) {
    return Fail(EACCES, "cannot use {}: owned by uid {}, neither you (uid {}) nor root",
                path.string(), st.st_uid, geteuid());
  }
  if (n < 0) return Fail(error, "cannot read {}: {}", path.string(), strerror(error));
  text.resize(static_cast<size_t>(n));
  return text;
}

// What deploy/gpufs-peer-config accepts too: a word safe in a cookie and in nginx's config.
bool IsSecretWord(std::string_view text) {
  return text.size() >= kMinSecret && text.size() <= kMaxSecret &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) {
           return std::isalnum(c) || c == '.' || c == '_' || c == '~' || c == '-';
         });
}

}  // namespace

Result<std::string> ReadPeerSecret(const std::filesystem::path& path) {
  // One byte more than a secret and its newline: a longer file is refused, not cut.
  auto text = ReadPrivateFile(path, kMaxSecret + 2);
  if (!text) return Fail(text.error().code, "peer secret file: {}", text.error().message);
  std::string_view word(*text);
  if (word.ends_with('\n')) word.remove_suffix(1);
  if (!IsSecretWord(word)) {
    return Fail(EINVAL,
                "cannot use peer secret file {}: want one word of {} to {} letters, digits and "
                "'._~-' (e.g. openssl rand -hex 32)",
                path.string(), kMinSecret, kMaxSecret);
  }
  return std::string(word);
}

struct PeerSet::Peer : peer_stat::Counters {
  std::mutex mu;
  bool down = false;           // guarded by mu
  bool probing = false;        // guarded by mu: one request is trying a down peer
  Clock::time_point retry_at;  // guarded by mu
};

PeerSet::PeerSet(PeerConfig config)
    : config_(std::move(config)),
      seeds_([this] {
        std::vector<uint64_t> seeds;
        for (const std::string& url : config_.urls)
          seeds.push_back(XXH3_64bits(url.data(), url.size()));
        return seeds;
      }()),
      peers_(std::make_unique<Peer[]>(config_.urls.size())) {}

PeerSet::~PeerSet() = default;

std::vector<uint32_t> PeerSet::Order(std::string_view key) const {
  std::vector<uint64_t> score(size());
  for (size_t i = 0; i < size(); ++i)
    score[i] = XXH3_64bits_withSeed(key.data(), key.size(), seeds_[i]);
  std::vector<uint32_t> order(size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&score](uint32_t a, uint32_t b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  });
  return order;
}

bool PeerSet::MayAsk(uint32_t peer, Clock::time_point now) {
  Peer& p = peers_[peer];
  std::lock_guard lock(p.mu);
  if (!p.down) return true;
  if (p.probing || now < p.retry_at) return false;
  p.probing = true;
  return true;
}

void PeerSet::Answered(uint32_t peer, uint64_t bytes) {
  Peer& p = peers_[peer];
  p.requests.fetch_add(1, std::memory_order_relaxed);
  p.bytes.fetch_add(bytes, std::memory_order_relaxed);
  std::lock_guard lock(p.mu);
  p.probing = false;
  if (!p.down) return;
  p.down = false;
  spdlog::info("peer {} answers again; its blocks go to it again", url(peer));
}

void PeerSet::Failed(uint32_t peer, const std::string& reason, Clock::time_point now) {
  Peer& p = peers_[peer];
  p.requests.fetch_add(1, std::memory_order_relaxed);
  p.failures.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(p.mu);
  p.probing = false;
  p.retry_at = now + config_.retry_after;
  if (p.down) return;
  p.down = true;
  spdlog::warn(
      "peer {} failed ({}); its blocks go to the next peer, or the store, until it "
      "answers again (tried every {} ms)",
      url(peer), reason, config_.retry_after.count());
}

nlohmann::json PeerSet::Stats() const {
  nlohmann::json all = nlohmann::json::array();
  for (size_t i = 0; i < size(); ++i) {
    Peer& p = peers_[i];
    bool up = false;
    {
      std::lock_guard lock(p.mu);
      up = !p.down;
    }
    nlohmann::json j{{peer_stat::kUrl, url(i)}, {peer_stat::kUp, up}};
    PutCounts(j, peer_stat::kCounterFigures, p);
    all.push_back(std::move(j));
  }
  return all;
}

}  // namespace gpufs::remote
