// A counter that many threads bump at once without sharing a cache line: each thread adds
// to one of a few stripes (picked once per thread), and a read sums them. Reads see every
// add that happened before them; a sum taken while adds go on is some value in between.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gpufs {

class StripedCounter {
 public:
  StripedCounter() = default;
  StripedCounter(const StripedCounter&) = delete;
  StripedCounter& operator=(const StripedCounter&) = delete;

  void Add(uint64_t n) { stripes_[Stripe()].value.fetch_add(n, std::memory_order_relaxed); }
  void operator++() { Add(1); }
  StripedCounter& operator+=(uint64_t n) {
    Add(n);
    return *this;
  }
  uint64_t load() const {
    uint64_t sum = 0;
    for (const Slot& s : stripes_) sum += s.value.load(std::memory_order_relaxed);
    return sum;
  }
  operator uint64_t() const { return load(); }  // NOLINT: reads like the atomic it replaced

 private:
  // More stripes than the FUSE threads that serve reads at once (a daemon runs a few
  // dozen at most); two threads sharing one is still correct, only slower.
  static constexpr size_t kStripes = 16;
  struct alignas(64) Slot {
    std::atomic<uint64_t> value{0};
  };
  static size_t Stripe() {
    static std::atomic<size_t> next{0};
    thread_local const size_t mine = next.fetch_add(1, std::memory_order_relaxed) % kStripes;
    return mine;
  }
  Slot stripes_[kStripes];
};

}  // namespace gpufs
