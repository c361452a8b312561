#include "core/spelling.h"

#include <algorithm>
#include <cctype>

#include "core/json_limits.h"

namespace minidl {

size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: the distance between a's first i and b's first j characters.
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1])) ? 0
                                                                                                                   : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string closest_name(const std::string& word, const std::vector<std::string>& candidates) {
  // Names are short; a long word (a pasted value) is nobody's typo, and would cost n * m.
  if (word.empty() || word.size() > 200) return "";
  const size_t limit = word.size() <= 3 ? 1 : word.size() <= 6 ? 2 : 3;
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    if (c.size() > word.size() + limit || word.size() > c.size() + limit) continue;
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = closest_name(word, candidates);
  return best.empty() ? std::string() : " (did you mean '" + text_excerpt(best) + "'?)";
}

}  // namespace minidl
