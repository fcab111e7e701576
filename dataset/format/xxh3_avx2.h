// XXH3-64 built with AVX2 (xxh3_avx2.cc), for CPUs that have it; checksums.cc chooses.
// A stream's state is opaque, made and used by these functions only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpufs {

uint64_t Xxh3Avx2(const void* data, size_t size);
void* Xxh3Avx2Make();  // a fresh stream; nullptr without memory
void Xxh3Avx2Free(void* state);
void Xxh3Avx2Update(void* state, const void* data, size_t size);
uint64_t Xxh3Avx2Digest(const void* state);

}  // namespace gpufs
