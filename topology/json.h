#pragma once
// A small strict JSON (RFC 8259) reader and writer for topology dumps. Every read is
// bounds-checked: nesting depth, string escapes and number syntax are validated, and
// errors name the source, line and column. Objects keep their keys in document order.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace braid::topology {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;
  static JsonValue boolean(bool b);
  static JsonValue number(double d);
  static JsonValue string(std::string s);
  static JsonValue array();
  static JsonValue object();

  Kind kind() const { return kind_; }
  bool isNull() const { return kind_ == Kind::kNull; }
  bool isObject() const { return kind_ == Kind::kObject; }
  bool isArray() const { return kind_ == Kind::kArray; }
  bool isString() const { return kind_ == Kind::kString; }
  bool isNumber() const { return kind_ == Kind::kNumber; }
  bool isBool() const { return kind_ == Kind::kBool; }

  bool boolValue() const { return bool_; }
  double numberValue() const { return num_; }
  const std::string& stringValue() const { return str_; }
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<std::pair<std::string, JsonValue>>& members() const { return members_; }

  // Object member `key`, or nullptr when absent or this is not an object.
  const JsonValue* find(const std::string& key) const;

  // Builders (only meaningful on arrays / objects).
  void push(JsonValue v) { items_.push_back(std::move(v)); }
  void set(std::string key, JsonValue v) { members_.emplace_back(std::move(key), std::move(v)); }

  // Line and column where the value starts in the parsed text (0 when built in code).
  int line() const { return line_; }
  int column() const { return col_; }

  // Compact JSON text, or indented with `indent` spaces per level when indent > 0.
  std::string dump(int indent = 0) const;

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double num_ = 0;
  std::string str_;
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
  int line_ = 0;
  int col_ = 0;
};

constexpr int kMaxJsonDepth = 64;

// Parses a whole document. `source` names it in error messages. Duplicate object keys
// are an error (they would make a dump ambiguous).
[[nodiscard]] StatusOr<JsonValue> parseJson(const std::string& text, const std::string& source);

// `s` as a JSON string literal, quotes included.
std::string jsonQuote(const std::string& s);
// `d` in the shortest form that reads back to the same double.
std::string jsonNumber(double d);

// Appends code point `cp` to `out` in UTF-8 (what the JSON and XML readers' escapes stand for).
void appendUtf8(std::string* out, unsigned long cp);

}  // namespace braid::topology
