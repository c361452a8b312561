// Limits on every JSON document minidl reads (config files, --set values, checkpoint and
// safetensors headers, its own JSON-lines logs), and safe excerpts of values for error messages.
// nlohmann's parser is iterative, but copying, comparing and dump() recurse once per nesting
// level, so a document nested 100k deep crashes the process later, far from where it was read;
// the depth is therefore checked on the text before parsing and on trees built from pieces (a
// config after its --set overrides). Files are read with a size limit so /dev/zero or a
// directory is an error, not an unbounded read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace minidl {

constexpr size_t kMaxJsonBytes = size_t{16} << 20;  // 16 MiB: configs are a few KB
constexpr int kMaxJsonDepth = 64;                    // real configs nest 6 deep

// Reads a whole regular file of at most `limit` bytes; `what` names it in errors ("config file").
std::string read_file_limited(const std::string& path, const std::string& what, size_t limit = kMaxJsonBytes);

// Errors unless the JSON text nests at most kMaxJsonDepth arrays/objects (strings are skipped;
// the text need not be valid JSON, the parser judges that afterwards).
void check_json_text_depth(const std::string& text, const std::string& what);
// Errors when one object of `text` has a key twice: the parsers keep one of the two values
// silently, and which one the writer meant cannot be known. Called by the parsers here and by the
// safetensors header reader.
void check_duplicate_keys(const std::string& text, const std::string& what);
// The same for a tree, without recursion.
void check_json_depth(const nlohmann::json& value, const std::string& what);

// Parses `text` with both limits; a syntax error names `what` and the position.
nlohmann::json parse_json_limited(const std::string& text, const std::string& what);
// The same, but a syntax error returns false instead of throwing (the limits still throw).
bool try_parse_json_limited(const std::string& text, const std::string& what, nlohmann::json* out);

// At most ~60 printable characters of a value or a text for an error message: longer ones are
// cut with "...", bytes outside printable ASCII are written as \xNN. Never recurses deeper
// than the value is (callers hold depth-checked values).
std::string json_excerpt(const nlohmann::json& value);
std::string text_excerpt(const std::string& text, size_t max_chars = 60);

}  // namespace minidl
