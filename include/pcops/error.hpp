#pragma once
// Errors: pcops::Error is thrown for bad input before any kernel runs. Its kind tells the
// Python binding which exception to raise (ValueError, TypeError or IndexError).
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace pcops {

enum class ErrorKind { Value, Type, Index };

class Error : public std::invalid_argument {
 public:
  Error(ErrorKind kind, const std::string& message) : std::invalid_argument(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
template <class... Parts>
[[noreturn]] void throw_error(ErrorKind kind, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(kind, os.str());
}
[[noreturn]] void internal_assert_fail(const char* expr, const char* file, int line);
}  // namespace detail

}  // namespace pcops

// Bad input: PCOPS_CHECK(cond, Value|Type|Index, "message parts", ...). The message names the
// argument and states the expected versus the actual value.
#define PCOPS_CHECK(cond, kind, ...)                                               \
  do {                                                                             \
    if (!(cond)) ::pcops::detail::throw_error(::pcops::ErrorKind::kind, __VA_ARGS__); \
  } while (0)

// Internal invariants (a failure is a bug in pcops, not bad input).
#define PCOPS_ASSERT(cond)                                                          \
  do {                                                                              \
    if (!(cond)) ::pcops::detail::internal_assert_fail(#cond, __FILE__, __LINE__); \
  } while (0)
