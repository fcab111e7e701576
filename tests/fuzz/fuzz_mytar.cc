// Fuzzes the mytar text index: ParseMytarIndex, then the catalog built from what it
// accepts, which must be servable (catalog_invariants.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dataset/catalog.h"
#include "dataset/catalog_builder.h"
#include "dataset/format/mytar.h"
#include "tests/fuzz/catalog_invariants.h"

namespace gpufs::fuzz {
namespace {

// The spec's references, which Catalog::FromSpec copies without checking.
void CheckSpec(const DatasetSpec& spec) {
  for (size_t i = 0; i < spec.members.size(); ++i) {
    const MemberSpec& m = spec.members[i];
    Require(m.group < spec.groups.size(), "a member names a missing group", i);
    Require(m.class_id < spec.classes.size(), "a member names a missing class", i);
    const GroupSpec& g = spec.groups[m.group];
    Require(m.offset >= g.offset && m.size <= UINT64_MAX - m.offset &&
                m.offset + m.size <= g.offset + g.size,
            "a member lies outside its group", i);
  }
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufs;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = ParseMytarIndex(text, "metadata.txt");
  if (!spec) return 0;
  fuzz::CheckSpec(*spec);
  auto catalog = CatalogFromSpec(*spec);
  if (!catalog) return 0;
  fuzz::CheckCatalog(*catalog);
  return 0;
}
