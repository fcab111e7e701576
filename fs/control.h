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
#include "fs/kernel_stat.h"
#include "source/figure.h"

namespace gpufs {

// The keys of the stats reply, spelled here once for the daemon, gpufs-stat and /metrics;
// the cache's and the source's own are under kCache (cache_stat) and kIo (source_stat).
namespace fs_stat {
inline constexpr const char* kPid = "pid";
inline constexpr const char* kSource = "source";
inline constexpr const char* kFormat = "format";
inline constexpr const char* kFiles = "files";
inline constexpr const char* kDirs = "dirs";
inline constexpr const char* kBytes = "bytes";
inline constexpr const char* kGroups = "groups";
inline constexpr const char* kInodes = "inodes";
inline constexpr const char* kServed = "served";  // an object of kReads, kBytes and kFiles
inline constexpr const char* kReads = "reads";
inline constexpr const char* kCache = "cache";  // null without a cache
inline constexpr const char* kIo = "io";
inline constexpr const char* kKernel = "kernel";
inline constexpr const char* kProblems = "problems";
inline constexpr const char* kGpu = "gpu";

inline constexpr Figure kFigures[] = {
    {kFiles, "dataset_files", kGauge, "Files in the mounted dataset."},
    {kBytes, "dataset_bytes", kGauge, "Bytes in the mounted dataset."},
    {kInodes, "kernel_inodes", kGauge, "Inode references the kernel holds."}};
inline constexpr Figure kServedFigures[] = {
    {kReads, "reads_total", kCounter, "Read requests answered."},
    {kBytes, "served_bytes_total", kCounter, "Bytes returned by reads."},
    {kFiles, "served_files_total", kCounter, "Files read to their end."}};
}  // namespace fs_stat

using ReplySink = std::function<void(std::string_view)>;

// Answers one request line through `reply`, which receives the reply in pieces.
void HandleControlRequest(const Filesystem& fs, std::string_view request, const ReplySink& reply);

// The stats reply, also the source of the metrics endpoint.
nlohmann::json StatsOf(const Filesystem& fs);

}  // namespace gpufs
