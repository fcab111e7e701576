// Opens a dataset that lies in an object store or on an HTTP server, checks it against
// what the store holds, and returns its catalog and the objects its blobs are:
//
//   ROOT/index.gpufs + blobs      a native pack (uploaded with rclone, s3cmd, aws s3 sync)
//   ROOT/metadata.txt + blobs     the mytar layout (or ROOT/<group size>/metadata.txt)
//   ROOT/ARCHIVE.tar              a tar archive: its index is built with ranged reads of
//                                 the headers and kept in the cache folder, reused while
//                                 the object's size and ETag are unchanged
//
// Every blob must exist with the size the index gives (at least that size for mytar
// blobs); a missing, short or changed object is refused, naming it. Each object's ETag is
// recorded so that every later read is checked against it.
#pragma once

#include <string>
#include <vector>

#include "dataset/open/open_dataset.h"
#include "source/remote/transfer/object_store.h"

namespace gpufs::remote {

struct RemoteDataset {
  Dataset dataset;                  // dir is empty: blobs are objects, not files
  std::vector<ObjectInfo> objects;  // blob b is objects[b] (name relative to the root)
};

// `leaf` is the object the URL names (a tar archive), or empty for the store's root
// folder. Index files fetched from the store are kept under options.cache_dir.
Result<RemoteDataset> OpenRemoteDataset(ObjectStore& store, const std::string& leaf,
                                        const OpenOptions& options);

}  // namespace gpufs::remote
