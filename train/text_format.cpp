#include "train/text_format.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>

namespace minidl {

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

std::string duration_text(double seconds) {
  const long long s = std::isfinite(seconds) && seconds > 0 ? std::llround(seconds) : 0;
  char buf[48];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%llds", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (s + 30) / 3600, (s + 30) / 60 % 60);
  return buf;
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace minidl
