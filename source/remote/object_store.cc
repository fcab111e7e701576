// ObjectStore: what each call asks of the server (URL, headers, sink) and what its answer
// must hold (responses.h); the transfers themselves run on the loop (transfer_loop.h).
#include "source/remote/object_store.h"

#include <future>
#include <limits>

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

}  // namespace

class ObjectStore::Impl {
 public:
  explicit Impl(const StoreConfig& config) : loop(LoopConfigFor(config), counters) {}

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
  Exchange exchange = Request(config_, object, "read", UrlOf(config_, request.name, "", false));
  exchange.headers.push_back(
      fmt::format("Range: bytes={}-{}", request.offset, request.offset + request.length - 1));
  if (request.expected && !request.expected->etag.empty()) {
    exchange.headers.push_back("If-Match: " + request.expected->etag);
  }
  exchange.buffer = request.buffer;
  exchange.capacity = request.length;
  exchange.partial_only = true;
  exchange.done = [object, offset = request.offset, length = request.length,
                   expected = std::move(request.expected),
                   finish = std::move(finish)](Result<Reply> reply) {
    if (!reply.ok()) return finish(reply.error());
    finish(CheckRangeReply(*reply, object, offset, length, expected));
  };
  impl_->loop.Submit(std::move(exchange));
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
  return StatsJson(config_.scheme == Scheme::kS3 ? "s3" : "http", impl_->counters);
}

}  // namespace gpufs::remote
