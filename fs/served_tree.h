// A walk of a served tree as a client of the mount sees it, through the filesystem core's
// own calls: every folder listed from the root ('.' and '..' included, and again from its
// middle, as a readdir resumes), every entry looked up and stat'ed, every file opened, and
// every extended attribute listed and read. The checks on opening a dataset are meant to
// make each of these answer sensibly; this walk is how `gpufsd verify` and the native
// index's fuzz target see that they do, so that a check missing there shows as a refusal
// or a fuzzing finding rather than as a daemon that misbehaves when a client gets there.
#pragma once

#include <string_view>

#include "base/error.h"
#include "fs/filesystem.h"

namespace gpufs {

// Ok when the walk reached every node of `fs` once and each answer agreed with the others;
// otherwise the first thing a client would find wrong, as "cannot serve <what>: <reason>"
// naming the path. Reads no blob bytes. Safe beside other calls of the core.
Status CheckServedTree(const Filesystem& fs, std::string_view what);

}  // namespace gpufs
