#pragma once
// A small XML reader for topology files: elements, attributes, comments, processing
// instructions, DOCTYPE, CDATA and the predefined and numeric character references.
// Namespaces, DTD validation and external entities are not supported (and never fetched).
// Text content is kept only as a flag; topology formats carry everything in attributes.
//
// Errors name the source, line and column: "topo.xml:12:5: expected '>' after '/' in <gpu>".

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace braid::topology {

struct XmlElement {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;  // in document order, unique keys
  std::vector<XmlElement> children;
  int line = 0;  // line of the '<' that opens the element, from 1
  int column = 0;

  // The value of attribute `key`, or nullptr when absent.
  const std::string* attr(const std::string& key) const;
};

// Nesting deeper than this is rejected: real topology files are under 10 levels, and the
// parser recurses once per level.
constexpr int kMaxXmlDepth = 128;

// Parses a whole document held in `text`. `source` (a file name) prefixes error messages.
// Returns the root element, or kInvalidArgument describing the first problem found.
[[nodiscard]] StatusOr<XmlElement> parseXml(const std::string& text, const std::string& source);

// Reads a whole file into `out`, refusing files over `maxBytes`. kSystemError names the path.
[[nodiscard]] Status readFile(const std::string& path, std::string* out, size_t maxBytes = 64u << 20);

}  // namespace braid::topology
