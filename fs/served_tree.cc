#include "fs/served_tree.h"

#include <fcntl.h>

#include <deque>
#include <string>
#include <vector>

#include "dataset/format/name_rules.h"
#include "dataset/printable.h"

namespace gpufs {
namespace {

struct Folder {
  uint64_t ino = 0;
  uint64_t parent = 0;  // the inode its '..' must name: the root's is the root
  std::string path;     // from the root; empty for the root
};

// What a listing has shown so far. Entries are checked as they come, never kept, since a
// folder may hold millions.
struct Listing {
  uint64_t count = 0;  // entries, '.' and '..' included
  uint64_t subfolders = 0;
  nlink_t links = 0;  // what '.' says
  std::string previous;
};

bool SameAttr(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_mode == b.st_mode && a.st_nlink == b.st_nlink &&
         a.st_size == b.st_size;
}

// What readdir(3) and lookup can carry: one path component.
bool IsComponent(std::string_view name) {
  return !name.empty() && name.size() <= kNameMax && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

std::string Join(std::string_view folder, std::string_view name) {
  if (folder.empty() || name.empty()) return std::string(folder.empty() ? name : folder);
  return fmt::format("{}/{}", folder, name);
}

class TreeWalk {
 public:
  TreeWalk(const Filesystem& fs, std::string_view what)
      : fs_(fs), what_(what), nodes_(fs.StatFs().f_files), seen_(nodes_ + 1) {}

  Status Run() {
    seen_[Filesystem::kRootIno] = true;
    if (Status s = CheckXattrs(Filesystem::kRootIno, "", ""); !s) return s;
    folders_.push_back(Folder{Filesystem::kRootIno, Filesystem::kRootIno, ""});
    uint64_t reached = 1;
    while (!folders_.empty()) {
      const Folder folder = std::move(folders_.front());
      folders_.pop_front();
      auto listed = Visit(folder);
      if (!listed) return listed.error();
      reached += *listed;
    }
    if (reached != nodes_) return Bad("the walk reached {} of its {} nodes", reached, nodes_);
    return Ok{};
  }

 private:
  // Checks one folder and what it lists, queueing its subfolders; returns how many entries
  // it lists besides '.' and '..'. The listing's order is checked in a pass of its own
  // first: a lookup misses a name listed out of order, which would hide why.
  Result<uint64_t> Visit(const Folder& folder) {
    if (Status s = fs_.OpenDir(folder.ino); !s) return Cannot("open", folder.path, s.error());
    Listing listing;
    Status taken = Ok{};
    Status listed = fs_.ReadDir(folder.ino, 0, [&](const DirEntry& e) {
      taken = Take(folder, listing, e);
      return taken.ok();
    });
    if (listed && taken) {
      listed = fs_.ReadDir(folder.ino, 2, [&](const DirEntry& e) {
        taken = CheckEntry(folder, e.name, e.attr);
        return taken.ok();
      });
    }
    if (!listed) return Cannot("list", folder.path, listed.error());
    if (!taken) return taken.error();
    if (listing.count < 2) return Bad("{} does not list '.' and '..'", Where(folder.path));
    if (listing.links != 2 + listing.subfolders) {
      return Bad("{} has {} links but {} subfolders", Where(folder.path), listing.links,
                 listing.subfolders);
    }
    if (Status s = CheckResume(folder, listing.count); !s) return s.error();
    return listing.count - 2;
  }

  Status Take(const Folder& folder, Listing& listing, const DirEntry& e) {
    const uint64_t k = listing.count++;
    if (e.next_offset != k + 1) {
      return Bad("{} gives entry {} the offset {}", Where(folder.path), k, e.next_offset);
    }
    if (k < 2) {
      if (k == 0) listing.links = e.attr.st_nlink;
      return CheckDot(folder, k, e);
    }
    // Lookup is a binary search: it finds what a listing shows only when the listing is in
    // name order, each name once.
    if (k > 2 && !(listing.previous < e.name)) {
      return Bad("{} lists '{}' after '{}': out of name order, or twice", Where(folder.path),
                 Printable(e.name), Printable(listing.previous));
    }
    listing.previous.assign(e.name);
    listing.subfolders += S_ISDIR(e.attr.st_mode) ? 1 : 0;
    return Ok{};
  }

  // '.' is the folder itself, '..' its parent (the root's is the root): a client that
  // stats either gets what the listing said of them.
  Status CheckDot(const Folder& folder, uint64_t k, const DirEntry& e) {
    const std::string_view name = k == 0 ? "." : "..";
    const uint64_t ino = k == 0 ? folder.ino : folder.parent;
    if (e.name != name) return Bad("{} does not list '.' and '..' first", Where(folder.path));
    auto stat = fs_.GetAttr(ino);
    if (e.attr.st_ino != ino || !S_ISDIR(e.attr.st_mode) || !stat || !SameAttr(*stat, e.attr)) {
      return Bad("{} lists '{}' as inode {} ({}), where inode {} is meant", Where(folder.path),
                 name, e.attr.st_ino, S_ISDIR(e.attr.st_mode) ? "a folder" : "no folder", ino);
    }
    return Ok{};
  }

  Status CheckEntry(const Folder& folder, std::string_view name, const struct stat& attr) {
    const uint64_t ino = attr.st_ino;
    if (!IsComponent(name)) {
      return Bad("{} lists '{}', which is not one path component", Where(folder.path),
                 Printable(name));
    }
    if (ino == 0 || ino > nodes_ || seen_[ino]) {
      return Bad("{} is inode {}, which is another node's or none", Where(folder.path, name), ino);
    }
    seen_[ino] = true;
    auto found = fs_.Lookup(folder.ino, name);
    if (!found) return Cannot("look up", Join(folder.path, name), found.error());
    auto stat = fs_.GetAttr(ino);
    if (!stat) return Cannot("stat", Join(folder.path, name), stat.error());
    if (found->ino != ino || !SameAttr(found->attr, attr) || !SameAttr(*stat, attr)) {
      return Bad("{} is listed as inode {} but looked up as inode {}, or stat'ed otherwise",
                 Where(folder.path, name), ino, found->ino);
    }
    if (S_ISDIR(attr.st_mode)) {
      folders_.push_back(Folder{ino, folder.ino, Join(folder.path, name)});
    } else if (Status s = fs_.Open(ino, O_RDONLY); !s) {
      return Cannot("open", Join(folder.path, name), s.error());
    }
    return CheckXattrs(ino, folder.path, name);
  }

  // A readdir resumes at the offset the last entry it was given names: listed from the
  // start or resumed at its middle, a folder shows the same entries from there on.
  Status CheckResume(const Folder& folder, uint64_t count) {
    const uint64_t middle = count / 2;
    std::string name;
    struct stat attr {};
    uint64_t k = 0;
    Status listed = fs_.ReadDir(folder.ino, 0, [&](const DirEntry& e) {
      if (k++ < middle) return true;
      name.assign(e.name);
      attr = e.attr;
      return false;
    });
    uint64_t rest = 0;
    bool same = true;
    if (listed) {
      listed = fs_.ReadDir(folder.ino, middle, [&](const DirEntry& e) {
        same = same && (rest > 0 || (e.name == name && SameAttr(e.attr, attr)));
        ++rest;
        return true;
      });
    }
    if (!listed) return Cannot("list", folder.path, listed.error());
    if (!same || rest != count - middle) {
      return Bad("{} lists otherwise when resumed at {}", Where(folder.path), middle);
    }
    return Ok{};
  }

  Status CheckXattrs(uint64_t ino, std::string_view folder, std::string_view name) {
    auto names = fs_.ListXattr(ino);
    if (!names) return Cannot("list the attributes of", Join(folder, name), names.error());
    std::string_view rest = *names;
    while (!rest.empty()) {
      const size_t end = rest.find('\0');
      if (end == std::string_view::npos) {
        return Bad("{} lists an unended attribute", Where(folder, name));
      }
      auto value = fs_.GetXattr(ino, rest.substr(0, end));
      if (!value) return Cannot("read an attribute of", Join(folder, name), value.error());
      rest.remove_prefix(end + 1);
    }
    return Ok{};
  }

  static std::string Where(std::string_view folder, std::string_view name = {}) {
    const std::string path = Join(folder, name);
    return path.empty() ? "the root" : fmt::format("'{}'", Printable(path));
  }

  Error Cannot(std::string_view verb, std::string_view path, const Error& why) {
    return Error{why.code, fmt::format("cannot serve {}: cannot {} {}: {}", what_, verb,
                                       Where(path), why.message)};
  }

  template <typename... Args>
  Error Bad(fmt::format_string<Args...> format, Args&&... args) {
    return Error{EINVAL, fmt::format("cannot serve {}: {}", what_,
                                     fmt::format(format, std::forward<Args>(args)...))};
  }

  const Filesystem& fs_;
  const std::string_view what_;
  const uint64_t nodes_;
  std::vector<bool> seen_;  // by inode
  std::deque<Folder> folders_;
};

}  // namespace

Status CheckServedTree(const Filesystem& fs, std::string_view what) {
  return TreeWalk(fs, what).Run();
}

}  // namespace gpufs
