// JSON helpers around nlohmann::json that never throw: parsing and typed field access return
// Status with the field's path, so a malformed request becomes a 400 that names the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice {

using Json = nlohmann::json;

// Parses text as JSON. Errors name the byte offset. Rejects nesting deeper than max_depth so a
// hostile body cannot exhaust the stack.
Result<Json> ParseJson(std::string_view text, int max_depth = 64);

// Serializes without throwing: invalid UTF-8 in strings is replaced rather than raising.
std::string DumpJson(const Json& j, int indent = -1);

// Typed access to an object member. `path` is the object's own path ("" for the root) and is
// used in error messages ("resources.gpus: expected an integer").
Result<std::string> GetString(const Json& obj, std::string_view key, std::string_view path = "");
Result<int64_t> GetInt(const Json& obj, std::string_view key, std::string_view path = "");
Result<double> GetNumber(const Json& obj, std::string_view key, std::string_view path = "");
Result<bool> GetBool(const Json& obj, std::string_view key, std::string_view path = "");
// Same, but a missing key (or null) yields the fallback.
Result<std::string> GetStringOr(const Json& obj, std::string_view key, std::string fallback,
                                std::string_view path = "");
Result<int64_t> GetIntOr(const Json& obj, std::string_view key, int64_t fallback,
                         std::string_view path = "");
Result<double> GetNumberOr(const Json& obj, std::string_view key, double fallback,
                           std::string_view path = "");

}  // namespace sluice
