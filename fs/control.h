// The daemon's control protocol, spoken over a local socket (the root's
// user.gpufs.control names it) by gpufs-stat: one request line of JSON, then the reply
// until the daemon closes the connection.
//
//   {"op":"stats"}    one JSON line: the served counters, the cache's, the mount's identity
//   {"op":"residency","path":P,"list":"none"|"kernel"|"all","by":"none"|"class"|"group"}
//                     one JSON line (totals, buckets, class names), then one line per listed
//                     file: "<p|-><k|-><d|-> <size> <group> <class id> <path>" where p
//                     means pinned in the daemon, k that the kernel holds the inode and d
//                     that the group has a copy in the disk tier. The totals and buckets
//                     carry "disk" counts only when the mount has a disk tier.
//   anything else     {"error": "..."}
//
// Paths are the last field so that they may hold spaces; catalog names hold no newline.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fs/filesystem.h"

namespace gpufs {

using ReplySink = std::function<void(std::string_view)>;

// Answers one request line through `reply`, which receives the reply in pieces.
void HandleControlRequest(const Filesystem& fs, std::string_view request, const ReplySink& reply);

// The stats reply, also the source of the metrics endpoint.
nlohmann::json StatsOf(const Filesystem& fs);

// The stats in Prometheus' text exposition format.
std::string MetricsText(const Filesystem& fs);

}  // namespace gpufs
