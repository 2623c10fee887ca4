// The one way money is written for people (issue 12 item 2): whole amounts to the cent, and
// hourly prices with the precision a per-second price needs. Amounts in the ledger are
// integers; these are for messages and tables only.
#pragma once

#include <string>

namespace sluice {

// "$2.50"
std::string Dollars(double amount);
// "$2.5/h", "$0.0425/h": four significant digits, so cheap CPU prices do not round to $0.00.
std::string DollarsPerHour(double price_per_hour);

}  // namespace sluice
