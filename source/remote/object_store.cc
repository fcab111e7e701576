// ObjectStore: what each call asks of the server (URL, headers, sink) and what its answer
// must hold (responses.h); the transfers themselves run on the loop (transfer_loop.h).
#include "source/remote/object_store.h"

#include <atomic>
#include <future>
#include <limits>
#include <mutex>

#include <spdlog/spdlog.h>

#include "source/blob_source.h"
#include "source/remote/responses.h"
#include "source/remote/s3_xml.h"
#include "source/remote/store_stats.h"
#include "source/remote/transfer_loop.h"
#include "source/remote/url.h"

namespace gpufs::remote {
namespace {

// A listing page is a few hundred bytes per key; a page larger than this is not a listing.
constexpr size_t kMaxListPage = 64 << 20;

// Waits on another thread for a call that reports through a callback.
template <typename T, typename Start>
Result<T> Await(Start start) {
  std::promise<Result<T>> promise;
  std::future<Result<T>> future = promise.get_future();
  start([&promise](Result<T> result) { promise.set_value(std::move(result)); });
  return future.get();
}

// The URL of `name` (or of the bucket, for a listing), with `query` already in canonical
// order: curl signs the path and query exactly as they are sent.
std::string UrlOf(const StoreConfig& config, const std::string& name, const std::string& query,
                  bool bucket_only) {
  std::string url;
  if (config.scheme == Scheme::kHttp) {
    url = config.endpoint + config.root + EncodePath(name);
  } else if (config.path_style) {
    url = config.endpoint + "/" + EncodePath(config.bucket);
    if (!bucket_only) url += "/" + EncodePath(config.root + name);
  } else {
    const size_t host = config.endpoint.find("//") + 2;
    url = config.endpoint.substr(0, host) + config.bucket + "." + config.endpoint.substr(host) +
          "/" + (bucket_only ? "" : EncodePath(config.root + name));
  }
  if (!query.empty()) url += "?" + query;
  return url;
}

// The headers every request carries. radosgw refuses a signed request without a payload
// hash, and curl 7.88 signs with the one it is given.
std::vector<std::string> BaseHeaders(const StoreConfig& config) {
  std::vector<std::string> headers;
  if (config.scheme == Scheme::kS3 && config.credentials) {
    headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!config.credentials->session_token.empty()) {
      headers.push_back("x-amz-security-token: " + config.credentials->session_token);
    }
  }
  return headers;
}

// An exchange for `object` with what every request carries; the caller adds the sink.
Exchange Request(const StoreConfig& config, const std::string& object, const char* verb,
                 std::string url) {
  Exchange exchange;
  exchange.object = object;
  exchange.verb = verb;
  exchange.url = std::move(url);
  exchange.headers = BaseHeaders(config);
  return exchange;
}

// ListObjectsV2's query, its parameters in the sorted order SigV4 signs.
std::string ListQuery(const std::string& prefix, const std::string& token, unsigned page_size) {
  std::string query;
  if (!token.empty()) query += "continuation-token=" + EncodeQueryValue(token) + "&";
  query += "encoding-type=url&list-type=2";
  if (page_size > 0) query += fmt::format("&max-keys={}", page_size);
  if (!prefix.empty()) query += "&prefix=" + EncodeQueryValue(prefix);
  return query;
}

// A read cut into blocks: the caller's `done` runs once, when every block is in.
class Gather {
 public:
  Gather(size_t blocks, size_t length, std::function<void(Result<size_t>)> done)
      : pending_(blocks), length_(length), done_(std::move(done)) {}

  void BlockDone(const Result<size_t>& outcome) {
    if (!outcome.ok()) {
      std::lock_guard lock(mu_);
      if (!error_) error_ = outcome.error();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (error_) return done_(*error_);
    done_(length_);
  }

 private:
  std::atomic<size_t> pending_;
  const size_t length_;
  std::function<void(Result<size_t>)> done_;
  std::mutex mu_;
  std::optional<Error> error_;  // the first block's failure, guarded by mu_
};

// "http://host:port/path?query" as the authority ("host:port") and the rest ("/path?query").
std::pair<std::string, std::string> SplitUrl(const std::string& url) {
  const size_t authority = url.find("://") + 3;
  const size_t path = std::min(url.find('/', authority), url.size());
  return {url.substr(authority, path - authority), url.substr(path)};
}

// Answers from a peer about the object itself (another ETag, a 4xx) are logged this many
// times, then only counted: a changed object would log once per block.
constexpr uint64_t kLoggedPeerAnswers = 10;

}  // namespace

// One block of a GET, on its way through the peers to the store.
struct ObjectStore::Block {
  std::string name;    // relative to the root
  std::string object;  // as messages name it
  uint64_t offset = 0;
  size_t length = 0;
  char* buffer = nullptr;
  std::optional<ObjectInfo> expected;
  std::shared_ptr<const MemberDigests> digests;  // set for blocks peers may serve
  uint32_t blob = 0;
  std::vector<uint32_t> order;  // the peers, the first choice first
  std::function<void(Result<size_t>)> done;
};

class ObjectStore::Impl {
 public:
  explicit Impl(const StoreConfig& config) : loop(LoopConfigFor(config), counters) {
    if (!config.peers.urls.empty()) peers = std::make_unique<PeerSet>(config.peers);
  }

  // Wraps `done` so that the request counts as in flight until it runs, and as an error
  // when it fails.
  template <typename T>
  std::function<void(Result<T>)> Track(std::function<void(Result<T>)> done) {
    counters.in_flight.fetch_add(1, std::memory_order_relaxed);
    return [this, done = std::move(done)](Result<T> result) {
      counters.in_flight.fetch_sub(1, std::memory_order_relaxed);
      if (!result.ok()) counters.errors.fetch_add(1, std::memory_order_relaxed);
      done(std::move(result));
    };
  }

  // One page of a listing, waited for.
  Result<ListPage> FetchPage(Exchange exchange) {
    return Await<ListPage>([&](std::function<void(Result<ListPage>)> done) {
      exchange.max_text = kMaxListPage;
      exchange.done = [object = exchange.object,
                       finish = Track(std::move(done))](Result<Reply> reply) {
        if (!reply.ok()) return finish(reply.error());
        if (reply->status != 200) return finish(StatusError(*reply, "list", object));
        Result<ListPage> parsed = ParseListObjectsV2(reply->text);
        if (!parsed.ok()) {
          return finish(Fail(EIO, "cannot list {}: {}", object, parsed.error().message));
        }
        finish(std::move(parsed));
      };
      loop.Submit(std::move(exchange));
    });
  }

  // The error of a blocking call made from the loop's own thread, which would wait forever.
  std::optional<Error> RefuseOnLoopThread(std::string_view verb, const std::string& object) {
    if (!loop.OnLoopThread()) return std::nullopt;
    return Fail(EDEADLK, "cannot {} {}: a blocking call from a store callback", verb, object);
  }

  std::unique_ptr<PeerSet> peers;  // none without --peers
  std::atomic<uint64_t> peer_answers_logged{0};
  std::atomic<uint64_t> mismatches_logged{0};
  StoreCounters counters;  // before the loop, which uses it until it stops
  TransferLoop loop;
};

ObjectStore::ObjectStore(StoreConfig config)
    : config_(std::move(config)), impl_(std::make_unique<Impl>(config_)) {}

ObjectStore::~ObjectStore() = default;

std::string ObjectStore::Describe(const std::string& name) const {
  if (config_.scheme == Scheme::kS3) return "s3://" + config_.bucket + "/" + config_.root + name;
  return config_.endpoint + config_.root + name;
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
    impl_->loop.Post([finish, outcome] { finish(outcome); });
    return;
  }
  // Only an answer that can be checked against the object's ETag and the digests of every
  // member it holds may come from a peer.
  const bool via_peers =
      impl_->peers && request.expected && !request.expected->etag.empty() && request.digests &&
      request.digests->WholeMembers(request.blob, request.offset, request.offset + request.length);
  if (!via_peers) {
    GetDirect(Block{request.name,
                    object,
                    request.offset,
                    request.length,
                    request.buffer,
                    std::move(request.expected),
                    nullptr,
                    0,
                    {},
                    std::move(finish)});
    return;
  }
  GetThroughPeers(std::move(request), object, std::move(finish));
}

// Blocks are the routing unit, cut further on at the end of the member a boundary falls
// in, so that each block holds whole members and can be checked alone; a block is routed
// by the unit it starts in.
void ObjectStore::GetThroughPeers(GetRequest request, const std::string& object,
                                  std::function<void(Result<size_t>)> finish) {
  const uint64_t size = impl_->peers->block();
  const uint64_t end = request.offset + request.length;
  std::vector<std::pair<uint64_t, uint64_t>> cuts;
  for (uint64_t from = request.offset; from < end;) {
    const uint64_t boundary = std::min(end, (from / size + 1) * size);
    const uint64_t to = std::min(end, request.digests->CutAfter(request.blob, boundary));
    cuts.emplace_back(from, to);
    from = to;
  }
  auto gather = std::make_shared<Gather>(cuts.size(), request.length, std::move(finish));
  for (const auto& [from, to] : cuts) {
    auto block = std::make_shared<Block>();
    block->name = request.name;
    block->object = object;
    block->offset = from;
    block->length = to - from;
    block->buffer = request.buffer + (from - request.offset);
    block->expected = request.expected;
    block->digests = request.digests;
    block->blob = request.blob;
    block->order = impl_->peers->Order(fmt::format("{}\n{}\n{}\n{}", object, request.expected->etag,
                                                   request.expected->size, from / size));
    block->done = [gather](Result<size_t> outcome) { gather->BlockDone(outcome); };
    GetFromPeer(std::move(block), 0, false);
  }
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
  exchange.done = [object = block.object, offset = block.offset, length = block.length,
                   expected = block.expected, finish = block.done](Result<Reply> reply) {
    if (!reply.ok()) return finish(reply.error());
    finish(CheckRangeReply(*reply, object, offset, length, expected));
  };
  impl_->loop.Submit(std::move(exchange));
}

void ObjectStore::GetFromPeer(std::shared_ptr<const Block> block, size_t rank, bool failed_before) {
  PeerSet& peers = *impl_->peers;
  const auto now = PeerSet::Clock::now();
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
  exchange.max_attempts = 1;
  exchange.via_peer = true;
  exchange.buffer = block->buffer;
  exchange.capacity = block->length;
  exchange.partial_only = true;
  exchange.done = [this, block, rank, peer](Result<Reply> reply) {
    PeerSet& peers = *impl_->peers;
    if (!reply.ok()) {
      peers.Failed(peer, reply.error().message, PeerSet::Clock::now());
      return GetFromPeer(block, rank + 1, true);
    }
    Result<size_t> checked =
        CheckRangeReply(*reply, block->object, block->offset, block->length, block->expected);
    if (checked.ok()) return CheckPeerBytes(block, rank, peer, reply->body_bytes);
    peers.Answered(peer, 0);
    // The peer works; what it says is about the object, which the store decides.
    impl_->counters.peer_fallbacks.fetch_add(1, std::memory_order_relaxed);
    if (impl_->peer_answers_logged.fetch_add(1, std::memory_order_relaxed) < kLoggedPeerAnswers) {
      spdlog::warn("peer {}: {}; reading it from the store", peers.url(peer),
                   checked.error().message);
    }
    GetDirect(*block);
  };
  impl_->loop.Submit(std::move(exchange));
}

// On the store's thread: SHA-256 runs at about 2 GB/s a core with the CPU's SHA
// instructions, a few milliseconds a block.
void ObjectStore::CheckPeerBytes(std::shared_ptr<const Block> block, size_t rank, uint32_t peer,
                                 uint64_t body_bytes) {
  PeerSet& peers = *impl_->peers;
  const auto bad = block->digests->Check(block->blob, block->offset, block->buffer, block->length);
  if (!bad) {
    peers.Answered(peer, body_bytes);
    return block->done(block->length);
  }
  impl_->counters.peer_mismatches.fetch_add(1, std::memory_order_relaxed);
  const std::string why = fmt::format(
      "it sent bytes of {} ({} bytes at {} of {}) that do not match the SHA-256 of the index",
      bad->path, bad->size, bad->offset, block->object);
  const uint64_t logged = impl_->mismatches_logged.fetch_add(1, std::memory_order_relaxed);
  if (logged < kLoggedPeerAnswers || logged % 1000 == 0) {
    spdlog::warn("peer {}: {}; asking the next peer or the store ({} such blocks)", peers.url(peer),
                 why, logged + 1);
  }
  peers.Failed(peer, why, PeerSet::Clock::now());
  GetFromPeer(std::move(block), rank + 1, true);
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
    impl_->loop.Submit(std::move(exchange));
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
  impl_->loop.Submit(std::move(exchange));
}

Result<ObjectInfo> ObjectStore::HeadSync(const std::string& name) {
  if (auto refused = impl_->RefuseOnLoopThread("stat", Describe(name))) return *refused;
  return Await<ObjectInfo>([&](auto done) { Head(name, std::move(done)); });
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
    if (page->next_token == token) {
      impl_->counters.errors.fetch_add(1, std::memory_order_relaxed);
      return Fail(EIO, "cannot list {}: the store sent the same continuation token twice", object);
    }
    token = std::move(page->next_token);
  }
}

nlohmann::json ObjectStore::Stats() const {
  nlohmann::json stats = StatsJson(config_.scheme == Scheme::kS3 ? "s3" : "http", impl_->counters);
  uint64_t failures = 0;
  if (impl_->peers) {
    stats[source_stat::kPeers] = impl_->peers->Stats();
    for (const nlohmann::json& peer : stats[source_stat::kPeers]) {
      failures += peer.value("failures", uint64_t{0});
    }
  }
  stats[source_stat::kPeerFailures] = failures;  // each peer's, added up
  return stats;
}

}  // namespace gpufs::remote
