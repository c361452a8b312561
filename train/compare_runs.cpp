#include "train/compare_runs.h"

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/safetensors.h"

namespace minidl {

namespace {

std::vector<std::pair<int64_t, std::string>> read_step_bits(const std::string& path) {
  std::ifstream in(path);
  MINIDL_CHECK(in.good(), "repro: cannot read ", path);
  std::vector<std::pair<int64_t, std::string>> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = str("repro: ", path, " line ", n);
    const nlohmann::json j = parse_json_limited(line, where);
    MINIDL_CHECK(j.is_object() && j.contains("step") && j["step"].is_number_integer() && j.contains("loss_bits") &&
                     j["loss_bits"].is_string(),
                 where, ": expected {\"step\": N, \"loss_bits\": \"...\", ...}");
    out.push_back({j["step"].get<int64_t>(), j["loss_bits"].get<std::string>()});
  }
  return out;
}

}  // namespace

bool compare_runs(const std::string& dir_a, const std::string& dir_b, std::ostream& out) {
  auto a = read_step_bits(dir_a + "/steps.jsonl"), b = read_step_bits(dir_b + "/steps.jsonl");
  bool same = a.size() == b.size();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) {
      out << "repro: DIFFERENT loss at step " << a[i].first << ": bits " << a[i].second << " vs " << b[i].second
          << std::endl;
      same = false;
      break;
    }
  }
  if (a.size() != b.size())
    out << "repro: DIFFERENT number of steps: " << a.size() << " vs " << b.size() << std::endl;
  else if (same)
    out << "repro: all " << a.size() << " step losses are bit-identical" << std::endl;

  const std::string wa = dir_a + "/model.safetensors", wb = dir_b + "/model.safetensors";
  const std::string ha = safetensors_payload_sha256(wa), hb = safetensors_payload_sha256(wb);
  out << "repro: final weights sha256 A " << ha << "\n"
      << "repro: final weights sha256 B " << hb << std::endl;
  if (ha != hb) {
    same = false;
    SafeTensors ta = load_safetensors(wa), tb = load_safetensors(wb);
    for (size_t i = 0; i < std::min(ta.tensors.size(), tb.tensors.size()); ++i) {
      const Tensor &x = ta.tensors[i].second, &y = tb.tensors[i].second;
      if (ta.tensors[i].first != tb.tensors[i].first || x.nbytes() != y.nbytes() ||
          std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0) {
        out << "repro: first differing tensor: " << ta.tensors[i].first << std::endl;
        break;
      }
    }
  }
  return same;
}

}  // namespace minidl
