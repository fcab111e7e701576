#include "source/remote/transfer/transfer_loop.h"

#include "source/remote/transfer/transfer.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include <spdlog/spdlog.h>

#include "source/remote/credentials/tls.h"
#include "source/remote/transfer/responses.h"

namespace gpufs::remote {
namespace {

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Transport failures that another attempt may not meet: the connection was refused, cut,
// stalled or timed out. A malformed URL or a certificate that does not verify is not one.
bool IsRetryableTransport(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_WEIRD_SERVER_REPLY:
      return true;
    default:
      return false;
  }
}

// The most body bytes an attempt of `exchange` may move: what its sink holds.
uint64_t BodyBound(const Exchange& exchange) {
  if (exchange.head) return 0;
  return exchange.buffer != nullptr ? exchange.capacity : exchange.max_text;
}

void SetDeadlines(CURL* easy, const TransferDeadlines& deadlines, uint64_t body_bound) {
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(deadlines.connect.count()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(TotalDeadline(deadlines, body_bound).count()));
  // No byte for the idle time is a broken transfer: curl counts it in whole seconds.
  const long idle_s = std::max<long>(1, (deadlines.idle.count() + 999) / 1000);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, idle_s);
}

bool SameKeys(const Credentials& a, const Credentials& b) {
  return a.access_key == b.access_key && a.secret_key == b.secret_key &&
         a.session_token == b.session_token;
}

// Redirects and HTTP credentials, for the store's own requests only (a peer gets neither).
// curl sends credentials to the host they were given for alone: a redirect elsewhere loses
// them (CURLOPT_UNRESTRICTED_AUTH stays off), a signed request is never redirected, and
// neither is a peer's, so its secret cookie never follows a redirect either.
void ApplyHttpAccess(CURL* easy, const LoopConfig& config, const Exchange& exchange) {
  if (exchange.via_peer) return;
  if (config.follow_redirects) {
    constexpr long kMaxRedirects = 5;
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(easy, CURLOPT_MAXREDIRS, kMaxRedirects);
    curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_UNRESTRICTED_AUTH, 0L);
  }
  if (config.basic_auth) {
    curl_easy_setopt(easy, CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
    curl_easy_setopt(easy, CURLOPT_USERNAME, config.basic_auth->user.c_str());
    curl_easy_setopt(easy, CURLOPT_PASSWORD, config.basic_auth->password.c_str());
  } else if (!config.netrc_file.empty()) {
    curl_easy_setopt(easy, CURLOPT_NETRC, static_cast<long>(CURL_NETRC_OPTIONAL));
    curl_easy_setopt(easy, CURLOPT_NETRC_FILE, config.netrc_file.c_str());
  }
}

}  // namespace

LoopConfig LoopConfigFor(const StoreConfig& config) {
  LoopConfig loop;
  loop.connections = std::max(1u, config.connections);
  loop.max_attempts = config.max_attempts;
  loop.retry_budget = config.retry_budget;
  loop.deadlines = config.deadlines;
  loop.verify_tls = config.verify_tls;
  loop.ca_bundle = config.ca_bundle;
  if (config.scheme == Scheme::kS3) loop.signing = config.credentials;
  loop.region = config.region;
  loop.endpoint = config.endpoint;
  loop.s3 = config.scheme == Scheme::kS3;
  loop.follow_redirects = !loop.signing;
  if (config.scheme == Scheme::kHttp) {
    loop.basic_auth = config.basic_auth;
    loop.netrc_file = config.netrc_file;
  }
  return loop;
}

TransferLoop::TransferLoop(LoopConfig config, StoreCounters& counters, BucketRegion& region)
    : config_(std::move(config)), counters_(counters), region_(region) {
  InitCurlOnce();
  multi_ = curl_multi_init();
  const long connections = 2L * config_.connections;  // urgent ones included (MayStart)
  curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS, connections);
  curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, connections);
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, connections);
  thread_ = std::thread([this] { Run(); });
  thread_id_ = thread_.get_id();
}

TransferLoop::~TransferLoop() {
  Stop();
  for (CURL* easy : idle_handles_) curl_easy_cleanup(easy);
  curl_multi_cleanup(multi_);
}

void TransferLoop::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  curl_multi_wakeup(multi_);
  if (thread_.joinable()) thread_.join();
}

void TransferLoop::Submit(Exchange exchange) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      pending_.fetch_add(1, std::memory_order_relaxed);
      incoming_.emplace_back(std::move(exchange));
      exchange.done = nullptr;
    }
  }
  if (exchange.done) {
    exchange.done(
        Fail(ECANCELED, "cannot {} {}: the store is closing", exchange.verb, exchange.object));
    return;
  }
  curl_multi_wakeup(multi_);
}

void TransferLoop::Post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      incoming_.emplace_back(std::move(task));
      task = nullptr;
    }
  }
  if (task) return task();  // the loop is gone: nothing would run it
  curl_multi_wakeup(multi_);
}

void TransferLoop::Run() {
  std::deque<Incoming> incoming;
  for (;;) {
    bool stopping = false;
    {
      std::lock_guard lock(mu_);
      incoming.swap(incoming_);
      stopping = stopping_;
    }
    TakeIncoming(incoming);
    if (stopping) break;
    ResumeAwaitingKeys();
    StartReady();
    int running = 0;
    curl_multi_perform(multi_, &running);
    Reap();
    StartReady();
    curl_multi_poll(multi_, nullptr, 0, PollTimeoutMs(), nullptr);
  }
  CancelAll();
}

void TransferLoop::TakeIncoming(std::deque<Incoming>& incoming) {
  for (Incoming& item : incoming) {
    if (auto* task = std::get_if<std::function<void()>>(&item)) {
      (*task)();
      continue;
    }
    auto transfer = std::make_unique<Transfer>();
    transfer->exchange = std::move(std::get<Exchange>(item));
    transfer->counters = &counters_;
    // An urgent exchange goes behind the urgent ones already waiting, before all others.
    const auto at = transfer->exchange.urgent
                        ? std::find_if(ready_.begin(), ready_.end(),
                                       [](const auto& t) { return !t->exchange.urgent; })
                        : ready_.end();
    ready_.insert(at, std::move(transfer));
  }
  incoming.clear();
}

// Every connection may be busy with exchanges that nobody waits on yet (prefetch): an
// urgent one then opens one more, up to as many again, rather than wait for one of them.
bool TransferLoop::MayStart(const Transfer& t) const {
  return active_.size() < config_.connections * (t.exchange.urgent ? 2 : 1);
}

void TransferLoop::StartReady() {
  const auto now = Clock::now();
  // A retry that is due goes first: it has waited longest.
  while (!retries_.empty() && retries_.begin()->first <= now) {
    ready_.push_front(std::move(retries_.begin()->second));
    retries_.erase(retries_.begin());
  }
  while (!ready_.empty() && MayStart(*ready_.front())) {
    std::unique_ptr<Transfer> transfer = std::move(ready_.front());
    ready_.pop_front();
    Start(std::move(transfer));
  }
}

void TransferLoop::Start(std::unique_ptr<Transfer> t) {
  CURL* easy = nullptr;
  if (idle_handles_.empty()) {
    easy = curl_easy_init();
  } else {
    easy = idle_handles_.back();
    idle_handles_.pop_back();
    curl_easy_reset(easy);
  }
  const Exchange& ex = t->exchange;
  curl_slist_free_all(t->headers);  // each attempt's keys may carry another session token
  t->headers = nullptr;
  for (const std::string& header : ex.headers) {
    t->headers = curl_slist_append(t->headers, header.c_str());
  }
  t->signed_for = region_.Get();
  if (config_.signing) SignAttempt(easy, *t);
  curl_easy_setopt(easy, CURLOPT_URL, region_.Retarget(ex.url).c_str());
  curl_easy_setopt(easy, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  // Keys are sent as they are named: "a/../b" is a key, not a path to tidy.
  curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(easy, CURLOPT_NOBODY, ex.head ? 1L : 0L);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t->headers);
  if (!ex.range.empty()) curl_easy_setopt(easy, CURLOPT_RANGE, ex.range.c_str());
  if (!ex.cookie.empty()) curl_easy_setopt(easy, CURLOPT_COOKIE, ex.cookie.c_str());
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &Transfer::OnHeader);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Transfer::OnBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t->error);
  SetDeadlines(easy, config_.deadlines, BodyBound(ex));
  SetTls(easy, config_.verify_tls, config_.ca_bundle);
  ApplyHttpAccess(easy, config_, ex);
  t->easy = easy;
  t->reply = Reply{};
  t->sink_stopped = false;
  t->error[0] = '\0';
  t->attempt_start = Clock::now();
  if (t->attempts++ == 0) t->first_start = t->attempt_start;
  (ex.via_peer ? counters_.peer_requests : counters_.requests)
      .fetch_add(1, std::memory_order_relaxed);
  curl_multi_add_handle(multi_, easy);
  active_.emplace(easy, std::move(t));
}

// The keys of the moment sign this attempt, its session token included.
void TransferLoop::SignAttempt(CURL* easy, Transfer& t) {
  t.keys = config_.signing->Current();
  const std::string sigv4 = "aws:amz:" + t.signed_for + ":s3";
  curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(easy, CURLOPT_USERNAME, t.keys->access_key.c_str());
  curl_easy_setopt(easy, CURLOPT_PASSWORD, t.keys->secret_key.c_str());
  if (!t.keys->session_token.empty()) {
    t.headers =
        curl_slist_append(t.headers, ("x-amz-security-token: " + t.keys->session_token).c_str());
  }
}

// A store that refuses the keys themselves (expired, unknown, suspended) gets one more
// attempt, once the provider has new keys: asked now, or fetched since the attempt began.
bool TransferLoop::AwaitNewKeys(std::unique_ptr<Transfer>& t) {
  if (!t->keys || t->renewed) return false;
  if (!IsCredentialRefusal(t->reply, !t->keys->session_token.empty())) return false;
  t->renewed = true;
  t->refresh_mark = config_.signing->Attempts();
  if (SameKeys(*config_.signing->Current(), *t->keys)) config_.signing->RequestRefresh();
  t->keys_wait_until = Clock::now() + std::chrono::seconds(15);
  awaiting_keys_.push_back(std::move(t));
  return true;
}

// Sends again what waits for keys once there are other ones; delivers the refusal when the
// refresh found the same keys, failed, or took too long.
void TransferLoop::ResumeAwaitingKeys() {
  for (auto it = awaiting_keys_.begin(); it != awaiting_keys_.end();) {
    Transfer& t = **it;
    const bool other = !SameKeys(*config_.signing->Current(), *t.keys);
    const bool tried = config_.signing->Attempts() > t.refresh_mark;
    if (!other && !tried && Clock::now() < t.keys_wait_until) {
      ++it;
      continue;
    }
    std::unique_ptr<Transfer> transfer = std::move(*it);
    it = awaiting_keys_.erase(it);
    if (other) {
      ready_.push_front(std::move(transfer));
      continue;
    }
    Reply reply = std::move(transfer->reply);
    Deliver(std::move(transfer), std::move(reply));
  }
}

void TransferLoop::Reap() {
  int left = 0;
  while (CURLMsg* message = curl_multi_info_read(multi_, &left)) {
    if (message->msg != CURLMSG_DONE) continue;
    CURL* easy = message->easy_handle;
    const CURLcode result = message->data.result;
    curl_multi_remove_handle(multi_, easy);
    auto it = active_.find(easy);
    std::unique_ptr<Transfer> transfer = std::move(it->second);
    active_.erase(it);
    transfer->easy = nullptr;
    idle_handles_.push_back(easy);
    Finish(std::move(transfer), result);
  }
}

void TransferLoop::Finish(std::unique_ptr<Transfer> t, CURLcode result) {
  if (result == CURLE_OK || t->sink_stopped) {
    counters_.latency.Record(Clock::now() - t->attempt_start);
    if (config_.s3 && MovedToRegion(*t)) {
      ready_.push_front(std::move(t));  // at once: nothing is wrong with the store
      return;
    }
    if (AwaitNewKeys(t)) return;
    if (!IsRetryableStatus(t->reply.status, t->reply.text)) {
      Reply reply = std::move(t->reply);
      Deliver(std::move(t), std::move(reply));
      return;
    }
    const std::string reason = fmt::format("the server answered {}", DescribeStatus(t->reply));
    RetryOrFail(std::move(t), reason);
    return;
  }
  std::string reason = t->error[0] != '\0' ? t->error : curl_easy_strerror(result);
  if (result == CURLE_OPERATION_TIMEDOUT) {
    reason += fmt::format(" (an attempt's deadline: {:.1f} s, or no byte for {:.1f} s)",
                          TotalDeadline(config_.deadlines, BodyBound(t->exchange)).count() / 1e3,
                          config_.deadlines.idle.count() / 1e3);
  }
  if (!IsRetryableTransport(result)) {
    Error error = Fail(EIO, "cannot {} {}: {}{}", t->exchange.verb, t->exchange.object, reason,
                       TlsHint(result, config_.s3));
    Deliver(std::move(t), std::move(error));
    return;
  }
  RetryOrFail(std::move(t), reason);
}

// A wrong-region answer: the request goes again, signed for (and on AWS sent to) the
// bucket's region, as does every later one. Twice at most, so that a store that names
// regions in turn cannot keep a request going.
bool TransferLoop::MovedToRegion(Transfer& t) {
  constexpr unsigned kMaxMoves = 2;
  const std::optional<std::string> region = RegionOfAnswer(t.reply);
  if (!region || *region == t.signed_for || t.region_moves >= kMaxMoves) return false;
  ++t.region_moves;
  if (region_.Learn(*region)) {
    spdlog::warn(
        "the bucket of {} is in region {}, not {} (HTTP {}): requests are signed for {} "
        "from now on",
        t.exchange.object, *region, t.signed_for, t.reply.status, *region);
  }
  return true;
}

// A request is retried until its deadline (the retry budget from its first attempt, or
// from `Exchange::since`), not for a number of attempts: an outage shorter than the
// deadline costs a read time, never an error. Only an exchange that asks for fewer
// attempts (a peer's: one, then the next peer) stops sooner.
void TransferLoop::RetryOrFail(std::unique_ptr<Transfer> t, const std::string& reason) {
  const auto now = Clock::now();
  const unsigned max_attempts =
      t->exchange.max_attempts > 0 ? t->exchange.max_attempts : config_.max_attempts;
  const Clock::time_point since = t->exchange.since.value_or(t->first_start);
  if (max_attempts == 0 || t->attempts < max_attempts) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(now - since);
    const auto delay =
        RetryDelay(t->attempts - 1, elapsed, config_.retry_budget, random_, config_.backoff);
    if (delay) {
      if (t->exchange.max_attempts != 1) {  // a peer's failure goes to the next peer, unsaid
        retry_notice_.Say(t->exchange.verb, t->exchange.object, reason, config_.retry_budget, now);
      }
      counters_.retries.fetch_add(1, std::memory_order_relaxed);
      retries_.emplace(now + *delay, std::move(t));
      return;
    }
  }
  const double seconds = std::chrono::duration<double>(now - since).count();
  const bool deadline = t->attempts != max_attempts;  // ETIMEDOUT: the store, not this peer
  Error error = Fail(deadline ? ETIMEDOUT : EIO,
                     "cannot {} {}: {} (gave up after {} attempt{} in {:.1f} s{})",
                     t->exchange.verb, t->exchange.object, reason, t->attempts,
                     t->attempts == 1 ? "" : "s", seconds, deadline ? ", the retry deadline" : "");
  Deliver(std::move(t), std::move(error));
}

void TransferLoop::Deliver(std::unique_ptr<Transfer> t, Result<Reply> outcome) {
  auto done = std::move(t->exchange.done);
  t.reset();  // nothing of the transfer outlives its answer
  pending_.fetch_sub(1, std::memory_order_relaxed);
  answered_.fetch_add(1, std::memory_order_relaxed);
  done(std::move(outcome));
}

int TransferLoop::PollTimeoutMs() const {
  constexpr int kIdleMs = 1000;  // a wakeup ends the wait sooner
  if (!ready_.empty() && MayStart(*ready_.front())) return 0;
  if (!awaiting_keys_.empty()) return 50;  // the provider's refresh is polled
  if (retries_.empty()) return kIdleMs;
  const auto wait =
      std::chrono::ceil<std::chrono::milliseconds>(retries_.begin()->first - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(wait.count(), 0, kIdleMs));
}

void TransferLoop::CancelAll() {
  std::vector<std::unique_ptr<Transfer>> all;
  for (auto& [easy, transfer] : active_) {
    curl_multi_remove_handle(multi_, easy);
    idle_handles_.push_back(easy);
    all.push_back(std::move(transfer));
  }
  active_.clear();
  for (auto& [when, transfer] : retries_) all.push_back(std::move(transfer));
  retries_.clear();
  for (auto& transfer : ready_) all.push_back(std::move(transfer));
  ready_.clear();
  for (auto& transfer : awaiting_keys_) all.push_back(std::move(transfer));
  awaiting_keys_.clear();
  for (auto& t : all) {
    Error error =
        Fail(ECANCELED, "cannot {} {}: the store is closing", t->exchange.verb, t->exchange.object);
    Deliver(std::move(t), std::move(error));
  }
}

}  // namespace gpufs::remote
