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

}  // namespace sluice::spec
