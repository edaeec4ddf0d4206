#pragma once
namespace pcops {
constexpr int version_major = 0;
constexpr int version_minor = 1;
constexpr int version_patch = 0;
const char* version_string();  // "0.1.0"
}  // namespace pcops
