// Money as the ledger holds it: integers in micro-dollars (issue 14 item 2). Amounts typed by
// people ("100", "0.25", "-3.5") are parsed exactly, without passing through floating point.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice::ledger {

using Micros = int64_t;
inline constexpr Micros kMicrosPerDollar = 1'000'000;
// A credit limit that never stops an account (the admin's, the built-in demo accounts').
inline constexpr Micros kUnlimited = -1;

// "100", "0.25", "-3.5", "$12.000001": at most six decimals, at most $1e12. `field` names what
// was parsed in the error.
Result<Micros> ParseDollars(std::string_view text, std::string_view field);
// A credit limit: dollars (not negative) or "unlimited".
Result<Micros> ParseCreditLimit(std::string_view text, std::string_view field);
// "$0.06", "-$1.234567", "$12.00": cents always, further digits only where they are not zero.
std::string FormatMicros(Micros amount);
// "unlimited" or FormatMicros.
std::string FormatCreditLimit(Micros limit);
// A locked price in USD per hour as the ledger charges it (rounded to the micro-dollar).
Micros PricePerHourMicros(double usd_per_hour);

}  // namespace sluice::ledger
