#include "spec/spec_value.h"

namespace sluice::spec {

const char* KindName(SpecValue::Kind kind) {
  switch (kind) {
    case SpecValue::Kind::kNull:
      return "null";
    case SpecValue::Kind::kString:
      return "string";
    case SpecValue::Kind::kNumber:
      return "number";
    case SpecValue::Kind::kBool:
      return "boolean";
    case SpecValue::Kind::kMap:
      return "mapping";
    case SpecValue::Kind::kSeq:
      return "sequence";
  }
  return "value";
}

std::string EscapeControl(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    } else {
      out += ch;
    }
  }
  return out;
}

// User text shown inside a one-line message: truncated, control bytes escaped.
std::string QuoteText(std::string_view s) {
  constexpr size_t kMaxShown = 40;
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += (c == '"' || c == '\\') ? std::string{'\\', static_cast<char>(c)}
                                     : std::string{'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "\"";
}

std::string DescribeValue(const SpecValue& v) {
  using Kind = SpecValue::Kind;
  switch (v.kind) {
    case Kind::kString:
      return "string " + QuoteText(v.text);
    case Kind::kNumber:
      return v.text;
    case Kind::kBool:
      return "boolean " + v.text;
    case Kind::kNull:
      return "null";
    case Kind::kMap:
      return "a mapping";
    case Kind::kSeq:
      return "a sequence";
  }
  return "a value";
}

}  // namespace sluice::spec
