#include "core/json_limits.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/regular_file.h"

namespace minidl {

namespace {

[[noreturn]] void too_deep(const std::string& what, const std::string& where) {
  fail(str(what, ": JSON nested more than ", kMaxJsonDepth, " levels deep", where));
}

}  // namespace

std::string read_file_limited(const std::string& path, const std::string& what, size_t limit) {
  const File f = open_regular_file(path, what);
  struct stat st {};
  MINIDL_CHECK(::fstat(::fileno(f.get()), &st) == 0, "cannot read ", what, " '", path, "': ", std::strerror(errno));
  MINIDL_CHECK(static_cast<uint64_t>(st.st_size) <= limit, what, " '", path, "' is ", st.st_size,
               " bytes, larger than the ", limit, "-byte limit");
  // Read one byte past the limit: a file that grew after stat() is still refused.
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) {
    text.append(buf, n);
    MINIDL_CHECK(text.size() <= limit, what, " '", path, "' is larger than the ", limit, "-byte limit");
  }
  MINIDL_CHECK(!std::ferror(f.get()), "cannot read ", what, " '", path, "': ", std::strerror(errno));
  return text;
}

void check_json_text_depth(const std::string& text, const std::string& what) {
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t line = 1, column = 0;
  for (const char c : text) {
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
    }
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) too_deep(what, str(" (at line ", line, ", column ", column, ")"));
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

void check_json_depth(const nlohmann::json& value, const std::string& what) {
  std::vector<std::pair<const nlohmann::json*, int>> stack{{&value, 1}};
  while (!stack.empty()) {
    const auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (depth > kMaxJsonDepth) too_deep(what, "");
    for (const auto& child : *v) stack.push_back({&child, depth + 1});
  }
}

namespace {

// Keys only: no values are kept, so a 16 MiB document costs its keys' sets.
class DuplicateKeyFinder : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string duplicate;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (open_.back().insert(k).second) return true;
    duplicate = k;
    return false;  // stops the parse
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  std::vector<std::set<std::string>> open_;
};

}  // namespace

void check_duplicate_keys(const std::string& text, const std::string& what) {
  DuplicateKeyFinder finder;
  nlohmann::json::sax_parse(text, &finder, nlohmann::json::input_format_t::json, /*strict=*/false);
  MINIDL_CHECK(finder.duplicate.empty(), what, ": the key \"", text_excerpt(finder.duplicate),
               "\" appears twice in one object (which value is meant?)");
}

bool try_parse_json_limited(const std::string& text, const std::string& what, nlohmann::json* out) {
  MINIDL_CHECK(text.size() <= kMaxJsonBytes, what, ": ", text.size(), " bytes of JSON, larger than the ",
               kMaxJsonBytes, "-byte limit");
  check_json_text_depth(text, what);
  *out = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return false;
  check_duplicate_keys(text, what);
  return true;
}

nlohmann::json parse_json_limited(const std::string& text, const std::string& what) {
  MINIDL_CHECK(text.size() <= kMaxJsonBytes, what, ": ", text.size(), " bytes of JSON, larger than the ",
               kMaxJsonBytes, "-byte limit");
  check_json_text_depth(text, what);
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    check_duplicate_keys(text, what);
    return j;
  } catch (const nlohmann::json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, ...": drop the tag,
    // and keep the quoted text near the error short and printable.
    std::string why = e.what();
    const size_t tag = why.find("] ");
    if (why.rfind("[json.exception.", 0) == 0 && tag != std::string::npos) why = why.substr(tag + 2);
    fail(str(what, " is not valid JSON: ", text_excerpt(why, 160)));
  }
}

std::string text_excerpt(const std::string& text, size_t max_chars) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (const char ch : text) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string json_excerpt(const nlohmann::json& value) {
  // Invalid UTF-8 in a string would make dump() throw: replace it instead.
  return text_excerpt(value.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace));
}

}  // namespace minidl
