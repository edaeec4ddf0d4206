#include "pcops/error.hpp"

#include <string>

#include "pcops/version.hpp"

namespace pcops {
namespace detail {
void internal_assert_fail(const char* expr, const char* file, int line) {
  throw std::logic_error(std::string("pcops internal error: ") + expr + " failed at " + file + ":" +
                         std::to_string(line) + "; please report this");
}
}  // namespace detail

const char* version_string() { return "0.1.0"; }
}  // namespace pcops
