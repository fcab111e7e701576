#include "cli/stat/stat_watch_fields.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "cache/account/stall_account.h"
#include "cache/cache_stat.h"
#include "cache/miss_reads.h"
#include "cache/tier/tier_stat.h"
#include "dataset/printable.h"
#include "fs/control.h"
#include "source/blob_source.h"
#include "source/remote/address/peers.h"

namespace gpufs {
namespace watch {

const nlohmann::json& Child(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  static const nlohmann::json kNull;
  const nlohmann::json* at = &j;
  for (const char* key : keys) {
    if (!at->is_object() || !at->contains(key)) return kNull;
    at = &(*at)[key];
  }
  return *at;
}

uint64_t At(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  const nlohmann::json& at = Child(j, keys);
  return at.is_number() ? at.get<uint64_t>() : 0;
}

double Real(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

double Ratio(double part, double whole) { return whole > 0 ? part / whole : -1; }

double TierRoom(const nlohmann::json& t) {
  const auto bound = static_cast<double>(At(t, {tier_stat::kBound}));
  return bound > 0 ? bound : static_cast<double>(At(t, {tier_stat::kUsed}));
}

// A local folder's reads are not timed: never a 0.0 that reads as "instant".
std::string MsOrDash(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number()
             ? fmt::format("{:.1f}", j[key].get<double>())
             : std::string("-");
}

Rates RatesOf(const nlohmann::json& a, const nlohmann::json& b, double dt) {
  Rates r;
  auto delta = [&](std::initializer_list<const char*> keys) {
    return static_cast<double>(At(b, keys) - std::min(At(a, keys), At(b, keys)));
  };
  const double per_s = dt > 0 ? 1.0 / dt : 0;
  r.reads = static_cast<uint64_t>(delta({"served", "reads"}));
  r.files_s = delta({"served", "files"}) * per_s;
  r.served_mb_s = delta({"served", "bytes"}) * per_s / 1e6;
  r.source_mb_s = delta({"cache", cache_stat::kBytesFromSource}) * per_s / 1e6;
  r.requests_s = delta({"io", source_stat::kRequests}) * per_s;
  r.peer_mb_s = delta({"io", source_stat::kPeerBytes}) * per_s / 1e6;
  r.store_mb_s = delta({"io", source_stat::kBytes}) * per_s / 1e6;
  r.tier_read_mb_s = delta({"cache", "tier", tier_stat::kReadBytes}) * per_s / 1e6;
  r.tier_write_mb_s = delta({"cache", "tier", tier_stat::kWriteBytes}) * per_s / 1e6;
  r.decoded_mb_s = delta({"io", source_stat::kDecodedBytes}) * per_s / 1e6;
  // The decoding threads' seconds per second: how many cores decoding kept busy.
  const double decode_s = Real(Child(b, {"io"}), source_stat::kDecodeSeconds) -
                          Real(Child(a, {"io"}), source_stat::kDecodeSeconds);
  r.decode_cores = std::max(0.0, decode_s) * per_s;
  const double hits = delta({"cache", cache_stat::kHits});
  const double asked =
      hits + delta({"cache", cache_stat::kMisses}) + delta({"cache", cache_stat::kMemberReads});
  r.hit_now = Ratio(hits, asked);
  const auto total_hits = static_cast<double>(At(b, {"cache", cache_stat::kHits}));
  r.hit_total = Ratio(total_hits, total_hits + At(b, {"cache", cache_stat::kMisses}) +
                                      At(b, {"cache", cache_stat::kMemberReads}));
  r.amp_total = std::max(0.0, Ratio(At(b, {"cache", cache_stat::kBytesFromSource}),
                                    At(b, {"cache", cache_stat::kBytesServed})));
  r.files_total = At(b, {"served", "files"});
  r.bytes_total = At(b, {"served", "bytes"});
  r.source_total = At(b, {"cache", cache_stat::kBytesFromSource});
  return r;
}

std::string TransportOf(const nlohmann::json& now) {
  const nlohmann::json& transport = Child(now, {fs_stat::kKernel, kernel_stat::kTransport});
  // Daemons from before the choice had only /dev/fuse.
  if (!transport.is_string()) return std::string(fuse_transport_name::kDevFuse);
  const std::string text = transport.get<std::string>();
  return text.substr(0, text.find(' '));
}

}  // namespace watch

namespace {

using watch::At;
using watch::Ratio;
using watch::Real;

nlohmann::json Measured(double ratio) {
  return ratio < 0 ? nlohmann::json() : nlohmann::json(ratio);
}

nlohmann::json NumberOrNull(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key] : nlohmann::json();
}

// What was served and fetched, the cache's state and the source's.
void ServedFields(WatchFields& f, const nlohmann::json& now, const watch::Rates& r) {
  const nlohmann::json& c = now.contains("cache") ? now["cache"] : nlohmann::json();
  const nlohmann::json& io = now.contains("io") ? now["io"] : nlohmann::json();
  const auto files = static_cast<double>(At(now, {"files"}));
  f.push_back({"time", fmt::format("{:%H:%M:%S}", fmt::localtime(std::time(nullptr)))});
  f.push_back({"files_per_s", r.files_s, 0});
  f.push_back({"fuse_transport", watch::TransportOf(now)});
  f.push_back({"served_mb_per_s", r.served_mb_s, 1});
  f.push_back({"disk_mb_per_s", r.source_mb_s, 1});
  f.push_back({"in_memory_ratio", Measured(r.hit_now), 3});
  f.push_back({"read_amplification", r.amp_total, 2});
  f.push_back({"prefetch_in_flight", At(c, {cache_stat::kPrefetchInFlight})});
  f.push_back({"prefetch_used", At(c, {cache_stat::kPrefetchUsed})});
  f.push_back({"prefetch_wasted", At(c, {cache_stat::kPrefetchWasted})});
  f.push_back({"cache_fill",
               std::max(0.0, Ratio(static_cast<double>(At(c, {cache_stat::kCachedBytes})),
                                   static_cast<double>(At(c, {cache_stat::kBudget})))),
               3});
  f.push_back({"epoch", At(c, {cache_stat::kEpoch})});
  f.push_back(
      {"epoch_progress",
       std::max(0.0, Ratio(static_cast<double>(At(c, {cache_stat::kEpochFilesServed})), files)),
       3});
  f.push_back({"source_requests_per_s", r.requests_s, 0});
  f.push_back({"source_retries", At(io, {source_stat::kRetries})});
  f.push_back({"source_errors", At(io, {source_stat::kErrors})});
  f.push_back({"source_latency_ms_p50", NumberOrNull(io, source_stat::kLatencyP50), 1});
  f.push_back({"source_latency_ms_p99", NumberOrNull(io, source_stat::kLatencyP99), 1});
}

// The disk tier's fields, when the mount has one.
void TierFields(WatchFields& f, const nlohmann::json& c, const watch::Rates& r) {
  if (!c.is_object() || !c.contains("tier")) return;
  using namespace tier_stat;
  const nlohmann::json& t = c["tier"];
  f.push_back({"tier_read_mb_per_s", r.tier_read_mb_s, 1});
  f.push_back({"tier_write_mb_per_s", r.tier_write_mb_s, 1});
  f.push_back({"tier_used_bytes", At(t, {kUsed})});
  f.push_back({"tier_fill",
               std::max(0.0, Ratio(static_cast<double>(At(t, {kUsed})), watch::TierRoom(t))), 3});
  for (const char* key : {kHits, kSliceHits, kFills, kEvictions, kDamaged, kWriteErrors}) {
    f.push_back({std::string("tier_") + key, At(t, {key})});
  }
}

// The stall account's fields: the epoch in progress, the last, and each tier's reads and
// waits in the epoch in progress.
void StallFields(WatchFields& f, const nlohmann::json& c) {
  using namespace stall_stat;
  if (!c.is_object() || !c.contains(kStall)) return;
  const nlohmann::json& now = watch::Child(c, {kStall, kCurrent});
  const nlohmann::json& last = watch::Child(c, {kStall, kLast});
  f.push_back({kStallFraction, Real(now, kStallFraction), 4});
  f.push_back({kDemandMbPerS, Real(now, kDemandMbPerS), 1});
  f.push_back({std::string(kLast) + "_" + kStallFraction, NumberOrNull(last, kStallFraction), 4});
  f.push_back({kHitRatio, NumberOrNull(now, kHitRatio), 4});
  for (const char* tier : kServedFromNames) {
    const nlohmann::json& t = watch::Child(now, {kFrom, tier});
    f.push_back({fmt::format("{}_{}", tier, kReads), At(t, {kReads})});
    f.push_back({fmt::format("{}_{}", tier, kWaitS), Real(t, kWaitS), 3});
  }
}

// How files of groups not pinned are read (groups or members), and how often the page
// cache still held a file of a group read ahead.
void MissReadFields(WatchFields& f, const nlohmann::json& c) {
  using namespace miss_read_stat;
  if (!c.is_object() || !c.contains(kMissReads)) return;
  const nlohmann::json& m = c[kMissReads];
  f.push_back({"miss_reads", m.value(kChoice, "")});
  f.push_back({std::string("miss_") + kPageCacheHits, At(m, {kPageCacheHits})});
  f.push_back({std::string("miss_") + kKeptMeasured, NumberOrNull(m, kKeptMeasured), 3});
}

// A compressed archive's decoding, when the mount serves one.
void DecodeFields(WatchFields& f, const nlohmann::json& io, const watch::Rates& r) {
  using namespace source_stat;
  if (!io.is_object() || !io.contains(kDecodedGroups)) return;
  f.push_back({"decoded_mb_per_s", r.decoded_mb_s, 1});
  f.push_back({"decode_cores", r.decode_cores, 2});
  f.push_back({kDecodedGroups, At(io, {kDecodedGroups})});
  f.push_back({kDecodeErrors, At(io, {kDecodeErrors})});
}

// The peers' fields, when the mount reads through peers.
void PeerFields(WatchFields& f, const nlohmann::json& io, const watch::Rates& r) {
  using namespace source_stat;
  if (!io.is_object() || !io.contains(kPeers)) return;
  uint64_t up = 0;
  for (const nlohmann::json& p : io[kPeers]) up += p.value(remote::peer_stat::kUp, true) ? 1 : 0;
  f.push_back({"peers", io[kPeers].size()});
  f.push_back({"peers_up", up});
  f.push_back({"peer_mb_per_s", r.peer_mb_s, 1});
  f.push_back({"store_mb_per_s", r.store_mb_s, 1});
  f.push_back({"peer_failures", At(io, {kPeerFailures})});
  f.push_back({"peer_fallbacks", At(io, {kPeerFallbacks})});
  f.push_back({"peer_mismatches", At(io, {kPeerMismatches})});
}

// A signed store's credentials: where they come from, when they expire (null: never) and
// how their refreshes went.
void CredentialFields(WatchFields& f, const nlohmann::json& io) {
  using namespace source_stat;
  if (!io.is_object() || !io.contains(kCredentials)) return;
  const nlohmann::json& c = io[kCredentials];
  auto key = [](const char* name) { return fmt::format("{}_{}", kCredentials, name); };
  f.push_back({key(kCredentialSource), c.value(kCredentialSource, "")});
  f.push_back({key(kCredentialExpiresIn), NumberOrNull(c, kCredentialExpiresIn)});
  f.push_back({key(kCredentialRefreshes), At(c, {kCredentialRefreshes})});
  f.push_back({key(kCredentialRefreshFailures), At(c, {kCredentialRefreshFailures})});
}

std::string KvOf(const WatchField& field) {
  const nlohmann::json& v = field.value;
  if (v.is_null()) return "-";
  if (v.is_string()) return KvValue(v.get<std::string>());
  if (v.is_number() && field.decimals >= 0) {
    return fmt::format("{:.{}f}", v.get<double>(), field.decimals);
  }
  return v.dump();
}

nlohmann::json JsonOf(const WatchField& field) {
  if (!field.value.is_number() || field.decimals < 0) return field.value;
  const double scale = std::pow(10.0, field.decimals);
  return std::round(field.value.get<double>() * scale) / scale;
}

}  // namespace

WatchFields WatchFieldsOf(const nlohmann::json& previous, const nlohmann::json& now, double dt_s,
                          const KernelView& kernel) {
  const watch::Rates r = watch::RatesOf(previous, now, dt_s);
  const nlohmann::json& c = now.contains("cache") ? now["cache"] : nlohmann::json();
  const nlohmann::json& io = now.contains("io") ? now["io"] : nlohmann::json();
  WatchFields f;
  ServedFields(f, now, r);
  f.push_back({watch_stat::kPageCacheRatio,
               kernel.page_cache_ratio ? nlohmann::json(*kernel.page_cache_ratio) : nullptr, 3});
  TierFields(f, c, r);
  StallFields(f, c);
  MissReadFields(f, c);
  DecodeFields(f, io, r);
  PeerFields(f, io, r);
  CredentialFields(f, io);
  return f;
}

std::string WatchLine(const nlohmann::json& previous, const nlohmann::json& now, double dt_s,
                      const KernelView& kernel) {
  std::string line;
  for (const WatchField& field : WatchFieldsOf(previous, now, dt_s, kernel)) {
    if (!line.empty()) line += ' ';
    line += field.key + "=" + KvOf(field);
  }
  return line;
}

std::string WatchJson(const nlohmann::json& previous, const nlohmann::json& now, double dt_s,
                      const KernelView& kernel) {
  nlohmann::ordered_json object = nlohmann::ordered_json::object();
  for (const WatchField& field : WatchFieldsOf(previous, now, dt_s, kernel)) {
    object[field.key] = JsonOf(field);
  }
  // A name from the store (a credential source) may hold bytes that are not UTF-8.
  return object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace gpufs
