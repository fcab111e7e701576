// Private state: the folders gpufs keeps for one user (the disk tier, the index cache, the
// control socket's folder) and the files it writes.
//
// Another user on the node must neither read what a mount cached nor steer where gpufs
// writes. So a private folder is created 0700 (each level gpufs creates), opened without
// following a link at its last step, and its owner and mode are checked on the descriptor:
// a folder of another uid, or one that others may write into, is refused with a message
// naming the fix; one of ours that is merely readable by others (made by an older version)
// is tightened to 0700. Everything beneath is reached with openat from that descriptor.
//
// Every file gpufs writes is created exclusively (O_CREAT|O_EXCL|O_NOFOLLOW under an
// unpredictable name) in the folder's descriptor and renamed over its final name, so that
// a link planted at either name is replaced, never followed.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "base/error.h"

namespace gpufs {

// A descriptor closed when it goes out of scope.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  ~UniqueFd();
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// What a private folder is for, as its error messages name it.
struct FolderRole {
  std::string what;  // "disk cache", "index cache", "runtime folder"
  std::string fix;   // for a folder of another uid: "give each user a folder of their own ..."
};

struct PrivateFolder {
  UniqueFd fd;       // O_DIRECTORY, checked
  std::string note;  // non-empty when the folder was tightened: worth one log line
};

// Opens `dir` as a private folder for `role`, creating it and any missing parent 0700.
// Refused, naming `dir` and the fix: a link at its last step, not a folder, owned by
// another uid, or writable by group or others. Readable by others only: tightened to 0700.
Result<PrivateFolder> OpenPrivateFolder(const std::filesystem::path& dir, const FolderRole& role);

// The folder that holds `file`, opened level by level from '/' as OpenPrivateFolder opens
// the levels above its own, creating a missing level 0700: a level another user owns or may
// write (unless sticky) is refused, and a link is followed only where no one else may write.
// The folder itself need not be private (/var/log); the caller opens `file` beneath it with
// O_NOFOLLOW. `role.what` names the file in messages ("log file").
Result<UniqueFd> OpenFolderAbove(const std::filesystem::path& file, const FolderRole& role);

// As OpenPrivateFolder, for the folder `name` (one segment) beneath the checked `parent_fd`;
// `shown` names it in messages.
Result<PrivateFolder> OpenPrivateFolderAt(int parent_fd, const std::string& name,
                                          const std::filesystem::path& shown,
                                          const FolderRole& role);

// Why the open folder `fd` (at `shown`) is not private to this user, or empty when it is
// (after tightening a folder of ours that others may only read; `note` then says so).
std::string PrivateFolderProblem(int fd, const std::filesystem::path& shown, const FolderRole& role,
                                 std::string& note);

// Creates the file `name` (one segment) beneath `dir_fd`, O_CREAT|O_EXCL|O_NOFOLLOW, open
// for reading and writing with `mode` (less the umask): any file or link already there is
// refused (EEXIST). `shown` names it in messages.
Result<UniqueFd> CreateNew(int dir_fd, const std::string& name, mode_t mode,
                           const std::filesystem::path& shown);

// Creates a new file beneath `dir_fd` named `prefix` and a random tail, O_EXCL|O_NOFOLLOW,
// open for writing with `mode` (less the umask). Returns the descriptor and sets `name`.
Result<UniqueFd> CreateExclusive(int dir_fd, std::string_view prefix, mode_t mode,
                                 std::string& name, const std::filesystem::path& shown_dir);

// Writes `bytes` to a new file beneath `dir_fd` (created exclusively), fsyncs it, renames
// it over `name` and fsyncs the folder: readers see the old file or the whole new one, and
// a link at `name` is replaced, not followed. `shown` names the file in messages.
Status ReplaceFileAt(int dir_fd, const std::string& name, std::string_view bytes, mode_t mode,
                     const std::filesystem::path& shown);

// Opens `path` for reading when it may be trusted to steer what gpufs does (an index found
// beside a dataset, the AWS files, a token file): a regular file owned by this user (the
// effective uid), by root or by `also_trusted` (the owner of the data an index describes),
// that neither group nor others may write. Anyone else who could write it could change
// what the mount shows, or make a daemon run as root act for them. With `follow_link`, a
// link at its last step is followed and its target checked (a Kubernetes token is one).
// The error's message is the reason alone, for the caller to put in context.
Result<UniqueFd> OpenTrustedFile(const std::filesystem::path& path, uid_t also_trusted,
                                 bool follow_link);

// OpenTrustedFile for an index beside data owned by `data_owner`; a link is refused.
inline Result<UniqueFd> OpenTrustedIndex(const std::filesystem::path& index, uid_t data_owner) {
  return OpenTrustedFile(index, data_owner, false);
}

// Who may read a file gpufs writes.
struct FileAccess {
  // A cache: in a folder checked private to this user (made 0700 if absent), file 0600.
  static FileAccess Private() { return {true, 0600}; }
  // An output the user asked for (an index beside a dataset, a pack): `mode` less the umask.
  static FileAccess Shared(mode_t mode = 0644) { return {false, mode}; }

  bool private_folder = true;
  mode_t mode = 0600;
};

// Writes `bytes` to a file created exclusively beside `path` under an unpredictable name,
// fsyncs it, renames it over `path` and fsyncs the folder: readers see the old file or the
// whole new one, never a part, and a link planted at either name is never followed.
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view bytes,
                           FileAccess access);

}  // namespace gpufs
