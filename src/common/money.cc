#include "common/money.h"

#include <cstdio>

namespace sluice {

std::string Dollars(double amount) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "$%.2f", amount);
  return buf;
}

std::string DollarsPerHour(double price_per_hour) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "$%.4g/h", price_per_hour);
  return buf;
}

}  // namespace sluice
