#include "dataset/compressed/zip.h"

#include <libdeflate.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "dataset/printable.h"

namespace gpufs {

// Making a zip recipe's bytes: its members' stored data copied or inflated back to back.
namespace {

struct FreeDecompressor {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

// A decompressor holds some 32 KiB of tables and is not to be shared: one per thread,
// kept for the thread's life, since groups are decoded over and over.
libdeflate_decompressor* Decompressor() {
  thread_local std::unique_ptr<libdeflate_decompressor, FreeDecompressor> decompressor(
      libdeflate_alloc_decompressor());
  return decompressor.get();
}

// How a message names the part whose decoded bytes start at `decoded`.
std::string MemberName(const MemberNamer& name_of, uint64_t decoded, const ZipPart& part) {
  if (name_of) {
    std::string name = name_of(decoded);
    if (!name.empty()) return fmt::format("member '{}'", Printable(name));
  }
  return fmt::format("the member whose data start at byte {}", part.data_offset);
}

// Why `part`'s stored bytes `in` do not make its `out` bytes; empty when they do.
std::string DecodePart(const ZipPart& part, std::span<const char> in, std::span<char> out) {
  if (part.method == 0) {
    if (in.size() != out.size()) {
      return fmt::format(
          "it is stored uncompressed, yet its stored size ({}) differs from its "
          "size ({})",
          in.size(), out.size());
    }
    std::copy(in.begin(), in.end(), out.begin());
  } else if (part.method == 8) {
    libdeflate_decompressor* d = Decompressor();
    if (!d) return "no memory for a decompressor";
    switch (
        libdeflate_deflate_decompress(d, in.data(), in.size(), out.data(), out.size(), nullptr)) {
      case LIBDEFLATE_SUCCESS:
        break;
      case LIBDEFLATE_SHORT_OUTPUT:
        return fmt::format("its deflate data end before its {} bytes: damaged", out.size());
      case LIBDEFLATE_INSUFFICIENT_SPACE:
        return fmt::format("its deflate data make more than its {} bytes: damaged", out.size());
      default:
        return "its deflate data are damaged";
    }
  } else {
    return fmt::format(
        "the plan gives it method {}, which is neither stored (0) nor deflated "
        "(8)",
        part.method);
  }
  const uint32_t crc = libdeflate_crc32(0, out.data(), out.size());
  if (crc != part.crc32) {
    return fmt::format("its CRC-32 is {:08x}, where the archive says {:08x}: damaged", crc,
                       part.crc32);
  }
  return {};
}

}  // namespace

Status DecodeZipRecipe(const DecodePlan& plan, const DecodeRecipe& recipe,
                       std::span<const char> stored, std::span<char> out, std::string_view label,
                       const MemberNamer& name_of) {
  if (recipe.first > plan.parts.size() || recipe.count > plan.parts.size() - recipe.first) {
    return Fail(EINVAL,
                "cannot decode {}: the plan's recipe at decoded byte {} names parts {} "
                "to {}, past its {} parts",
                label, recipe.offset, recipe.first, uint64_t{recipe.first} + recipe.count,
                plan.parts.size());
  }
  uint64_t pos = 0;  // in `out`
  for (uint32_t i = 0; i < recipe.count; ++i) {
    const ZipPart& part = plan.parts[recipe.first + i];
    const uint64_t at = part.data_offset - recipe.stored_offset;
    if (part.data_offset < recipe.stored_offset || at > stored.size() ||
        part.stored_size > stored.size() - at) {
      return Fail(EINVAL,
                  "cannot decode {}: {}: its data ({} bytes at byte {}) lie outside the "
                  "{} bytes at byte {} the plan reads",
                  label, MemberName(name_of, recipe.offset + pos, part), part.stored_size,
                  part.data_offset, stored.size(), recipe.stored_offset);
    }
    if (part.size > out.size() - pos) {
      return Fail(EINVAL, "cannot decode {}: {}: its {} bytes run past the group's {}", label,
                  MemberName(name_of, recipe.offset + pos, part), part.size, out.size());
    }
    const std::string why =
        DecodePart(part, stored.subspan(at, part.stored_size), out.subspan(pos, part.size));
    if (!why.empty()) {
      return Fail(EIO, "cannot decode {}: {}: {}", label,
                  MemberName(name_of, recipe.offset + pos, part), why);
    }
    pos += part.size;
  }
  if (pos != out.size()) {
    return Fail(EINVAL,
                "cannot decode {}: the plan's recipe at decoded byte {} makes {} bytes "
                "of its {}",
                label, recipe.offset, pos, out.size());
  }
  return Ok{};
}

}  // namespace gpufs
