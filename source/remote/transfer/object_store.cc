// ObjectStore: what each call asks of the server (URL, headers, sink) and what its answer
// must hold (responses.h); the transfers themselves run on the loop (transfer_loop.h).
#include "source/remote/transfer/object_store.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <limits>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "dataset/format/checksums.h"
#include "source/blob_source.h"
#include "source/remote/address/http_url.h"
#include "source/remote/address/s3_xml.h"
#include "source/remote/address/url.h"
#include "source/remote/credentials/credentials.h"
#include "source/remote/transfer/gather.h"
#include "source/remote/transfer/hash_workers.h"
#include "source/remote/transfer/responses.h"
#include "source/remote/transfer/store_loops.h"
#include "source/remote/transfer/store_requests.h"
#include "source/remote/transfer/store_stats.h"
#include "source/remote/transfer/transfer_loop.h"

namespace gpufs::remote {
namespace {

// Answers from a peer about the object itself (another ETag, a 4xx) are logged this many
// times, then only counted: a changed object would log once per block.
constexpr uint64_t kLoggedPeerAnswers = 10;

// A peer's 401 or 403: the peer's nginx refuses a request without the job's secret. (A
// store's own refusal passed on by the peer counts the same; the store then answers the
// block itself.)
bool IsRefusal(long status) { return status == 401 || status == 403; }

}  // namespace

// One block of a GET, on its way through the peers to the store.
struct ObjectStore::Block {
  std::string name;    // relative to the root
  std::string object;  // as messages name it
  uint64_t offset = 0;
  size_t length = 0;
  char* buffer = nullptr;
  std::optional<ObjectInfo> expected;
  std::vector<uint32_t> order;  // the peers, the first choice first
  // Of a read through peers: which peer served each of its blocks (-1: the store).
  std::shared_ptr<std::vector<int>> served_by;
  size_t index = 0;
  std::function<void(Result<size_t>)> done;
  // After this, a peer's failure sends the block to the store rather than the next peer:
  // peers that all trickle cost a read about two deadlines, not one per peer.
  PeerSet::Clock::time_point peers_until{};
  // When the read began: the store's retry deadline counts from here once the peers have
  // failed, so that a read through peers ends within the same deadline as a direct one.
  std::optional<std::chrono::steady_clock::time_point> since{};
  unsigned max_attempts = 0;  // 0: until the retry deadline
  bool urgent = false;        // a reader waits on it (GetRequest::urgent)
};

ObjectStore::ObjectStore(StoreConfig config)
    : config_(std::move(config)), impl_(std::make_unique<StoreLoops>(config_)) {}

ObjectStore::~ObjectStore() = default;

std::string ObjectStore::Describe(const std::string& name) const {
  if (config_.scheme == Scheme::kS3) return "s3://" + config_.bucket + "/" + config_.root + name;
  // The URL as requested, a query (a presigned signature) shown as "?…".
  const std::string url = UrlOf(config_, name, "", false);
  const size_t query = url.find('?');
  if (query == std::string::npos) return url;
  return url.substr(0, query) + ShownQuery(std::string_view(url).substr(query + 1));
}

void ObjectStore::Get(GetRequest request, std::function<void(Result<size_t>)> done) {
  auto finish = impl_->Track(std::move(done));
  const std::string object = Describe(request.name);
  if (request.length == 0 ||
      request.offset > std::numeric_limits<uint64_t>::max() - request.length) {
    Result<size_t> outcome =
        request.length == 0
            ? Result<size_t>(size_t{0})
            : Fail(EINVAL, "cannot read {}: offset {} is past any object", object, request.offset);
    impl_->Loop().Post([finish, outcome] { finish(outcome); });
    return;
  }
  // Only an answer that can be checked against the object's ETag and the digests of every
  // member it holds may come from a peer.
  const bool via_peers =
      !request.one_attempt && impl_->peers && request.expected && !request.expected->etag.empty() &&
      request.digests &&
      request.digests->WholeMembers(request.blob, request.offset, request.offset + request.length);
  if (!via_peers) {
    GetDirect(Block{request.name,
                    object,
                    request.offset,
                    request.length,
                    request.buffer,
                    std::move(request.expected),
                    {},
                    nullptr,
                    0,
                    std::move(finish),
                    {},
                    {},
                    request.one_attempt ? 1u : 0u,
                    request.urgent});
    return;
  }
  GetThroughPeers(std::move(request), object, std::move(finish));
}

// A read through peers, once all its blocks are in: which peer sent which block, so that
// a member whose bytes do not match its digest is blamed on the peer that sent them.
struct ObjectStore::PeerRead {
  GetRequest request;
  std::string object;
  std::vector<uint64_t> starts;                 // of each block, in order
  std::shared_ptr<std::vector<int>> served_by;  // each block's peer, -1: the store
  std::function<void(Result<size_t>)> done;
};

// Blocks are the routing unit, the proxies' slice, so that a slice leaves the store for
// one peer only; a member may span two blocks and so two peers, and is checked once the
// whole read is in.
void ObjectStore::GetThroughPeers(GetRequest request, const std::string& object,
                                  std::function<void(Result<size_t>)> finish) {
  const uint64_t size = impl_->peers->block();
  const uint64_t end = request.offset + request.length;
  const uint64_t first = request.offset / size;
  const uint64_t last = (end - 1) / size;
  auto read = std::make_shared<PeerRead>();
  read->object = object;
  read->served_by = std::make_shared<std::vector<int>>(last - first + 1, -1);
  for (uint64_t b = first; b <= last; ++b)
    read->starts.push_back(std::max(request.offset, b * size));
  read->request = std::move(request);
  read->done = std::move(finish);
  const GetRequest& r = read->request;
  auto gather =
      std::make_shared<Gather>(last - first + 1, r.length, [this, read](Result<size_t> got) {
        if (!got) return read->done(std::move(got));
        impl_->hashers->Post([this, read] { CheckPeerRead(read); });
      });
  for (uint64_t b = first; b <= last; ++b) {
    const uint64_t from = std::max(r.offset, b * size);
    const uint64_t to = std::min(end, (b + 1) * size);
    auto block = std::make_shared<Block>();
    block->name = r.name;
    block->object = object;
    block->offset = from;
    block->length = to - from;
    block->buffer = r.buffer + (from - r.offset);
    block->expected = r.expected;
    block->order = impl_->peers->Order(
        fmt::format("{}\n{}\n{}\n{}", object, r.expected->etag, r.expected->size, b));
    block->since = std::chrono::steady_clock::now();
    block->peers_until = *block->since + TotalDeadline(config_.deadlines, block->length);
    block->served_by = read->served_by;
    block->index = b - first;
    block->urgent = r.urgent;
    block->done = [gather](Result<size_t> outcome) { gather->BlockDone(outcome); };
    GetFromPeer(std::move(block), 0, false);
  }
}

// On a hasher's thread (hash_workers.h). Each member that does not match is read again from the
// store, into a buffer of its own: comparing the two names the peer that sent the wrong bytes.
void ObjectStore::CheckPeerRead(std::shared_ptr<PeerRead> read) {
  const GetRequest& r = read->request;
  auto bad = r.digests->Mismatches(r.blob, r.offset, r.buffer, r.length);
  if (bad.empty()) return read->done(r.length);
  impl_->counters.peer_mismatches.fetch_add(bad.size(), std::memory_order_relaxed);
  auto gather = std::make_shared<Gather>(bad.size(), r.length, read->done);
  for (MemberDigests::Mismatch& member : bad) {
    auto scratch = std::shared_ptr<char[]>(new char[member.size]);
    Block block;
    block.name = r.name;
    block.object = read->object;
    block.offset = member.offset;
    block.length = member.size;
    block.buffer = scratch.get();
    block.expected = r.expected;
    block.urgent = r.urgent;
    block.done = [this, read, member, scratch, gather](Result<size_t> got) {
      if (got) got = TakeStoreBytes(*read, member, scratch.get());
      gather->BlockDone(got);
    };
    GetDirect(block);
  }
}

// The store's bytes of `member` in place of the peers', once they match its digest; logs
// and skips each peer whose part of the member differed.
Result<size_t> ObjectStore::TakeStoreBytes(const PeerRead& read,
                                           const MemberDigests::Mismatch& member,
                                           const char* store_bytes) {
  const GetRequest& r = read.request;
  if (Sha256Of(store_bytes, member.size) != *r.digests->Digest(member.file)) {
    return Fail(EIO,
                "cannot read {}: the store's bytes of {} do not match the SHA-256 of its index",
                read.object, member.path);
  }
  char* ours = r.buffer + (member.offset - r.offset);
  for (size_t b = 0; b < read.starts.size(); ++b) {
    const uint64_t from = std::max(read.starts[b], member.offset);
    const uint64_t to =
        std::min(b + 1 < read.starts.size() ? read.starts[b + 1] : r.offset + r.length,
                 member.offset + member.size);
    const int peer = (*read.served_by)[b];
    if (from >= to || peer < 0) continue;
    const uint64_t at = from - member.offset;
    if (std::memcmp(ours + at, store_bytes + at, to - from) == 0) continue;
    const std::string why = fmt::format(
        "it sent bytes of {} ({} bytes at {} of {}) that do not match the SHA-256 of the index",
        member.path, member.size, member.offset, read.object);
    const uint64_t logged = impl_->mismatches_logged.fetch_add(1, std::memory_order_relaxed);
    if (logged < kLoggedPeerAnswers || logged % 1000 == 0) {
      spdlog::warn("peer {}: {}; read from the store instead ({} such parts)",
                   impl_->peers->url(static_cast<uint32_t>(peer)), why, logged + 1);
    }
    impl_->peers->Failed(static_cast<uint32_t>(peer), why, PeerSet::Clock::now());
  }
  std::memcpy(ours, store_bytes, member.size);
  return member.size;
}

void ObjectStore::GetDirect(const Block& block) {
  Exchange exchange = Request(config_, block.object, "read", UrlOf(config_, block.name, "", false));
  exchange.headers.push_back(
      fmt::format("Range: bytes={}-{}", block.offset, block.offset + block.length - 1));
  if (block.expected && !block.expected->etag.empty()) {
    exchange.headers.push_back("If-Match: " + block.expected->etag);
  }
  exchange.buffer = block.buffer;
  exchange.capacity = block.length;
  exchange.partial_only = true;
  exchange.since = block.since;
  exchange.max_attempts = block.max_attempts;
  exchange.urgent = block.urgent;
  exchange.done = [object = block.object, offset = block.offset, length = block.length,
                   expected = block.expected, finish = block.done](Result<Reply> reply) {
    if (!reply.ok()) return finish(reply.error());
    finish(CheckRangeReply(*reply, object, offset, length, expected));
  };
  impl_->Loop().Submit(std::move(exchange));
}

void ObjectStore::GetFromPeer(std::shared_ptr<const Block> block, size_t rank, bool failed_before) {
  PeerSet& peers = *impl_->peers;
  const auto now = PeerSet::Clock::now();
  if (failed_before && now >= block->peers_until) rank = block->order.size();
  while (rank < block->order.size() && !peers.MayAsk(block->order[rank], now)) ++rank;
  if (rank == block->order.size()) {
    if (failed_before) impl_->counters.peer_fallbacks.fetch_add(1, std::memory_order_relaxed);
    GetDirect(*block);
    return;
  }
  const uint32_t peer = block->order[rank];
  const auto [authority, path] = SplitUrl(UrlOf(config_, block->name, "", false));
  Exchange exchange = Request(config_, block->object, "read", peers.url(peer) + path);
  exchange.headers.push_back("Host: " + authority);
  exchange.range = fmt::format("{}-{}", block->offset, block->offset + block->length - 1);
  if (!peers.secret().empty()) {
    exchange.cookie = fmt::format("{}={}", kPeerSecretCookie, peers.secret());
  }
  exchange.max_attempts = 1;
  exchange.via_peer = true;
  exchange.urgent = block->urgent;
  exchange.buffer = block->buffer;
  exchange.capacity = block->length;
  exchange.partial_only = true;
  exchange.done = [this, block, rank, peer](Result<Reply> reply) {
    PeerSet& peers = *impl_->peers;
    if (!reply.ok()) {
      peers.Failed(peer, reply.error().message, PeerSet::Clock::now());
      return GetFromPeer(block, rank + 1, true);
    }
    // A peer that refuses this node (not the job's secret) fails as one that is down.
    if (IsRefusal(reply->status)) {
      peers.Failed(peer,
                   fmt::format("it refused the request (HTTP {}): is --peer-secret-file the "
                               "job's secret?",
                               reply->status),
                   PeerSet::Clock::now());
      return GetFromPeer(block, rank + 1, true);
    }
    Result<size_t> checked =
        CheckRangeReply(*reply, block->object, block->offset, block->length, block->expected);
    peers.Answered(peer, checked.ok() ? reply->body_bytes : 0);
    if (checked.ok()) {
      if (block->served_by) (*block->served_by)[block->index] = static_cast<int>(peer);
      return block->done(std::move(checked));
    }
    // The peer works; what it says is about the object, which the store decides.
    impl_->counters.peer_fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (impl_->peer_answers_logged.fetch_add(1, std::memory_order_relaxed) < kLoggedPeerAnswers) {
      spdlog::warn("peer {}: {}; reading it from the store", peers.url(peer),
                   checked.error().message);
    }
    GetDirect(*block);
  };
  impl_->Loop().Submit(std::move(exchange));
}

Result<std::string> ObjectStore::GetWhole(const std::string& name, size_t max_bytes) {
  const std::string object = Describe(name);
  if (auto refused = impl_->RefuseOnLoopThread("read", object)) return *refused;
  return Await<std::string>([&](std::function<void(Result<std::string>)> done) {
    auto finish = impl_->Track(std::move(done));
    Exchange exchange = Request(config_, object, "read", UrlOf(config_, name, "", false));
    exchange.max_text = max_bytes;
    exchange.done = [object, max_bytes, finish = std::move(finish)](Result<Reply> reply) {
      if (!reply.ok()) return finish(reply.error());
      finish(CheckWholeReply(std::move(*reply), object, max_bytes));
    };
    impl_->Loop().Submit(std::move(exchange));
  });
}

void ObjectStore::Head(const std::string& name, std::function<void(Result<ObjectInfo>)> done) {
  auto finish = impl_->Track(std::move(done));
  const std::string object = Describe(name);
  Exchange exchange = Request(config_, object, "stat", UrlOf(config_, name, "", false));
  exchange.head = true;
  exchange.done = [object, name, finish = std::move(finish)](Result<Reply> reply) {
    if (!reply.ok()) return finish(reply.error());
    finish(CheckHeadReply(*reply, object, name));
  };
  impl_->Loop().Submit(std::move(exchange));
}

Result<ObjectInfo> ObjectStore::HeadSync(const std::string& name) {
  if (auto refused = impl_->RefuseOnLoopThread("stat", Describe(name))) return *refused;
  return Await<ObjectInfo>([&](auto done) { Head(name, std::move(done)); });
}

Result<ObjectInfo> ObjectStore::ProbeSync(const std::string& name) {
  const std::string object = Describe(name);
  if (auto refused = impl_->RefuseOnLoopThread("stat", object)) return *refused;
  return Await<ObjectInfo>([&](std::function<void(Result<ObjectInfo>)> done) {
    auto finish = impl_->Track(std::move(done));
    Exchange exchange = Request(config_, object, "stat", UrlOf(config_, name, "", false));
    exchange.headers.push_back("Range: bytes=0-0");
    exchange.max_text = 1;
    exchange.partial_only = true;
    exchange.done = [object, name, finish = std::move(finish)](Result<Reply> reply) {
      if (!reply.ok()) return finish(reply.error());
      finish(CheckProbeReply(*reply, object, name));
    };
    impl_->Loop().Submit(std::move(exchange));
  });
}

Result<std::vector<ObjectInfo>> ObjectStore::List(const std::string& prefix) {
  const std::string object = Describe(prefix);
  if (config_.scheme != Scheme::kS3) {
    impl_->counters.errors.fetch_add(1, std::memory_order_relaxed);
    return Fail(ENOTSUP, "cannot list {}: listing needs an s3:// source", object);
  }
  if (auto refused = impl_->RefuseOnLoopThread("list", object)) return *refused;
  std::vector<ObjectInfo> objects;
  std::string token;
  unsigned pages = 0;
  for (;;) {
    Result<ListPage> page = impl_->FetchPage(Request(
        config_, object, "list",
        UrlOf(config_, "", ListQuery(config_.root + prefix, token, config_.list_page_size), true)));
    if (!page.ok()) return page.error();
    for (ObjectInfo& info : page->objects) {
      if (!info.name.starts_with(config_.root + prefix)) {
        impl_->counters.errors.fetch_add(1, std::memory_order_relaxed);
        return Fail(EIO, "cannot list {}: the store listed '{}', outside the prefix", object,
                    info.name);
      }
      info.name.erase(0, config_.root.size());
      objects.push_back(std::move(info));
    }
    if (!page->truncated) return objects;
    if (++pages >= config_.list_max_pages || objects.size() >= config_.list_max_keys) {
      impl_->counters.errors.fetch_add(1, std::memory_order_relaxed);
      return Fail(EFBIG,
                  "cannot list {}: the store's listing goes on past {} keys in {} pages, more "
                  "than a dataset's folder holds; name the dataset's own folder in the URL",
                  object, objects.size(), pages);
    }
    if (page->next_token == token) {
      impl_->counters.errors.fetch_add(1, std::memory_order_relaxed);
      return Fail(EIO, "cannot list {}: the store sent the same continuation token twice", object);
    }
    token = std::move(page->next_token);
  }
}

std::string ObjectStore::Region() const { return impl_->region.Get(); }

nlohmann::json ObjectStore::Stats() const {
  nlohmann::json stats = StatsJson(config_.scheme == Scheme::kS3 ? "s3" : "http", impl_->counters);
  stats[source_stat::kTlsVerify] = config_.verify_tls;
  nlohmann::json& threads = stats[source_stat::kTransferThreads] = nlohmann::json::array();
  for (const auto& loop : impl_->loops) threads.push_back(loop->Answered());
  if (config_.scheme == Scheme::kS3) stats[source_stat::kRegion] = Region();
  uint64_t failures = 0;
  if (impl_->peers) {
    stats[source_stat::kPeers] = impl_->peers->Stats();
    for (const nlohmann::json& peer : stats[source_stat::kPeers]) {
      failures += peer.value(peer_stat::kFailures, uint64_t{0});
    }
  }
  stats[source_stat::kPeerFailures] = failures;  // each peer's, added up
  if (config_.credentials) stats[source_stat::kCredentials] = config_.credentials->Stats();
  return stats;
}

}  // namespace gpufs::remote
