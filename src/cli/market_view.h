// How the CLI prints market answers: the explanation of an empty result (`sluice offers`,
// `sluice run`, `sluice estimate` print the same thing) and a ranked estimate.
#pragma once

#include <ostream>

#include "common/json.h"

namespace sluice::cli {

// The `explain` object of /v1/offers or /v1/estimate: what each condition rules out and the
// nearest offers with what each lacks.
void PrintExplanation(std::ostream& out, const Json& explain);

// The body of POST /v1/estimate: a ranked table, then one line per offer on how its estimate
// was reached.
void PrintEstimate(std::ostream& out, const Json& estimate);

}  // namespace sluice::cli
