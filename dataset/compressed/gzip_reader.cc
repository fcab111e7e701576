// GzipReader: the first pass over a gzip stream, recording its access points, and the
// replays that serve reads behind it.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <utility>

#include "dataset/compressed/gzip.h"

namespace gpufs {
namespace {

// Compressed bytes per read of the archive: for a remote one each read is a round trip.
constexpr size_t kPiece = 4 << 20;
// Decoded bytes a pass holds beyond the window it keeps: what a read copies out of.
constexpr size_t kHeld = 1 << 20;
// Output per inflate call, so that a checkpoint lands at most this far past its multiple.
constexpr size_t kStepOut = 64 << 10;
constexpr uint64_t kCheckpointEvery = 256 << 10;

struct Checkpoint {
  uint64_t out = 0;  // decoded bytes made
  uint64_t in = 0;   // archive bytes consumed making them
};

// Reads the archive front to back from a position, a piece at a time, the next piece read
// on another thread while the current one is inflated. Reads go through `reads`, so that
// two inputs over one reader never read it at once.
class CompressedInput {
 public:
  CompressedInput(RangeReader& reader, std::mutex& reads) : reader_(reader), reads_(reads) {}
  ~CompressedInput() { Drain(); }
  CompressedInput(const CompressedInput&) = delete;
  CompressedInput& operator=(const CompressedInput&) = delete;

  void Seek(uint64_t pos) {
    Drain();
    pos_ = pos;
  }
  // No byte is left after the last piece.
  bool at_end() const { return pos_ >= reader_.size(); }

  // The piece from where the last one ended (or the Seek), valid until the next call;
  // empty at the archive's end.
  Result<std::span<const char>> Next(uint64_t& at) {
    at = pos_;
    if (at_end()) return std::span<const char>();
    size_t filled = 0;
    if (ahead_.valid()) {
      Result<size_t> n = ahead_.get();
      if (!n) return n.error();
      std::swap(current_, next_);
      filled = *n;
    } else {
      const size_t want = Want(pos_);
      if (current_.size() < want) current_.resize(want);
      std::lock_guard lock(reads_);
      Result<size_t> n = reader_.ReadAt(pos_, want, current_.data());
      if (!n) return n.error();
      filled = *n;
    }
    if (filled == 0) {
      return Fail(EIO, "cannot read {}: it ends at byte {}, before its size {}", reader_.label(),
                  pos_, reader_.size());
    }
    pos_ += filled;
    ReadAhead();
    return std::span<const char>(current_.data(), filled);
  }

 private:
  size_t Want(uint64_t pos) const {
    return static_cast<size_t>(std::min<uint64_t>(kPiece, reader_.size() - pos));
  }

  void ReadAhead() {
    if (at_end()) return;
    const uint64_t from = pos_;
    const size_t want = Want(from);
    if (next_.size() < want) next_.resize(want);
    ahead_ = std::async(std::launch::async, [this, from, want]() -> Result<size_t> {
      std::lock_guard lock(reads_);
      return reader_.ReadAt(from, want, next_.data());
    });
  }

  void Drain() {
    if (ahead_.valid()) ahead_.wait();
    ahead_ = {};
  }

  RangeReader& reader_;
  std::mutex& reads_;
  uint64_t pos_ = 0;  // of the piece after the current one
  std::vector<char> current_;
  std::vector<char> next_;
  std::future<Result<size_t>> ahead_;  // reading `next_`; last, so that it ends first
};

// What the first pass records: access points with their windows, and checkpoints.
class Recorder {
 public:
  // `span` is kept below 2^62, so that a multiple plus a span cannot wrap.
  explicit Recorder(uint64_t span) : span_(std::clamp<uint64_t>(span, 1, kUnknownSize)) {}

  // A member's header starts at archive offset `in`, its output at `out`.
  void MemberStart(uint64_t out, uint64_t in) {
    if (!points.empty() && out < due_) return;
    candidate_.reset();
    points.push_back(GzipPoint{.out = out, .in = in, .window = kNoWindow, .bits = 0, .member = 1});
    AddCheckpoint(out, in);
    due_ = NextMultiple(out);
  }

  // A deflate block boundary, the 32 KiB of output before it ending at `window_end`. Kept
  // as a candidate: a member start in the span after the multiple is preferred.
  void Boundary(uint64_t out, uint64_t in, int bits, const char* window_end) {
    if (!keep_windows_ || candidate_ || points.empty() || out < due_) return;
    candidate_ = GzipPoint{.out = out, .in = in, .bits = static_cast<uint8_t>(bits)};
    candidate_window_.assign(window_end - kGzipWindow, window_end);
  }

  // After each inflate step, `out` bytes made from the archive's first `in`.
  void Stepped(uint64_t out, uint64_t in) {
    if (candidate_ && out >= due_ + span_) Commit();
    if (out >= next_checkpoint_) {
      AddCheckpoint(out, in);
      next_checkpoint_ = (out / kCheckpointEvery + 1) * kCheckpointEvery;
    }
  }

  void End(uint64_t out, uint64_t in) {
    if (candidate_) Commit();
    // A point at the very end (bgzip's empty last member) starts no group.
    if (points.size() > 1 && points.back().out == out) {
      if (!points.back().member) windows.resize(windows.size() - kGzipWindow);
      points.pop_back();
    }
    checkpoints.push_back({out, in});
  }

  std::vector<GzipPoint> points;
  std::vector<char> windows;
  std::vector<Checkpoint> checkpoints;
  bool keep_windows() const { return keep_windows_; }

  // Hands the windows over; later points are member starts only, their windows having
  // nowhere to go.
  std::vector<char> TakeWindows() {
    keep_windows_ = false;
    candidate_.reset();
    return std::exchange(windows, {});
  }

 private:
  uint64_t NextMultiple(uint64_t out) const { return (out / span_ + 1) * span_; }

  // A point is a checkpoint too, and an exact one: a group that ends where the next starts
  // needs no compressed byte past the point. A candidate is committed after later
  // checkpoints, hence the search.
  void AddCheckpoint(uint64_t out, uint64_t in) {
    auto at = std::upper_bound(checkpoints.begin(), checkpoints.end(), out,
                               [](uint64_t o, const Checkpoint& c) { return o < c.out; });
    checkpoints.insert(at, {out, in});
  }

  void Commit() {
    candidate_->window = static_cast<uint32_t>(windows.size() / kGzipWindow);
    windows.insert(windows.end(), candidate_window_.begin(), candidate_window_.end());
    points.push_back(*candidate_);
    AddCheckpoint(candidate_->out, candidate_->in);
    due_ = NextMultiple(candidate_->out);
    candidate_.reset();
  }

  const uint64_t span_;
  uint64_t due_ = 0;  // the next multiple of span_ a point is wanted after
  std::optional<GzipPoint> candidate_;
  std::vector<char> candidate_window_;
  bool keep_windows_ = true;
  uint64_t next_checkpoint_ = kCheckpointEvery;
};

// One inflate front to back from an access point, its latest output held for reads: the
// first pass (with a recorder, which also keeps the window before each boundary), or a
// replay behind it.
class Pass {
 public:
  Pass(RangeReader& reader, std::mutex& reads, Recorder* recorder)
      : label_(reader.label()), input_(reader, reads), recorder_(recorder) {
    // The first pass's window starts as zeros, as zran's does, where the output is shorter.
    held_from_ = fill_ = recorder ? kGzipWindow : 0;
    buffer_.resize(kGzipWindow + kHeld);
  }

  Status Start(const GzipPoint& point, std::span<const char> window) {
    input_.Seek(point.in - (point.bits ? 1 : 0));
    Status s = Feed();
    if (s) s = cursor_.Start(point, window);
    if (!s) return Bad(s.error());
    return Ok{};
  }

  // Inflates one step on.
  Status Advance() {
    if (fill_ == buffer_.size()) {
      std::memmove(buffer_.data(), buffer_.data() + fill_ - kGzipWindow, kGzipWindow);
      held_from_ = 0;
      fill_ = kGzipWindow;
    }
    if (!cursor_.has_input() && !eof_) {
      Status s = Feed();
      if (!s) return s;
    }
    const size_t room = std::min(buffer_.size() - fill_, kStepOut);
    auto n = cursor_.Step(buffer_.data() + fill_, room, recorder_ != nullptr, eof_);
    if (!n) return Bad(n.error());
    fill_ += *n;
    if (recorder_) Record();
    return Ok{};
  }

  bool ended() const { return cursor_.ended(); }
  uint64_t in() const { return cursor_.in(); }
  uint64_t out() const { return cursor_.out(); }
  // The first decoded offset still held.
  uint64_t held() const { return out() - (fill_ - held_from_); }

  // Copies what is held of the `size` bytes at `pos` (held() <= pos < out()).
  size_t Copy(uint64_t pos, size_t size, char* dst) const {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, out() - pos));
    std::memcpy(dst, buffer_.data() + fill_ - (out() - pos), n);
    return n;
  }

 private:
  Status Feed() {
    uint64_t at = 0;
    auto piece = input_.Next(at);
    if (!piece) return piece.error();
    cursor_.Feed(*piece, at);
    eof_ = input_.at_end();
    return Ok{};
  }

  void Record() {
    if (cursor_.TakeMemberStart()) recorder_->MemberStart(out(), in());
    if (cursor_.at_boundary()) {
      recorder_->Boundary(out(), in(), cursor_.bits(), buffer_.data() + fill_);
    }
    recorder_->Stepped(out(), in());
    if (ended()) recorder_->End(out(), in());
  }

  Error Bad(const Error& why) const {
    return Error{why.code == EIO ? EINVAL : why.code,
                 fmt::format("cannot read {}: at byte {}: {}", label_, in(), why.message)};
  }

  const std::string& label_;
  CompressedInput input_;
  GzipCursor cursor_;
  Recorder* const recorder_;  // null: a replay
  std::vector<char> buffer_;  // the window, then kHeld bytes of output
  size_t held_from_ = 0;      // buffer_ before this is not output
  size_t fill_ = 0;
  bool eof_ = false;
};

}  // namespace

class GzipReader::Impl {
 public:
  Impl(RangeReader& compressed, uint64_t span)
      : compressed_(compressed), recorder_(span), first_(compressed, reads_, &recorder_) {}

  Result<size_t> ReadAt(uint64_t offset, size_t length, char* out) {
    Status s = Begin();
    if (!s) return s.error();
    size_t got = 0;
    while (got < length) {
      const uint64_t pos = offset + got;
      Result<size_t> n =
          pos < first_.held()
              ? Replay(pos, std::min<uint64_t>(length - got, first_.held() - pos), out + got)
              : Ahead(pos, length - got, out + got);
      if (!n) return n.error();
      if (*n == 0) break;
      got += *n;
    }
    return got;
  }

  Status Finish() {
    Status s = Begin();
    while (s && !first_.ended()) s = Step();
    return s;
  }

  bool ended() const { return first_.ended(); }
  uint64_t decoded_size() const { return first_.out(); }
  uint64_t compressed_read() const { return consumed_.load(std::memory_order_relaxed); }
  const std::string& label() const { return compressed_.label(); }
  const std::vector<GzipPoint>& points() const { return recorder_.points; }

  std::vector<char> TakeWindows() { return recorder_.TakeWindows(); }

  uint64_t StoredEnd(uint64_t decoded_end) const {
    const std::vector<Checkpoint>& cps = recorder_.checkpoints;
    auto at = std::lower_bound(cps.begin(), cps.end(), decoded_end,
                               [](const Checkpoint& c, uint64_t d) { return c.out < d; });
    if (at == cps.end()) return ended() && !cps.empty() ? cps.back().in : compressed_.size();
    return std::min(at->in, compressed_.size());
  }

 private:
  // Starts the first pass at the first member, once.
  Status Begin() {
    if (failed_) return *failed_;
    if (!recorder_.points.empty()) return Ok{};
    unsigned char magic[3] = {};
    Result<size_t> n = [&] {
      std::lock_guard lock(reads_);
      return compressed_.ReadAt(0, sizeof(magic), reinterpret_cast<char*>(magic));
    }();
    if (!n) return Failed(n.error());
    if (*n < sizeof(magic) || magic[0] != 0x1f || magic[1] != 0x8b || magic[2] != 8) {
      return Failed(Fail(EINVAL,
                         "cannot read {}: not a gzip stream (it does not start with "
                         "1f 8b 08)",
                         label()));
    }
    recorder_.MemberStart(0, 0);
    Status s = first_.Start(recorder_.points.front(), {});
    return s ? s : Failed(s.error());
  }

  // The first pass's failure stands for every later call: its inflate cannot go on.
  Error Failed(Error error) {
    failed_ = error;
    return error;
  }

  Status Step() {
    Status s = first_.Advance();
    consumed_.store(first_.in(), std::memory_order_relaxed);
    return s ? s : Failed(s.error());
  }

  // From the first pass, inflating on to `pos`.
  Result<size_t> Ahead(uint64_t pos, size_t length, char* out) {
    while (first_.out() <= pos && !first_.ended()) {
      Status s = Step();
      if (!s) return s.error();
    }
    if (pos >= first_.out()) return size_t{0};
    return first_.Copy(pos, length, out);
  }

  // From a replay behind the first pass, started afresh where that is nearer.
  Result<size_t> Replay(uint64_t pos, size_t length, char* out) {
    const GzipPoint& from = Nearest(pos);
    if (!replay_ || pos < replay_->held() || (pos >= replay_->out() && from.out > replay_->out())) {
      replay_ = std::make_unique<Pass>(compressed_, reads_, nullptr);
      const bool window = !from.member;
      Status s = replay_->Start(
          from, window ? std::span<const char>(recorder_.windows.data() + from.window * kGzipWindow,
                                               kGzipWindow)
                       : std::span<const char>());
      if (!s) return Dropped(s.error());
    }
    while (replay_->out() <= pos && !replay_->ended()) {
      Status s = replay_->Advance();
      if (!s) return Dropped(s.error());
    }
    if (pos >= replay_->out()) {
      return Dropped(Fail(EIO,
                          "cannot read {}: it ends before decoded byte {}, which it held "
                          "before: changed while it was read",
                          label(), pos));
    }
    return replay_->Copy(pos, length, out);
  }

  Error Dropped(Error error) {
    replay_.reset();
    return error;
  }

  // The last access point at or before `pos` that can be used: a member start, or a
  // boundary whose window is still held.
  const GzipPoint& Nearest(uint64_t pos) const {
    const std::vector<GzipPoint>& ps = recorder_.points;
    auto after = std::upper_bound(ps.begin(), ps.end(), pos,
                                  [](uint64_t p, const GzipPoint& g) { return p < g.out; });
    while (after != ps.begin()) {
      --after;
      if (after->member || recorder_.keep_windows()) return *after;
    }
    return ps.front();
  }

  RangeReader& compressed_;
  std::mutex reads_;  // one read of `compressed_` at a time, whichever pass makes it
  Recorder recorder_;
  Pass first_;
  std::unique_ptr<Pass> replay_;
  std::optional<Error> failed_;
  std::atomic<uint64_t> consumed_{0};
};

GzipReader::GzipReader(RangeReader& compressed, uint64_t span)
    : impl_(std::make_unique<Impl>(compressed, span)) {}
GzipReader::~GzipReader() = default;

uint64_t GzipReader::size() const { return impl_->ended() ? impl_->decoded_size() : kUnknownSize; }
const std::string& GzipReader::label() const { return impl_->label(); }
Result<size_t> GzipReader::ReadAt(uint64_t offset, size_t length, char* out) {
  return impl_->ReadAt(offset, length, out);
}
Status GzipReader::Finish() { return impl_->Finish(); }
uint64_t GzipReader::decoded_size() const { return impl_->decoded_size(); }
uint64_t GzipReader::compressed_read() const { return impl_->compressed_read(); }
const std::vector<GzipPoint>& GzipReader::points() const { return impl_->points(); }
std::vector<char> GzipReader::TakeWindows() { return impl_->TakeWindows(); }
uint64_t GzipReader::StoredEnd(uint64_t decoded_end) const { return impl_->StoredEnd(decoded_end); }

bool LooksLikeGzip(RangeReader& reader) {
  unsigned char magic[3] = {};
  auto n = reader.ReadAt(0, sizeof(magic), reinterpret_cast<char*>(magic));
  return n && *n == sizeof(magic) && magic[0] == 0x1f && magic[1] == 0x8b && magic[2] == 8;
}

}  // namespace gpufs
