// XXH3-64 with AVX2, compiled alone with -mavx2 and called only where the CPU has it
// (checksums.cc): Debian's libxxhash is built for the baseline (SSE2), which hashes bytes
// just read at about a third of the speed (7-8 GB/s against 19-28 here, 1 MiB in cache).
// The hashes are the same whatever the vector width.
#include "dataset/format/xxh3_avx2.h"

#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

namespace gpufs {

uint64_t Xxh3Avx2(const void* data, size_t size) { return XXH3_64bits(data, size); }

void* Xxh3Avx2Make() {
  XXH3_state_t* state = XXH3_createState();
  if (state != nullptr) XXH3_64bits_reset(state);
  return state;
}

void Xxh3Avx2Free(void* state) { XXH3_freeState(static_cast<XXH3_state_t*>(state)); }

void Xxh3Avx2Update(void* state, const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

uint64_t Xxh3Avx2Digest(const void* state) {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));
}

}  // namespace gpufs
