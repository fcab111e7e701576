// The visitor of an option's field (a std::variant of field accessors): one lambda per
// field type.
#pragma once

namespace gpufs {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
// clang before 17 deduces no aggregate's template arguments without a guide.
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace gpufs
