#include "topology/xml.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "topology/json.h"

namespace braid::topology {

const std::string* XmlElement::attr(const std::string& key) const {
  for (const auto& kv : attrs)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {

bool isNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool isNameChar(char c) { return isNameStart(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }
bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Recursive-descent reader over the whole text. Positions are tracked as a byte offset;
// line and column are computed only when an error or an element needs them.
class Parser {
 public:
  Parser(const std::string& text, const std::string& source) : t_(text), src_(source) {}

  StatusOr<XmlElement> document() {
    if (t_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;  // UTF-8 byte order mark
    bool haveRoot = false;
    XmlElement root;
    for (;;) {
      skipSpace();
      if (pos_ >= t_.size()) break;
      if (t_[pos_] != '<') {
        return error(haveRoot ? "text after the root element" : "text before the root element");
      }
      if (startsWith("<?")) {
        BRAID_RETURN_IF_ERROR(skipPast("?>", "processing instruction"));
      } else if (startsWith("<!--")) {
        BRAID_RETURN_IF_ERROR(skipComment());
      } else if (startsWith("<!DOCTYPE")) {
        if (haveRoot) return error("DOCTYPE after the root element");
        BRAID_RETURN_IF_ERROR(skipDoctype());
      } else if (startsWith("</")) {
        return error("closing tag without an opening tag");
      } else {
        if (haveRoot) return error("a second root element (a document has exactly one)");
        BRAID_RETURN_IF_ERROR(element(&root, 1));
        haveRoot = true;
      }
    }
    if (!haveRoot) return error("no root element (empty document?)");
    return root;
  }

 private:
  bool startsWith(const char* s) const { return t_.compare(pos_, std::strlen(s), s) == 0; }
  void skipSpace() {
    while (pos_ < t_.size() && isSpace(t_[pos_])) ++pos_;
  }

  // Line and column of byte `at`. Elements are visited in order, so counting resumes from
  // the last position asked for; that keeps large files linear.
  void lineCol(size_t at, int* line, int* col) const {
    if (at < lcPos_) {
      lcPos_ = 0;
      lcLine_ = 1;
      lcCol_ = 1;
    }
    for (; lcPos_ < at && lcPos_ < t_.size(); ++lcPos_) {
      if (t_[lcPos_] == '\n') {
        ++lcLine_;
        lcCol_ = 1;
      } else {
        ++lcCol_;
      }
    }
    *line = lcLine_;
    *col = lcCol_;
  }

  Status errorAt(size_t at, const std::string& what) const {
    int line, col;
    lineCol(at, &line, &col);
    return invalidArgument(src_ + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + what);
  }
  Status error(const std::string& what) const { return errorAt(pos_, what); }

  Status skipPast(const char* end, const char* what) {
    size_t at = pos_;
    size_t e = t_.find(end, pos_);
    if (e == std::string::npos) return errorAt(at, std::string("unterminated ") + what);
    pos_ = e + std::strlen(end);
    return Status::ok();
  }

  Status skipComment() {
    size_t at = pos_;
    size_t e = t_.find("--", pos_ + 4);
    if (e == std::string::npos) return errorAt(at, "unterminated comment");
    if (e + 2 >= t_.size() || t_[e + 2] != '>') return errorAt(e, "'--' inside a comment");
    pos_ = e + 3;
    return Status::ok();
  }

  Status skipDoctype() {
    // DOCTYPE may carry an internal subset in [...]; its entity declarations are ignored,
    // which is safe because undeclared entities are then rejected where used.
    size_t at = pos_;
    int bracket = 0;
    char quote = 0;
    for (pos_ += 9; pos_ < t_.size(); ++pos_) {
      char c = t_[pos_];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '[') {
        ++bracket;
      } else if (c == ']') {
        --bracket;
      } else if (c == '>' && bracket <= 0) {
        ++pos_;
        return Status::ok();
      }
    }
    return errorAt(at, "unterminated DOCTYPE");
  }

  Status name(std::string* out, const char* what) {
    if (pos_ >= t_.size()) return error(std::string("unexpected end of file, expected ") + what);
    if (!isNameStart(t_[pos_])) {
      return error(std::string("expected ") + what + ", found " + describeHere());
    }
    size_t s = pos_;
    while (pos_ < t_.size() && isNameChar(t_[pos_])) ++pos_;
    out->assign(t_, s, pos_ - s);
    return Status::ok();
  }

  std::string describeHere() const {
    if (pos_ >= t_.size()) return "end of file";
    char c = t_[pos_];
    if (c == '\n') return "end of line";
    if (static_cast<unsigned char>(c) < 0x20) return "control character";
    return std::string("'") + c + "'";
  }

  // Decodes character references in [s, e) into *out.
  Status decode(size_t s, size_t e, std::string* out) {
    out->clear();
    for (size_t i = s; i < e;) {
      char c = t_[i];
      if (c == '<') return errorAt(i, "'<' inside an attribute value");
      if (c != '&') {
        out->push_back(c);
        ++i;
        continue;
      }
      size_t semi = t_.find(';', i);
      if (semi == std::string::npos || semi >= e || semi - i > 12)
        return errorAt(i, "'&' not followed by a character reference (write &amp;)");
      std::string ref = t_.substr(i + 1, semi - i - 1);
      if (ref == "lt") out->push_back('<');
      else if (ref == "gt") out->push_back('>');
      else if (ref == "amp") out->push_back('&');
      else if (ref == "quot") out->push_back('"');
      else if (ref == "apos") out->push_back('\'');
      else if (ref.size() >= 2 && ref[0] == '#') {
        bool hex = ref[1] == 'x' || ref[1] == 'X';
        const char* digits = ref.c_str() + (hex ? 2 : 1);
        char* end = nullptr;
        errno = 0;
        unsigned long cp = std::strtoul(digits, &end, hex ? 16 : 10);
        if (*digits == '\0' || *end != '\0' || errno != 0 || cp == 0 || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
          return errorAt(i, "bad character reference '&" + ref + ";'");
        appendUtf8(out, cp);
      } else {
        return errorAt(i, "unknown entity '&" + ref + ";'");
      }
      i = semi + 1;
    }
    return Status::ok();
  }

  Status element(XmlElement* el, int depth) {
    if (depth > kMaxXmlDepth) return error("elements nested deeper than " + std::to_string(kMaxXmlDepth));
    size_t open = pos_;
    lineCol(open, &el->line, &el->column);
    ++pos_;  // '<'
    BRAID_RETURN_IF_ERROR(name(&el->name, "an element name after '<'"));
    for (;;) {
      size_t before = pos_;
      skipSpace();
      if (pos_ >= t_.size()) return errorAt(open, "unterminated tag <" + el->name + ">");
      char c = t_[pos_];
      if (c == '/') {
        ++pos_;
        if (pos_ >= t_.size() || t_[pos_] != '>')
          return error("expected '>' after '/' in <" + el->name + ">");
        ++pos_;
        return Status::ok();
      }
      if (c == '>') {
        ++pos_;
        break;
      }
      if (before == pos_) return error("expected whitespace, '>' or '/>' in <" + el->name + ">, found " + describeHere());
      std::string key;
      BRAID_RETURN_IF_ERROR(name(&key, ("an attribute name in <" + el->name + ">").c_str()));
      skipSpace();
      if (pos_ >= t_.size() || t_[pos_] != '=')
        return error("expected '=' after attribute '" + key + "' in <" + el->name + ">");
      ++pos_;
      skipSpace();
      if (pos_ >= t_.size() || (t_[pos_] != '"' && t_[pos_] != '\''))
        return error("value of attribute '" + key + "' in <" + el->name + "> is not quoted");
      char q = t_[pos_];
      size_t vs = ++pos_;
      size_t ve = t_.find(q, vs);
      if (ve == std::string::npos) return errorAt(vs - 1, "unterminated value of attribute '" + key + "'");
      std::string value;
      BRAID_RETURN_IF_ERROR(decode(vs, ve, &value));
      pos_ = ve + 1;
      if (el->attr(key) != nullptr) return errorAt(vs - 1, "duplicate attribute '" + key + "' in <" + el->name + ">");
      el->attrs.emplace_back(std::move(key), std::move(value));
    }
    // Content until the matching close tag.
    for (;;) {
      size_t ts = pos_;
      while (pos_ < t_.size() && t_[pos_] != '<') ++pos_;
      if (pos_ > ts) {
        std::string ignored;
        // Validate references in text too, so a stray '&' is reported, not skipped.
        for (size_t i = ts; i < pos_; ++i) {
          if (t_[i] == '&') {
            size_t semi = t_.find(';', i);
            if (semi == std::string::npos || semi > pos_) return errorAt(i, "'&' not followed by a character reference");
            BRAID_RETURN_IF_ERROR(decode(i, semi + 1, &ignored));
            i = semi;
          }
        }
      }
      if (pos_ >= t_.size())
        return errorAt(open, "element <" + el->name + "> is never closed (expected </" + el->name + ">)");
      if (startsWith("<!--")) {
        BRAID_RETURN_IF_ERROR(skipComment());
      } else if (startsWith("<![CDATA[")) {
        BRAID_RETURN_IF_ERROR(skipPast("]]>", "CDATA section"));
      } else if (startsWith("<?")) {
        BRAID_RETURN_IF_ERROR(skipPast("?>", "processing instruction"));
      } else if (startsWith("</")) {
        size_t closeAt = pos_;
        pos_ += 2;
        std::string closeName;
        BRAID_RETURN_IF_ERROR(name(&closeName, "an element name after '</'"));
        if (closeName != el->name) {
          return errorAt(closeAt, "</" + closeName + "> does not match <" + el->name + "> opened at line " +
                                      std::to_string(el->line));
        }
        skipSpace();
        if (pos_ >= t_.size() || t_[pos_] != '>') return error("expected '>' to end </" + closeName + ">");
        ++pos_;
        return Status::ok();
      } else if (startsWith("<!")) {
        return error("unexpected '<!' inside <" + el->name + ">");
      } else {
        el->children.emplace_back();
        BRAID_RETURN_IF_ERROR(element(&el->children.back(), depth + 1));
      }
    }
  }

  const std::string& t_;
  const std::string& src_;
  size_t pos_ = 0;
  mutable size_t lcPos_ = 0;
  mutable int lcLine_ = 1;
  mutable int lcCol_ = 1;
};

}  // namespace

StatusOr<XmlElement> parseXml(const std::string& text, const std::string& source) {
  Parser p(text, source);
  return p.document();
}

Status readFile(const std::string& path, std::string* out, size_t maxBytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status(Code::kSystemError, path + ": " + std::strerror(errno));
  std::string data;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    data.append(buf, n);
    if (data.size() > maxBytes) {
      std::fclose(f);
      return invalidArgument(path + ": larger than " + std::to_string(maxBytes) + " bytes");
    }
  }
  bool bad = std::ferror(f) != 0;
  int err = errno;
  std::fclose(f);
  if (bad) return Status(Code::kSystemError, path + ": read failed: " + std::strerror(err));
  *out = std::move(data);
  return Status::ok();
}

}  // namespace braid::topology
