// "Did you mean ...?" for a mistyped name: the candidate closest to it in edit distance (an
// insertion, deletion, substitution or swap of two neighbours costs 1: "trian" is 1 from
// "train"), when it is close enough to be a likely typo.
#pragma once
#include <string>
#include <vector>

namespace minidl {

// The optimal string alignment distance between a and b.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `word` within 1 edit (words of up to 3 characters), 2 (up to 6) or 3,
// the first of equals; "" when none is that near.
std::string closest_name(const std::string& word, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" for closest_name's answer, "" without one.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace minidl
