#include "source/remote/remote_dataset.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>

#include <fmt/ranges.h>

#include "base/file_io.h"
#include "base/private_files.h"
#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"
#include "dataset/format/mytar.h"
#include "dataset/format/native_index.h"
#include "dataset/format/tar.h"
#include "dataset/open/open_archive.h"
#include "source/blob_source.h"
#include "source/remote/transfer/object_reader.h"

namespace gpufs::remote {
namespace {

constexpr size_t kMaxIndexBytes = size_t{2} << 30;

struct timespec Now() {
  struct timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  return now;
}

// What identifies an object's content as a SourceStamp: its size and a hash of its ETag
// (in the field a local file's mtime takes), so an index made of it is reused only while
// both are unchanged.
SourceStamp StampOfObject(const ObjectInfo& object) {
  return SourceStamp{object.size,
                     static_cast<int64_t>(ChecksumOf(object.etag.data(), object.etag.size()) >> 1)};
}

std::string CacheKey(const ObjectStore& store, const std::string& name) {
  const std::string url = store.Describe(name);
  return fmt::format("{:016x}", ChecksumOf(url.data(), url.size()));
}

// The objects under the root, by name: one listing on S3, a HEAD of each name on HTTP or
// where listing is denied (all in flight at once).
Result<std::map<std::string, ObjectInfo>> FindObjects(ObjectStore& store, const std::string& folder,
                                                      const std::vector<std::string>& names) {
  std::map<std::string, ObjectInfo> found;
  if (store.config().scheme == Scheme::kS3) {
    // Credentials without s3:ListBucket are refused the listing: a HEAD of each name
    // (s3:GetObject) finds the same objects.
    auto listed = store.List(folder);
    if (!listed && listed.error().code != EACCES) return listed.error();
    if (listed) {
      for (ObjectInfo& o : *listed) found[o.name] = std::move(o);
      return found;
    }
  }
  std::mutex mutex;
  std::condition_variable cv;
  size_t pending = names.size();
  std::optional<Error> failure;  // anything but a missing object stops the mount
  for (const std::string& name : names) {
    store.Head(name, [&, name](Result<ObjectInfo> r) {
      std::lock_guard lock(mutex);
      if (r) {
        found[name] = *r;
        found[name].name = name;
      } else if (r.error().code != ENOENT && !failure) {
        failure = r.error();
      }
      if (--pending == 0) cv.notify_one();
    });
  }
  std::unique_lock lock(mutex);
  cv.wait(lock, [&] { return pending == 0; });
  if (failure) return *failure;
  return found;
}

// A web server that ignores Range would answer every read with the whole file: refused
// here, with the reason, by a ranged GET of one blob. (S3 stores all honour Range.)
Status CheckRanges(ObjectStore& store, const std::vector<ObjectInfo>& objects) {
  if (store.config().scheme != Scheme::kHttp) return Ok{};
  const auto first =
      std::find_if(objects.begin(), objects.end(), [](const ObjectInfo& o) { return o.size > 0; });
  if (first == objects.end()) return Ok{};
  auto probed = store.ProbeSync(first->name);
  if (!probed) return probed.error();
  return Ok{};
}

// Each blob's object, checked against what the index says of it.
Status CheckBlobObjects(ObjectStore& store, const std::string& folder, RemoteDataset& d,
                        const std::string& index_url, bool exact) {
  std::vector<std::string> names;
  for (const std::string& blob : d.dataset.catalog.blobs()) names.push_back(folder + blob);
  auto found = FindObjects(store, folder, names);
  if (!found) return found.error();
  std::vector<std::string> problems;
  for (size_t b = 0; b < names.size(); ++b) {
    const uint64_t want = d.dataset.blobs[b].size;
    auto it = found->find(names[b]);
    if (it == found->end()) {
      problems.push_back(fmt::format("{} is missing", store.Describe(names[b])));
    } else if (it->second.size < want || (exact && it->second.size != want)) {
      problems.push_back(fmt::format(
          "{} is {} bytes but {} says {}: {}", store.Describe(names[b]), it->second.size, index_url,
          want,
          it->second.size < want ? "the upload is incomplete" : "it changed since the index"));
    } else {
      d.objects.push_back(it->second);
    }
  }
  if (problems.empty()) return CheckRanges(store, d.objects);
  return Fail(EINVAL, "cannot use the dataset at {}: {}{}", store.Describe(folder),
              problems.front(),
              problems.size() > 1 ? fmt::format(" (and {} more blobs)", problems.size() - 1) : "");
}

// The store's index.gpufs (from the store itself, never a peer), kept in the cache folder
// under its URL and ETag, then mapped like a local one.
std::filesystem::path CachedIndexPath(const ObjectStore& store, const ObjectInfo& index,
                                      const OpenOptions& options) {
  return options.cache_dir / "remote" /
         fmt::format("{}-{:016x}.gpufs", CacheKey(store, index.name),
                     ChecksumOf(index.etag.data(), index.etag.size()));
}

// `notes` gains what opening the cache folder had to say.
Result<OpenedIndex> FetchNativeIndex(ObjectStore& store, const ObjectInfo& index,
                                     const OpenOptions& options, std::vector<std::string>& notes) {
  const std::string url = store.Describe(index.name);
  const std::filesystem::path cached = CachedIndexPath(store, index, options);
  if (Status s = OpenCacheDir(options.cache_dir, notes); !s) return s.error();
  std::error_code ec;
  const bool kept = std::filesystem::exists(std::filesystem::symlink_status(cached, ec));
  auto opened = kept ? OpenCachedIndex(cached) : Result<OpenedIndex>(Error{ENOENT, ""});
  if (!opened) {
    // Missing, or a kept copy that cannot be used (damaged, or not a file: never followed
    // if a link): fetched again, and renamed over whatever is there.
    auto bytes = store.GetWhole(index.name, kMaxIndexBytes);
    if (!bytes) return bytes.error();
    if (Status s = WriteFileAtomically(cached, *bytes, FileAccess::Private()); !s) {
      return s.error();
    }
    opened = OpenCachedIndex(cached);
  }
  if (!opened) {
    std::filesystem::remove(cached, ec);  // fetched again next time
    return Fail(opened.error().code, "cannot use {}: {}", url, opened.error().message);
  }
  return opened;
}

Result<RemoteDataset> OpenNativeIndexObject(ObjectStore& store, const ObjectInfo& index,
                                            const OpenOptions& options) {
  std::vector<std::string> notes;
  auto opened = FetchNativeIndex(store, index, options, notes);
  if (!opened) return opened.error();
  RemoteDataset d{Dataset{{},
                          std::move(opened->catalog),
                          std::move(opened->info.blobs),
                          "native",
                          CachedIndexPath(store, index, options),
                          Now(),
                          std::move(notes),
                          {}},
                  {}};
  const std::string url = store.Describe(index.name);
  const std::string folder = index.name.substr(0, index.name.size() - kNativeIndexName.size());
  if (Status s = CheckBlobObjects(store, folder, d, url, true); !s) return s.error();
  return d;
}

// The probes of a dataset's names that the store refused (403 AccessDenied): without
// s3:ListBucket, S3 answers 403, not 404, for a name that does not exist.
struct Denials {
  std::vector<std::string> names;
};

// The head of `name`, or nothing when the store says it does not exist, or denies it with
// AccessDenied (noted in `denials`, when given).
Result<std::optional<ObjectInfo>> HeadIfAny(ObjectStore& store, const std::string& name,
                                            Denials* denials = nullptr) {
  auto head = store.HeadSync(name);
  if (head) return std::optional<ObjectInfo>(*head);
  if (head.error().code == ENOENT) return std::optional<ObjectInfo>();
  if (head.error().code == EACCES) {
    // A HEAD's answer has no body, so no word of why: a GET of the same object brings
    // the store's own message (a wrong key, a bad signature, a denied policy).
    auto get = store.GetWhole(name, kMaxIndexBytes);
    if (get) return head.error();
    const bool denied = get.error().code == EACCES &&
                        (get.error().message.find("AccessDenied") != std::string::npos ||
                         store.config().scheme == Scheme::kHttp);
    if (denied && denials != nullptr) {
      denials->names.push_back(name);
      return std::optional<ObjectInfo>();
    }
    return get.error();
  }
  return head.error();
}

// Whether `index` describes the tree of `text` over the same bytes, its checksums and
// digests aside. An index's name table holds the tree's names, then its class and blob
// names.
bool SameTree(const Catalog& index, const Catalog& text) {
  const CatalogTables& x = index.tables();
  const CatalogTables& y = text.tables();
  const auto same_bytes = [](auto p, auto q) {  // an empty table may have no pointer
    return p.size() == q.size() &&
           (p.empty() || std::memcmp(p.data(), q.data(), p.size_bytes()) == 0);
  };
  return x.names.starts_with(y.names) && x.classes == y.classes && x.blobs == y.blobs &&
         same_bytes(x.dirs, y.dirs) && same_bytes(x.groups, y.groups) &&
         same_bytes(x.file_names, y.file_names) && same_bytes(x.extents, y.extents) &&
         same_bytes(x.wide, y.wide) && same_bytes(x.file_classes, y.file_classes);
}

// The catalog of the index.gpufs beside a mytar folder's metadata.txt, when `gpufsd index`
// made it of this very text (its tree is the text's, record for record): it adds the
// members' checksums and SHA-256 digests. None when there is no such index.
Result<std::optional<Catalog>> IndexOfText(ObjectStore& store, const std::string& folder,
                                           const Catalog& text, const OpenOptions& options) {
  Denials denied;  // without s3:ListBucket, a missing index.gpufs is denied, not missing
  auto index = HeadIfAny(store, folder + std::string(kNativeIndexName), &denied);
  if (!index || !*index)
    return index ? Result<std::optional<Catalog>>(std::nullopt) : index.error();
  std::vector<std::string> notes;  // the mytar mount opens the cache folder again, and says
  auto opened = FetchNativeIndex(store, **index, options, notes);
  if (!opened) return opened.error();
  if (!SameTree(opened->catalog, text)) return std::optional<Catalog>();
  return std::optional<Catalog>(std::move(opened->catalog));
}

Result<RemoteDataset> OpenMytarObject(ObjectStore& store, const ObjectInfo& metadata,
                                      const OpenOptions& options) {
  const std::string url = store.Describe(metadata.name);
  auto text = store.GetWhole(metadata.name, kMaxIndexBytes);
  if (!text) return text.error();
  auto spec = ParseMytarIndex(*text, url);
  if (!spec) return spec.error();
  auto catalog = CatalogFromSpec(*spec);
  if (!catalog) return catalog.error();
  const std::string folder = metadata.name.substr(0, metadata.name.size() - kMytarIndexName.size());
  // The index only adds checks and digests: one that cannot be fetched or kept (a refused
  // cache folder, say) leaves the text's catalog, and the mount says why.
  std::vector<std::string> notes;
  auto indexed = IndexOfText(store, folder, *catalog, options);
  if (!indexed) {
    notes.push_back(
        fmt::format("not using the index.gpufs beside {}: {}", url, indexed.error().message));
  }
  const bool with_index = indexed && *indexed;
  if (with_index) catalog = std::move(**indexed);
  RemoteDataset d{Dataset{{},
                          std::move(*catalog),
                          {},
                          with_index ? "mytar+index" : "mytar",
                          {},
                          Now(),
                          std::move(notes),
                          {}},
                  {}};
  // A mytar blob holds one group; it may hold more bytes after it.
  for (const GroupSpec& g : spec->groups) d.dataset.blobs.push_back(BlobInfo{g.offset + g.size, 0});
  if (Status s = CheckBlobObjects(store, folder, d, url, false); !s) return s.error();
  return d;
}

Result<RemoteDataset> OpenTarObject(ObjectStore& store, const ObjectInfo& archive,
                                    const OpenOptions& options) {
  const SourceStamp stamp = StampOfObject(archive);
  const std::filesystem::path name = archive.name;
  std::vector<std::string> notes;
  std::vector<IndexPlace> candidates;
  if (Status s = OpenCacheDir(options.cache_dir, notes); !s) {
    notes.push_back(s.error().message);
  } else {
    candidates.push_back(IndexPlace{
        options.cache_dir / "remote" /
        fmt::format("{}-{}.gpufs-index", name.filename().string(), CacheKey(store, archive.name))});
  }
  if (auto saved = OpenSavedTarIndex(name, candidates, stamp, notes)) {
    saved->dir.clear();
    saved->mtime = Now();
    saved->notes = std::move(notes);
    return RemoteDataset{std::move(*saved), {archive}};
  }
  const auto requests_before = store.Stats().value(source_stat::kRequests, uint64_t{0});
  ObjectReader reader(store, archive);
  const ArchiveKind kind = SniffArchive(reader);
  if (kind != ArchiveKind::kTar && kind != ArchiveKind::kZip && kind != ArchiveKind::kGzip) {
    return NotServed(reader.label(), kind);
  }
  const ReaderFactory more = [&store, &archive] {
    return std::unique_ptr<RangeReader>(new ObjectReader(store, archive));
  };
  auto d = ListArchive(reader, kind, name, stamp, options, more, store.config().connections, 512);
  if (!d) return d.error();
  d->dir.clear();
  d->mtime = Now();
  d->notes.insert(d->notes.begin(), notes.begin(), notes.end());
  d->index = SaveTarIndex(*d, stamp, candidates);
  d->notes.push_back(fmt::format(
      "listed {} files of {} with {} requests; the index is kept at {}", d->catalog.file_count(),
      reader.label(), store.Stats().value(source_stat::kRequests, uint64_t{0}) - requests_before,
      d->index.empty() ? "(nowhere)" : d->index.string()));
  return RemoteDataset{std::move(*d), {archive}};
}

// The mount's answer when no name of a dataset could be read and some were refused: over
// S3 without s3:ListBucket a missing name is refused too, so the permission is named.
Error DeniedProbes(ObjectStore& store, const Denials& denials) {
  std::vector<std::string> names;
  for (const std::string& name : denials.names) names.push_back(store.Describe(name));
  if (store.config().scheme == Scheme::kHttp) {
    return Error{EACCES, fmt::format("cannot open dataset {}: access denied (HTTP 403) to {}",
                                     store.Describe(""), fmt::join(names, " and "))};
  }
  return Error{EACCES,
               fmt::format("cannot open dataset {}: access denied (HTTP 403 AccessDenied) to {}; "
                           "check that your credentials may s3:GetObject on {}* "
                           "(s3:ListBucket is not needed)",
                           store.Describe(""), fmt::join(names, " and "), store.Describe(""))};
}

// The folder's metadata.txt: at the root, in the chosen group-size folder, or (S3) in the
// only group-size folder there is.
Result<std::optional<ObjectInfo>> FindMytarIndex(ObjectStore& store, const OpenOptions& options,
                                                 Denials& denials) {
  const std::string index(kMytarIndexName);
  if (options.group_size) {
    auto found = HeadIfAny(store, fmt::format("{}/{}", *options.group_size, index), &denials);
    if (!found || *found) return found;
    return Fail(ENOENT, "cannot open dataset {}: no group size {} ({} is missing)",
                store.Describe(""), *options.group_size,
                store.Describe(fmt::format("{}/{}", *options.group_size, index)));
  }
  auto root = HeadIfAny(store, index, &denials);
  if (!root || *root || store.config().scheme != Scheme::kS3) return root;
  auto listed = store.List("");
  // Without s3:ListBucket, a group-size folder is found only with --group-size.
  if (!listed && listed.error().code == EACCES) return std::optional<ObjectInfo>();
  if (!listed) return listed.error();
  std::vector<ObjectInfo> below;
  for (const ObjectInfo& o : *listed) {
    const size_t slash = o.name.find('/');
    if (slash != std::string::npos && slash > 0 && o.name.substr(slash + 1) == index &&
        o.name.find_first_not_of("0123456789") == slash) {
      below.push_back(o);
    }
  }
  if (below.size() == 1) return std::optional<ObjectInfo>(below.front());
  if (below.empty()) return std::optional<ObjectInfo>();
  std::string sizes;
  for (const ObjectInfo& o : below)
    sizes += (sizes.empty() ? "" : ", ") + o.name.substr(0, o.name.find('/'));
  return Fail(
      EINVAL,
      "cannot open dataset {}: it holds several group sizes ({}); choose one with --group-size",
      store.Describe(""), sizes);
}

}  // namespace

Result<RemoteDataset> OpenRemoteDataset(ObjectStore& store, const std::string& leaf,
                                        const OpenOptions& options) {
  if (!leaf.empty()) {
    // Over HTTP a ranged GET finds the size: it works with a GET-presigned URL, which
    // refuses a HEAD, and refuses a server that ignores Range before the tar is listed.
    auto archive =
        store.config().scheme == Scheme::kHttp ? store.ProbeSync(leaf) : store.HeadSync(leaf);
    if (!archive) return archive.error();
    return OpenTarObject(store, *archive, options);
  }
  Denials denials;
  auto mytar = FindMytarIndex(store, options, denials);
  if (!mytar) return mytar.error();
  if (*mytar) return OpenMytarObject(store, **mytar, options);
  auto native = HeadIfAny(store, std::string(kNativeIndexName), &denials);
  if (!native) return native.error();
  if (*native) return OpenNativeIndexObject(store, **native, options);
  if (!denials.names.empty()) return DeniedProbes(store, denials);
  return Fail(ENOENT,
              "cannot open dataset {}: it holds neither {} (a pack) nor {} (mytar){}; a tar "
              "archive's URL names the archive",
              store.Describe(""), kNativeIndexName, kMytarIndexName,
              store.config().scheme == Scheme::kHttp ? "" : " nor a group-size folder with one");
}

}  // namespace gpufs::remote
