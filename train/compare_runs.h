// Two run folders compared bit for bit: what `minidl repro` concludes from.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace minidl {

// Compares two run folders: every step's loss bits (steps.jsonl) and the final weights
// (model.safetensors, SHA-256 of the payload). Prints what it finds to `out`, naming the first
// differing step and tensor; true only when both match.
bool compare_runs(const std::string& dir_a, const std::string& dir_b, std::ostream& out);

}  // namespace minidl
