#include "common/json.h"

namespace sluice {
namespace {

std::string FieldName(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return std::string(path) + "." + std::string(key);
}

int Depth(std::string_view text) {
  // Counts bracket nesting outside strings; cheap pre-check before the recursive parser.
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{')
      max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}')
      --depth;
  }
  return max_depth;
}

template <typename T, typename Check>
Result<T> Get(const Json& obj, std::string_view key, std::string_view path, const char* what,
              Check check) {
  if (!obj.is_object()) {
    return Status::InvalidArgument((path.empty() ? std::string("body") : std::string(path)) +
                                   ": expected an object");
  }
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) {
    return Status::InvalidArgument(FieldName(path, key) + ": required field is missing");
  }
  if (!check(*it)) {
    return Status::InvalidArgument(FieldName(path, key) + ": expected " + what + ", got " +
                                   it->type_name());
  }
  return it->template get<T>();
}

bool Present(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return false;
  auto it = obj.find(std::string(key));
  return it != obj.end() && !it->is_null();
}

}  // namespace

Result<Json> ParseJson(std::string_view text, int max_depth) {
  if (Depth(text) > max_depth) {
    return Status::InvalidArgument("JSON nested deeper than " + std::to_string(max_depth));
  }
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Re-run with exceptions only to recover the position for the message.
    try {
      Json ignored = Json::parse(text.begin(), text.end());
      (void)ignored;
    } catch (const Json::parse_error& e) {
      return Status::InvalidArgument(std::string("malformed JSON at byte ") +
                                     std::to_string(e.byte) + ": " + e.what());
    } catch (...) {
    }
    return Status::InvalidArgument("malformed JSON");
  }
  return j;
}

std::string DumpJson(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

Result<std::string> GetString(const Json& obj, std::string_view key, std::string_view path) {
  return Get<std::string>(obj, key, path, "a string", [](const Json& v) { return v.is_string(); });
}
Result<int64_t> GetInt(const Json& obj, std::string_view key, std::string_view path) {
  return Get<int64_t>(obj, key, path, "an integer",
                      [](const Json& v) { return v.is_number_integer(); });
}
Result<double> GetNumber(const Json& obj, std::string_view key, std::string_view path) {
  return Get<double>(obj, key, path, "a number", [](const Json& v) { return v.is_number(); });
}
Result<bool> GetBool(const Json& obj, std::string_view key, std::string_view path) {
  return Get<bool>(obj, key, path, "a boolean", [](const Json& v) { return v.is_boolean(); });
}
Result<std::string> GetStringOr(const Json& obj, std::string_view key, std::string fallback,
                                std::string_view path) {
  if (!Present(obj, key)) return fallback;
  return GetString(obj, key, path);
}
Result<int64_t> GetIntOr(const Json& obj, std::string_view key, int64_t fallback,
                         std::string_view path) {
  if (!Present(obj, key)) return fallback;
  return GetInt(obj, key, path);
}
Result<double> GetNumberOr(const Json& obj, std::string_view key, double fallback,
                           std::string_view path) {
  if (!Present(obj, key)) return fallback;
  return GetNumber(obj, key, path);
}

}  // namespace sluice
