// Raw deflate streams and CRC-32s made in the tests, as a zip writer makes them.
#pragma once

#include <libdeflate.h>

#include <cstdint>
#include <string>

namespace gpufs {

inline std::string Deflate(const std::string& data) {
  libdeflate_compressor* c = libdeflate_alloc_compressor(6);
  std::string out(libdeflate_deflate_compress_bound(c, data.size()), '\0');
  out.resize(libdeflate_deflate_compress(c, data.data(), data.size(), out.data(), out.size()));
  libdeflate_free_compressor(c);
  return out;
}

inline uint32_t Crc(const std::string& data) {
  return libdeflate_crc32(0, data.data(), data.size());
}

}  // namespace gpufs
