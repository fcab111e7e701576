// The part of the kernel's FUSE-over-io_uring ABI that gpufs uses (include/uapi/linux/fuse.h,
// protocol 7.42, Documentation/filesystems/fuse-io-uring.rst). Debian's kernel headers and
// libfuse predate it, so it is written out here from the kernel's documented layout; the
// static_asserts pin the sizes the kernel checks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpufs::fuse_uring {

// In fuse_init_out.flags2 (the flags' upper half, valid when FUSE_INIT_EXT is set): the
// daemon will take requests through io_uring.
inline constexpr uint64_t kOverIoUring = 1ULL << 41;
inline constexpr uint32_t kInitExt = 1U << 30;   // FUSE_INIT_EXT, in fuse_init_out.flags
inline constexpr uint32_t kMaxPages = 1U << 22;  // FUSE_MAX_PAGES

// The sizes the kernel copies the headers with.
inline constexpr size_t kInOutHeaderSize = 128;  // fuse_in_header in, fuse_out_header out
inline constexpr size_t kOpHeaderSize = 128;     // the request's per-operation header
inline constexpr size_t kMinReadBuffer = 8192;   // FUSE_MIN_READ_BUFFER

// What the kernel and the daemon tell each other about one entry's request or reply.
struct EntryInOut {
  uint64_t flags;
  uint64_t commit_id;   // the request's unique id, given back with its reply
  uint32_t payload_sz;  // bytes of the payload buffer used, in either direction
  uint32_t padding;
  uint64_t reserved;
};

// The first of an entry's two buffers (the payload is the second).
struct RequestHeader {
  char in_out[kInOutHeaderSize];
  char op_in[kOpHeaderSize];
  EntryInOut ring_ent_in_out;
};

// IORING_OP_URING_CMD's cmd_op on /dev/fuse.
enum Command : uint32_t {
  kRegister = 1,        // register an entry's buffers, then fetch a request into it
  kCommitAndFetch = 2,  // send the reply in the entry, then fetch the next request
};

// In the SQE's 80-byte command area (a ring set up with IORING_SETUP_SQE128).
struct CommandRequest {
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;  // the queue: requests of tasks on CPU qid go to it
  uint8_t padding[6];
};

static_assert(sizeof(EntryInOut) == 32);
static_assert(sizeof(RequestHeader) == 288);
static_assert(offsetof(RequestHeader, ring_ent_in_out) == 256);
static_assert(sizeof(CommandRequest) == 24);

// The parameter that switches the transport on, and the state of the kernel it reports.
inline constexpr const char* kEnableParameter = "/sys/module/fuse/parameters/enable_uring";

}  // namespace gpufs::fuse_uring
