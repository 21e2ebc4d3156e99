#include "topology/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace braid::topology {

JsonValue JsonValue::boolean(bool b) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}
JsonValue JsonValue::number(double d) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.num_ = d;
  return v;
}
JsonValue JsonValue::string(std::string s) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.str_ = std::move(s);
  return v;
}
JsonValue JsonValue::array() {
  JsonValue v;
  v.kind_ = Kind::kArray;
  return v;
}
JsonValue JsonValue::object() {
  JsonValue v;
  v.kind_ = Kind::kObject;
  return v;
}

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind_ != Kind::kObject) return nullptr;
  for (const auto& kv : members_)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

std::string jsonQuote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      case '\b': o += "\\b"; break;
      case '\f': o += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o.push_back(static_cast<char>(c));
        }
    }
  }
  o += "\"";
  return o;
}

std::string jsonNumber(double d) {
  if (!std::isfinite(d)) return "null";  // JSON has no NaN/Inf; readers see a missing value
  if (d == std::floor(d) && std::fabs(d) < 9.007199254740992e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", d);
    return buf;
  }
  // Shortest precision that round-trips, so dump -> load -> dump is stable.
  char buf[40];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

void appendUtf8(std::string* out, unsigned long cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

void dumpTo(const JsonValue& v, int indent, int level, std::string* o) {
  auto nl = [&](int lvl) {
    if (indent > 0) {
      o->push_back('\n');
      o->append(static_cast<size_t>(indent * lvl), ' ');
    }
  };
  switch (v.kind()) {
    case JsonValue::Kind::kNull: *o += "null"; break;
    case JsonValue::Kind::kBool: *o += v.boolValue() ? "true" : "false"; break;
    case JsonValue::Kind::kNumber: *o += jsonNumber(v.numberValue()); break;
    case JsonValue::Kind::kString: *o += jsonQuote(v.stringValue()); break;
    case JsonValue::Kind::kArray: {
      *o += "[";
      bool first = true;
      // Arrays of scalars stay on one line; they are short in topology dumps.
      bool flat = true;
      for (const auto& it : v.items()) flat = flat && !it.isArray() && !it.isObject();
      for (const auto& it : v.items()) {
        if (!first) *o += flat && indent > 0 ? ", " : ",";
        if (!flat) nl(level + 1);
        dumpTo(it, indent, level + 1, o);
        first = false;
      }
      if (!flat && !v.items().empty()) nl(level);
      *o += "]";
      break;
    }
    case JsonValue::Kind::kObject: {
      *o += "{";
      bool first = true;
      // Objects whose members are all scalars stay on one line: one node or link per line.
      bool flat = true;
      for (const auto& kv : v.members()) flat = flat && !kv.second.isArray() && !kv.second.isObject();
      for (const auto& kv : v.members()) {
        if (!first) *o += flat && indent > 0 ? ", " : ",";
        if (!flat) nl(level + 1);
        *o += jsonQuote(kv.first);
        *o += indent > 0 ? ": " : ":";
        dumpTo(kv.second, indent, level + 1, o);
        first = false;
      }
      if (!flat && !v.members().empty()) nl(level);
      *o += "}";
      break;
    }
  }
}

}  // namespace

std::string JsonValue::dump(int indent) const {
  std::string o;
  dumpTo(*this, indent, 0, &o);
  return o;
}

class JsonParser {
 public:
  JsonParser(const std::string& t, const std::string& src) : t_(t), src_(src) {}

  StatusOr<JsonValue> document() {
    if (t_.compare(0, 3, "\xEF\xBB\xBF") == 0) advance(3);
    skipSpace();
    JsonValue v;
    BRAID_RETURN_IF_ERROR(value(&v, 1));
    skipSpace();
    if (pos_ < t_.size()) return error("unexpected " + describe() + " after the JSON value");
    return v;
  }

 private:
  void advance(size_t n = 1) {
    for (size_t i = 0; i < n && pos_ < t_.size(); ++i, ++pos_) {
      if (t_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
    }
  }
  void skipSpace() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\n' || t_[pos_] == '\r')) advance();
  }
  std::string describe() const {
    if (pos_ >= t_.size()) return "end of input";
    unsigned char c = static_cast<unsigned char>(t_[pos_]);
    if (c < 0x20 || c >= 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
      return buf;
    }
    return std::string("'") + static_cast<char>(c) + "'";
  }
  Status error(const std::string& what) const {
    return invalidArgument(src_ + ":" + std::to_string(line_) + ":" + std::to_string(col_) + ": " + what);
  }
  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (t_.compare(pos_, n, word) != 0) return false;
    advance(n);
    return true;
  }

  Status value(JsonValue* out, int depth) {
    if (depth > kMaxJsonDepth) return error("nesting deeper than " + std::to_string(kMaxJsonDepth));
    out->line_ = line_;
    out->col_ = col_;
    if (pos_ >= t_.size()) return error("unexpected end of input, expected a value");
    char c = t_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out->kind_ = JsonValue::Kind::kString;
      return string(&out->str_);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    if (literal("true")) {
      out->kind_ = JsonValue::Kind::kBool;
      out->bool_ = true;
      return Status::ok();
    }
    if (literal("false")) {
      out->kind_ = JsonValue::Kind::kBool;
      out->bool_ = false;
      return Status::ok();
    }
    if (literal("null")) {
      out->kind_ = JsonValue::Kind::kNull;
      return Status::ok();
    }
    return error("unexpected " + describe() + ", expected a value");
  }

  Status object(JsonValue* out, int depth) {
    out->kind_ = JsonValue::Kind::kObject;
    advance();  // '{'
    skipSpace();
    if (pos_ < t_.size() && t_[pos_] == '}') {
      advance();
      return Status::ok();
    }
    for (;;) {
      skipSpace();
      if (pos_ >= t_.size() || t_[pos_] != '"') return error("expected a member name in quotes, found " + describe());
      std::string key;
      int kl = line_, kc = col_;
      BRAID_RETURN_IF_ERROR(string(&key));
      if (out->find(key) != nullptr)
        return invalidArgument(src_ + ":" + std::to_string(kl) + ":" + std::to_string(kc) + ": duplicate key \"" + key + "\"");
      skipSpace();
      if (pos_ >= t_.size() || t_[pos_] != ':') return error("expected ':' after \"" + key + "\", found " + describe());
      advance();
      skipSpace();
      JsonValue v;
      BRAID_RETURN_IF_ERROR(value(&v, depth + 1));
      out->members_.emplace_back(std::move(key), std::move(v));
      skipSpace();
      if (pos_ < t_.size() && t_[pos_] == ',') {
        advance();
        continue;
      }
      if (pos_ < t_.size() && t_[pos_] == '}') {
        advance();
        return Status::ok();
      }
      return error("expected ',' or '}' in object, found " + describe());
    }
  }

  Status array(JsonValue* out, int depth) {
    out->kind_ = JsonValue::Kind::kArray;
    advance();  // '['
    skipSpace();
    if (pos_ < t_.size() && t_[pos_] == ']') {
      advance();
      return Status::ok();
    }
    for (;;) {
      skipSpace();
      JsonValue v;
      BRAID_RETURN_IF_ERROR(value(&v, depth + 1));
      out->items_.push_back(std::move(v));
      skipSpace();
      if (pos_ < t_.size() && t_[pos_] == ',') {
        advance();
        continue;
      }
      if (pos_ < t_.size() && t_[pos_] == ']') {
        advance();
        return Status::ok();
      }
      return error("expected ',' or ']' in array, found " + describe());
    }
  }

  static int hexVal(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  Status hex4(unsigned* out) {
    if (pos_ + 4 > t_.size()) return error("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = hexVal(t_[pos_]);
      if (h < 0) return error("bad hex digit in \\u escape");
      v = v * 16 + static_cast<unsigned>(h);
      advance();
    }
    *out = v;
    return Status::ok();
  }

  Status string(std::string* out) {
    advance();  // opening quote
    out->clear();
    for (;;) {
      if (pos_ >= t_.size()) return error("unterminated string");
      unsigned char c = static_cast<unsigned char>(t_[pos_]);
      if (c == '"') {
        advance();
        return Status::ok();
      }
      if (c < 0x20) return error("control character in string (escape it)");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        advance();
        continue;
      }
      advance();
      if (pos_ >= t_.size()) return error("unterminated escape");
      char e = t_[pos_];
      advance();
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          unsigned cp = 0;
          BRAID_RETURN_IF_ERROR(hex4(&cp));
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (t_.compare(pos_, 2, "\\u") != 0) return error("unpaired surrogate in \\u escape");
            advance(2);
            unsigned lo = 0;
            BRAID_RETURN_IF_ERROR(hex4(&lo));
            if (lo < 0xDC00 || lo > 0xDFFF) return error("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return error("unpaired surrogate in \\u escape");
          }
          appendUtf8(out, cp);
          break;
        }
        default: return error(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  Status number(JsonValue* out) {
    // Validate the RFC 8259 grammar first; strtod alone accepts hex, inf and "1.".
    size_t s = pos_;
    size_t p = pos_;
    auto digit = [&](size_t i) { return i < t_.size() && t_[i] >= '0' && t_[i] <= '9'; };
    if (p < t_.size() && t_[p] == '-') ++p;
    if (!digit(p)) return error("bad number");
    if (t_[p] == '0') {
      ++p;
      if (digit(p)) return error("bad number (leading zero)");
    } else {
      while (digit(p)) ++p;
    }
    if (p < t_.size() && t_[p] == '.') {
      ++p;
      if (!digit(p)) return error("bad number (no digit after '.')");
      while (digit(p)) ++p;
    }
    if (p < t_.size() && (t_[p] == 'e' || t_[p] == 'E')) {
      ++p;
      if (p < t_.size() && (t_[p] == '+' || t_[p] == '-')) ++p;
      if (!digit(p)) return error("bad number (no digit in exponent)");
      while (digit(p)) ++p;
    }
    std::string text = t_.substr(s, p - s);
    double d = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(d)) return error("number out of range");
    out->kind_ = JsonValue::Kind::kNumber;
    out->num_ = d;
    advance(p - s);
    return Status::ok();
  }

  const std::string& t_;
  const std::string& src_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

StatusOr<JsonValue> parseJson(const std::string& text, const std::string& source) {
  JsonParser p(text, source);
  return p.document();
}

}  // namespace braid::topology
