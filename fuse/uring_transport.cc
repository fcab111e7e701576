#include "fuse/uring_transport.h"

#include <liburing.h>
#include <linux/fuse.h>
#include <sched.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "fuse/uring_abi.h"

namespace gpufs {
namespace {

namespace abi = fuse_uring;

// Room before each payload buffer for the request's headers, so that libfuse gets the
// request as /dev/fuse would give it (in header, operation header, payload) in one piece
// without moving the payload.
constexpr size_t kHeadRoom = 4096;
// How long an idle thread sleeps before looking at whether the transport stops; the
// kernel ends every entry's command when the mount goes, so this is only a safety net.
constexpr long kIdleWakeNs = 1'000'000'000;

// While a thread serves the request in a ring entry (t_entry, below), the transport it
// belongs to: a reply for that request goes into the entry instead of to /dev/fuse.
thread_local UringTransport* t_owner = nullptr;

bool EndOfConnection(int res) {
  return res == -ENOTCONN || res == -ECONNABORTED || res == -ECANCELED || res == -ENODEV;
}

}  // namespace

// One entry: its two buffers as the kernel writes them and the request it holds.
struct UringTransport::Entry {
  explicit Entry(size_t payload) : payload_size(payload) {
    const size_t size = (kHeadRoom + payload + 4095) / 4096 * 4096;
    memory = static_cast<char*>(std::aligned_alloc(4096, size));
    if (memory == nullptr) throw std::bad_alloc();
    iov[0] = {&headers, sizeof(headers)};
    iov[1] = {memory + kHeadRoom, payload};
  }
  ~Entry() { std::free(memory); }
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  char* payload() const { return memory + kHeadRoom; }

  // The reply libfuse wrote, as the kernel reads it from the entry.
  ssize_t TakeReply(const struct iovec* parts, int count) {
    fuse_out_header out{};
    std::memcpy(&out, parts[0].iov_base, sizeof(out));
    size_t used = 0;
    size_t total = parts[0].iov_len;
    for (int i = 1; i < count; ++i) {
      total += parts[i].iov_len;
      if (used + parts[i].iov_len > payload_size) {
        // Never happens within the kernel's own limits; a reply cut short would be wrong.
        spdlog::error("a FUSE reply of {} bytes does not fit its ring entry", total);
        out.error = -EIO;
        used = 0;
        break;
      }
      std::memcpy(payload() + used, parts[i].iov_base, parts[i].iov_len);
      used += parts[i].iov_len;
    }
    SetReply(out, used);
    return static_cast<ssize_t>(total);
  }

  void SetReply(fuse_out_header out, size_t used) {
    out.len = static_cast<uint32_t>(sizeof(out) + used);
    std::memcpy(headers.in_out, &out, sizeof(out));
    headers.ring_ent_in_out.payload_sz = static_cast<uint32_t>(used);
    replied = true;
  }

  void ReplyError(int error) {
    fuse_out_header out{};
    out.unique = commit_id;
    out.error = -error;
    SetReply(out, 0);
  }

  abi::RequestHeader headers{};
  const size_t payload_size;
  char* memory = nullptr;
  struct iovec iov[2];
  uint64_t commit_id = 0;
  bool replied = false;
};

// One thread's ring and entry, made before INIT's reply so that the reply can still go
// out without the flag where they cannot be had.
struct UringTransport::Worker {
  Worker(uint16_t queue, size_t payload) : qid(queue), entry(payload) {}
  ~Worker() { CloseRing(); }
  // Ends the entry's command, if the kernel still holds it.
  void CloseRing() {
    if (ring_made) io_uring_queue_exit(&ring);
    ring_made = false;
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const uint16_t qid;
  io_uring ring{};
  bool ring_made = false;
  Entry entry;
  alignas(64) std::atomic<uint64_t> requests{0};  // served; a line of its own
};

namespace {

thread_local UringTransport::Entry* t_entry = nullptr;  // the entry t_owner serves

// The SQE of `command` for `entry` on queue `qid`.
void PrepareCommand(io_uring_sqe* sqe, int fd, abi::Command command, uint16_t qid,
                    UringTransport::Entry& entry) {
  std::memset(sqe, 0, 2 * sizeof(io_uring_sqe));  // the ring's entries are 128 bytes
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->cmd_op = command;
  auto* request = reinterpret_cast<abi::CommandRequest*>(sqe->cmd);
  request->qid = qid;
  request->commit_id = command == abi::kRegister ? 0 : entry.commit_id;
  if (command == abi::kRegister) {
    sqe->addr = reinterpret_cast<uintptr_t>(entry.iov);
    sqe->len = 2;
  }
  io_uring_sqe_set_data(sqe, &entry);
}

// A ring of 128-byte entries, with the flag that spares interrupts where the kernel has
// it. Not single-issuer: it is made on the thread answering INIT, used by its own.
int InitRing(io_uring& ring) {
  unsigned flags = IORING_SETUP_SQE128 | IORING_SETUP_COOP_TASKRUN;
  int rc = io_uring_queue_init(4, &ring, flags);
  if (rc == -EINVAL) rc = io_uring_queue_init(4, &ring, IORING_SETUP_SQE128);
  return rc;
}

// The next completion, submitting what is pending (again, where a signal cut the last
// submission short); nullptr once the transport stops or the ring fails.
io_uring_cqe* AwaitCompletion(io_uring& ring, const std::atomic<bool>& stopping) {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec wake{0, kIdleWakeNs};
    // A return without a completion is not an error: the wait ended early (a signal, a
    // tracer attaching), or timed out.
    const int rc = io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &wake, nullptr);
    if (cqe != nullptr) return cqe;
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      spdlog::error("FUSE over io_uring: waiting on a ring failed: {}", strerror(-rc));
      return nullptr;
    }
    if (stopping.load(std::memory_order_relaxed)) return nullptr;
  }
}

void PinToCpu(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  // A CPU outside the daemon's cpuset stays unpinned: its queue is served all the same.
  (void)sched_setaffinity(0, sizeof(set), &set);
}

}  // namespace

std::string UringUnavailable(const char* parameter) {
  const char* path = parameter ? parameter : abi::kEnableParameter;
  std::ifstream in(path);
  if (!in) {
    return fmt::format(
        "this kernel has no FUSE over io_uring ({} is missing; it needs Linux "
        "6.14 or later built with CONFIG_FUSE_IO_URING)",
        path);
  }
  std::string value;
  in >> value;
  if (value == "Y" || value == "1") return {};
  return fmt::format("FUSE over io_uring is off in this kernel ({} is {}; as root: echo Y > {})",
                     path, value, path);
}

unsigned UringTransport::PossibleCpus() {
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string ranges;
  unsigned highest = 0;
  bool any = false;
  if (in >> ranges) {
    // "0-63" or "0-3,8-11": the queues are indexed by CPU number, so the count is the
    // highest number plus one.
    for (size_t at = 0; at < ranges.size();) {
      size_t end = ranges.find(',', at);
      if (end == std::string::npos) end = ranges.size();
      const std::string range = ranges.substr(at, end - at);
      const size_t dash = range.find('-');
      highest = std::max(
          highest, static_cast<unsigned>(std::strtoul(
                       range.c_str() + (dash == std::string::npos ? 0 : dash + 1), nullptr, 10)));
      any = true;
      at = end + 1;
    }
  }
  return any ? highest + 1 : static_cast<unsigned>(std::max(1, get_nprocs_conf()));
}

UringTransport::UringTransport(fuse_session* se, unsigned threads_per_queue)
    : se_(se), fd_(fuse_session_fd(se)), threads_per_queue_(std::max(1u, threads_per_queue)) {}

UringTransport::~UringTransport() { Stop(); }

Result<std::unique_ptr<UringTransport>> UringTransport::Install(fuse_session* se,
                                                                FuseContext& context,
                                                                unsigned threads_per_queue) {
  std::unique_ptr<UringTransport> transport(new UringTransport(se, threads_per_queue));
  fuse_custom_io io{};
  io.writev = &UringTransport::WriteV;
  io.read = &UringTransport::Read;
  // The device stays the one fuse_session_mount opened; only its writes are looked at.
  if (int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se)); rc != 0) {
    return gpufs::Fail(-rc, "cannot put FUSE over io_uring under the session: {}", strerror(-rc));
  }
  context.transport = transport.get();
  return transport;
}

ssize_t UringTransport::Read(int fd, void* buf, size_t len, void* /*userdata*/) {
  return ::read(fd, buf, len);
}

ssize_t UringTransport::WriteV(int fd, struct iovec* iov, int count, void* userdata) {
  auto& context = *static_cast<FuseContext*>(userdata);
  UringTransport* self = context.transport;
  if (t_entry != nullptr && t_owner == self && count > 0 &&
      iov[0].iov_len >= sizeof(fuse_out_header) &&
      static_cast<const fuse_out_header*>(iov[0].iov_base)->unique == t_entry->commit_id) {
    return t_entry->TakeReply(iov, count);
  }
  // The first write of a session is INIT's reply: no request is answered before it.
  if (self != nullptr && !self->init_seen_.exchange(true)) return self->ForwardInit(fd, iov, count);
  return ::writev(fd, iov, count);
}

// Adds the io_uring flag to INIT's reply, sends it, and starts the rings once the kernel
// has taken it (the kernel refuses registrations before). Once the kernel has the flag it
// holds every request until each queue has an entry, so all that can fail (rings, buffers)
// is made first: where any of it fails, INIT goes out without the flag.
ssize_t UringTransport::ForwardInit(int fd, struct iovec* iov, int count) {
  const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
  if (count != 2 || out->error != 0 || iov[1].iov_len < sizeof(fuse_init_out)) {
    NoteFailure("INIT was not answered with the reply the transport expects");
    return ::writev(fd, iov, count);
  }
  fuse_init_out init{};
  std::memcpy(&init, iov[1].iov_base, sizeof(init));
  if ((init.flags & abi::kInitExt) == 0) {
    NoteFailure("the kernel did not offer FUSE's extended INIT flags");
    return ::writev(fd, iov, count);
  }
  // The kernel's bound on what one request or reply carries, which every payload buffer
  // must hold.
  size_t payload = std::max<size_t>(abi::kMinReadBuffer, init.max_write);
  if (init.flags & abi::kMaxPages) {
    payload = std::max<size_t>(payload, size_t{init.max_pages} * 4096);
  }
  if (Status made = MakeWorkers(payload); !made) {
    NoteFailure(made.error().message);
    return ::writev(fd, iov, count);
  }
  init.flags2 |= static_cast<uint32_t>(abi::kOverIoUring >> 32);
  struct iovec patched[2] = {iov[0], {&init, iov[1].iov_len}};
  const ssize_t rc = ::writev(fd, patched, 2);
  if (rc < 0) {
    workers_.clear();
    return rc;
  }
  Start(payload);
  return rc;
}

// The rings and buffers of every queue's threads, all or none.
Status UringTransport::MakeWorkers(size_t payload_size) {
  const unsigned queues = PossibleCpus();
  std::vector<std::unique_ptr<Worker>> made;
  for (unsigned qid = 0; qid < queues; ++qid) {
    for (unsigned t = 0; t < threads_per_queue_; ++t) {
      std::unique_ptr<Worker> worker;
      try {  // no exception may unwind into libfuse, which called us with INIT's reply
        worker = std::make_unique<Worker>(static_cast<uint16_t>(qid), payload_size);
      } catch (const std::bad_alloc&) {
        return gpufs::Fail(ENOMEM, "no memory for a ring entry's buffers");
      }
      if (int rc = InitRing(worker->ring); rc < 0) {
        // Rings count against the locked-memory limit of a process without CAP_IPC_LOCK.
        return gpufs::Fail(-rc, "cannot set up an io_uring: {}{}", strerror(-rc),
                           rc == -ENOMEM ? " (within the locked-memory limit, `ulimit -l`)" : "");
      }
      worker->ring_made = true;
      made.push_back(std::move(worker));
    }
  }
  workers_ = std::move(made);
  return Ok{};
}

void UringTransport::Start(size_t payload_size) {
  for (auto& worker : workers_) threads_.emplace_back([this, w = worker.get()] { RunQueue(*w); });
  ready_.store(true, std::memory_order_release);
  spdlog::info("FUSE over io_uring: {} queues, {} threads each, {} KiB per request",
               workers_.size() / threads_per_queue_, threads_per_queue_, payload_size / 1024);
}

// One thread of a queue: its ring, its entry, and the requests the kernel puts there until
// the connection ends.
void UringTransport::RunQueue(Worker& worker) {
  PinToCpu(worker.qid);
  Entry& entry = worker.entry;
  abi::Command next = abi::kRegister;
  while (!stopping_.load(std::memory_order_relaxed)) {
    io_uring_sqe* sqe = io_uring_get_sqe(&worker.ring);
    if (sqe == nullptr) break;  // never: one command at a time on a ring of four
    PrepareCommand(sqe, fd_, next, worker.qid, entry);
    io_uring_cqe* cqe = AwaitCompletion(worker.ring, stopping_);
    if (cqe == nullptr) break;
    const int res = cqe->res;
    io_uring_cqe_seen(&worker.ring, cqe);
    if (res < 0 && EndOfConnection(res)) break;
    if (res < 0 && next == abi::kRegister) Unregistered(worker, res);
    if (res < 0) {
      // The kernel refused the reply (it ends that request with an error) and dropped the
      // entry with it: the entry is registered again, so that its queue keeps its threads.
      spdlog::warn(
          "FUSE over io_uring: queue {}'s commit failed: {}; its entry is registered "
          "again",
          worker.qid, strerror(-res));
      next = abi::kRegister;
      continue;
    }
    Serve(entry);
    worker.requests.fetch_add(1, std::memory_order_relaxed);
    next = abi::kCommitAndFetch;
  }
}

// An entry the kernel would not register. A queue left without entries would hold its
// requests for ever (and before the rings are ready, the kernel holds every request of the
// mount until each queue has one): the daemon ends instead, so that readers get ENOTCONN
// rather than a hang.
void UringTransport::Unregistered(const Worker& worker, int res) {
  spdlog::critical(
      "FUSE over io_uring: queue {}'s registration failed: {}; the kernel holds a queue's "
      "requests until it has an entry, so gpufsd stops (mount with --fuse-transport dev_fuse "
      "to go on without it)",
      worker.qid, strerror(-res));
  std::_Exit(1);
}

// Hands the request in `entry` to libfuse as /dev/fuse would have given it.
void UringTransport::Serve(Entry& entry) {
  fuse_in_header in{};
  std::memcpy(&in, entry.headers.in_out, sizeof(in));
  const uint32_t payload = entry.headers.ring_ent_in_out.payload_sz;
  entry.commit_id = entry.headers.ring_ent_in_out.commit_id;
  entry.replied = false;
  const size_t head = sizeof(in);
  if (payload > entry.payload_size || in.len < head + payload ||
      in.len - head - payload > abi::kOpHeaderSize) {
    spdlog::error(
        "a FUSE request from the ring is malformed (opcode {}, {} bytes, {} in the "
        "payload)",
        in.opcode, in.len, payload);
    return entry.ReplyError(EIO);
  }
  const size_t op_header = in.len - head - payload;
  char* start = entry.payload() - op_header - head;
  std::memcpy(start, &in, head);
  std::memcpy(start + head, entry.headers.op_in, op_header);
  fuse_buf buf{};
  buf.size = in.len;
  buf.mem = start;
  t_entry = &entry;
  t_owner = this;
  fuse_session_process_buf(se_, &buf);
  t_entry = nullptr;
  t_owner = nullptr;
  // Every operation gpufs serves replies before it returns; a request left without one
  // would hold its entry, and its caller, forever.
  if (!entry.replied) entry.ReplyError(EIO);
}

void UringTransport::NoteFailure(std::string why) {
  {
    std::lock_guard lock(mu_);
    if (!failure_.empty()) return;
    failure_ = why;
  }
  spdlog::warn("FUSE over io_uring: {}; requests go through /dev/fuse", why);
}

void UringTransport::Stop() {
  stopping_ = true;
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
  // The workers stay, with their counts, for the stats read until the daemon ends.
  for (auto& worker : workers_) worker->CloseRing();
}

uint64_t UringTransport::RingRequests() const {
  if (!ready_.load(std::memory_order_acquire)) return 0;
  uint64_t total = 0;
  for (const auto& worker : workers_) total += worker->requests.load(std::memory_order_relaxed);
  return total;
}

std::string UringTransport::Describe() const {
  std::lock_guard lock(mu_);
  if (ready_.load(std::memory_order_acquire)) return std::string(fuse_transport_name::kIoUring);
  if (failure_.empty()) return std::string(fuse_transport_name::kDevFuse);
  return fmt::format("{} ({})", fuse_transport_name::kDevFuse, failure_);
}

}  // namespace gpufs
