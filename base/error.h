// Errors are values: a failure carries the errno it maps to at the FUSE boundary and a
// message that reads "cannot <verb> <object>: <reason>". No exception crosses a C callback,
// so the core returns Result<T> and the adapter turns it into exactly one reply.
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace gpufs {

struct Error {
  int code = EIO;       // errno reported to the kernel or used as exit reason
  std::string message;  // human-readable, names the file (and line) at fault
};

// Builds an Error with a formatted message: Fail(EINVAL, "cannot parse {}: {}", file, why).
template <typename... Args>
Error Fail(int code, fmt::format_string<Args...> format, Args&&... args) {
  return Error{code, fmt::format(format, std::forward<Args>(args)...)};
}

// A value or an Error. Deliberately tiny: the project targets C++20, which has no
// std::expected.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : state_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

// Result of an operation that yields nothing but success.
struct Ok {};
using Status = Result<Ok>;

}  // namespace gpufs
