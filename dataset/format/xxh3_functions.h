// XXH3-64, one-shot and streamed, as a table of functions: checksums.cc calls it through
// the one it chose, libxxhash's (built for the baseline, SSE2) or, where the CPU has AVX2,
// the one xxh3_avx2.cc builds with -mavx2. The table is made by one template over each
// unit's own XXH3 functions. A stream's state is opaque, made and used by its table only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gpufs {

struct Xxh3Functions {
  uint64_t (*of)(const void*, size_t);
  void* (*make)();  // a fresh stream; nullptr without memory
  void (*free)(void*);
  void (*update)(void*, const void*, size_t);
  uint64_t (*digest)(const void*);
};

// The table over one unit's XXH3_64bits, XXH3_createState, XXH3_64bits_reset,
// XXH3_freeState, XXH3_64bits_update and XXH3_64bits_digest.
template <auto Of, auto Make, auto Reset, auto Free, auto Update, auto Digest>
constexpr Xxh3Functions Xxh3FunctionsOver() {
  using State = std::remove_pointer_t<decltype(Make())>;
  return {[](const void* data, size_t size) -> uint64_t { return Of(data, size); },
          []() -> void* {
            State* state = Make();
            if (state != nullptr) Reset(state);
            return state;
          },
          [](void* state) { Free(static_cast<State*>(state)); },
          [](void* state, const void* data, size_t size) {
            Update(static_cast<State*>(state), data, size);
          },
          [](const void* state) -> uint64_t { return Digest(static_cast<const State*>(state)); }};
}

// xxh3_avx2.cc's table, on x86-64 builds (GPUFS_XXH3_AVX2); for CPUs with AVX2 only.
const Xxh3Functions& Xxh3Avx2Functions();

}  // namespace gpufs
