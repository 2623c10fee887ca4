#include "ledger/micros.h"

#include <cmath>
#include <cstdlib>

namespace sluice::ledger {

namespace {
constexpr Micros kMaxAmount = 1'000'000'000'000LL * kMicrosPerDollar;  // $1e12
}

Result<Micros> ParseDollars(std::string_view text, std::string_view field) {
  const std::string shown(text);
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(std::string(field) + ": \"" + shown + "\" is not an amount in " +
                                   "dollars (" + std::string(why) + "), e.g. 100 or 0.25");
  };
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (!s.empty() && s.front() == '$') s.remove_prefix(1);
  if (s.empty()) return bad("empty");
  Micros whole = 0;
  size_t i = 0;
  size_t digits = 0;
  for (; i < s.size() && s[i] != '.'; ++i, ++digits) {
    if (s[i] < '0' || s[i] > '9') return bad("unexpected character");
    whole = whole * 10 + (s[i] - '0');
    if (whole > 1'000'000'000'000LL) return bad("more than $1e12");
  }
  Micros frac = 0;
  if (i < s.size()) {  // s[i] == '.'
    ++i;
    int places = 0;
    for (; i < s.size(); ++i, ++places) {
      if (s[i] < '0' || s[i] > '9') return bad("unexpected character");
      if (places >= 6) return bad("more than six decimals");
      frac = frac * 10 + (s[i] - '0');
      ++digits;
    }
    for (; places < 6; ++places) frac *= 10;
  }
  if (digits == 0) return bad("no digits");
  const Micros amount = whole * kMicrosPerDollar + frac;
  if (amount > kMaxAmount) return bad("more than $1e12");
  return negative ? -amount : amount;
}

Result<Micros> ParseCreditLimit(std::string_view text, std::string_view field) {
  if (text == "unlimited") return kUnlimited;
  SLUICE_ASSIGN_OR_RETURN(Micros limit, ParseDollars(text, field));
  if (limit < 0) {
    return Status::InvalidArgument(std::string(field) + ": a credit limit is how far below zero " +
                                   "an account may go: give it as a positive amount, or " +
                                   "\"unlimited\"");
  }
  return limit;
}

std::string FormatMicros(Micros amount) {
  const bool negative = amount < 0;
  // Two's complement: the most negative value has no positive twin; amounts are far smaller.
  const uint64_t mag = negative ? 0 - static_cast<uint64_t>(amount) : static_cast<uint64_t>(amount);
  std::string frac = std::to_string(mag % kMicrosPerDollar);
  frac.insert(0, 6 - frac.size(), '0');
  while (frac.size() > 2 && frac.back() == '0') frac.pop_back();
  return std::string(negative ? "-$" : "$") + std::to_string(mag / kMicrosPerDollar) + "." + frac;
}

std::string FormatCreditLimit(Micros limit) {
  return limit == kUnlimited ? "unlimited" : FormatMicros(limit);
}

Micros PricePerHourMicros(double usd_per_hour) {
  if (!std::isfinite(usd_per_hour) || usd_per_hour <= 0) return 0;
  return std::llround(usd_per_hour * static_cast<double>(kMicrosPerDollar));
}

}  // namespace sluice::ledger
