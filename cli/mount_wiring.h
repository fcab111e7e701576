// What a mount serves, wired together as its plan says (mount_plan.h): the dataset opened
// and checked (before anything is mounted, in the process that was started), then the
// cache stack over it with the disk tier (in the process that serves, after the daemon
// detached: memory locks and threads do not survive a fork). Each step is taken once, in
// the order of the layers.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/arena.h"
#include "cache/group_cache.h"
#include "cache/policy/policy.h"
#include "cache/tier/disk_tier.h"
#include "cli/mount_plan.h"
#include "cli/options/mount_options.h"
#include "dataset/open/open_dataset.h"
#include "fs/filesystem.h"
#include "gpu/staging.h"
#include "source/blob_files.h"
#include "source/io_engine.h"
#include "source/member_digests.h"
#include "source/remote/location.h"
#include "source/remote/transfer/object_store.h"

namespace gpufs {

// A dataset opened for a mount, and the store its blobs are in when they are objects.
struct Opened {
  Dataset dataset;
  std::optional<remote::Location> location;
  std::vector<remote::ObjectInfo> objects;
  // With --peers: what every byte a peer sends is checked against.
  std::shared_ptr<const MemberDigests> digests;
  // What mount tables, logs and user.gpufs.source call it: its URL (which holds no
  // secret), a tar archive's own path (two archives side by side are two datasets), or
  // its folder.
  std::string Label() const {
    if (location) return location->url;
    if (dataset.format == "tar" && dataset.catalog.blobs().size() == 1) {
      return (dataset.dir / dataset.catalog.blobs().front()).string();
    }
    return dataset.dir.string();
  }
};

// The cache and its I/O engine. Built in the serving process: memory locks and threads do
// not survive the fork that detaches the daemon.
struct CacheStack {
  std::unique_ptr<gpu::Stager> stager;
  std::unique_ptr<PinnedArena> arena;
  std::unique_ptr<BlobFiles> blobs;
  std::unique_ptr<IoEngine> engine;
  std::unique_ptr<remote::ObjectStore> store;
  std::unique_ptr<BlobSource> stored;  // under `source` where that decodes a compressed archive
  std::unique_ptr<BlobSource> source;
  std::unique_ptr<EvictionPolicy> policy;
  std::unique_ptr<DiskTier> tier;
  std::unique_ptr<GroupCache> cache;
  GpuInfo gpu;
  CacheStack() = default;
  CacheStack(CacheStack&&) = default;
  // The cache and its readers go first; the arena is unregistered before it is unmapped.
  ~CacheStack() {
    cache.reset();
    tier.reset();
    source.reset();
    stored.reset();
    store.reset();
    engine.reset();
    if (gpu.registered && stager && arena) stager->UnregisterHost(arena->base());
  }
};

// Opens and checks the dataset a mount serves, through the plan's store, before anything
// is mounted; then plans its disk tier (`plan.tier`), which only the daemon opens.
Result<Opened> OpenForMount(const MountArgs& args, MountPlan& plan);
// The cache, its source and I/O engine and the disk tier, over an opened dataset, as
// planned.
Result<CacheStack> MakeCacheStack(const MountArgs& args, const MountPlan& plan,
                                  const Opened& opened);

}  // namespace gpufs
