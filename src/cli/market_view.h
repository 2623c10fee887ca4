// How the CLI prints market answers: the explanation of an empty result (`sluice offers`,
// `sluice run`, `sluice estimate` print the same thing) and a ranked estimate.
#pragma once

#include <ostream>
#include <string>

#include "common/json.h"

namespace sluice::cli {

// The `explain` object of /v1/offers or /v1/estimate: what each condition rules out and the
// nearest offers with what each lacks.
void PrintExplanation(std::ostream& out, const Json& explain);

// An offer's perf score for a table ("3.17"), marked "(measured)" when what its node measured
// ranks it rather than its model's spec; "-" when unknown.
std::string PerfText(const Json& offer);
// What the offer's node measured, as a perf score ("2.21"), or "-".
std::string MeasuredPerfText(const Json& offer);

// The body of POST /v1/estimate: a ranked table, then one line per offer on how its estimate
// was reached.
void PrintEstimate(std::ostream& out, const Json& estimate);

}  // namespace sluice::cli
