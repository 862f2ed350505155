// The pattern matcher: finds every place in a graph where a small DAG of ops
// (a pattern) occurs, and, where it almost does, the condition that failed.
//
// A pattern is a flat list of elements; element 0 is the root (the last op,
// whose outputs the rewrite replaces). An op element names its inputs by
// element index, so one element read twice (LayerNorm's x, read by
// ReduceMean and Sub) must bind the same node or value both times:
//
//   0: BatchNormalization(1, 3, 4, 5, 6)        root
//   1: Conv(2, 7, 8)      exclusive: only the pattern reads its output
//   2: x                  any value
//   3..8: constants       initializers that are not graph inputs
//
// Nothing here knows about Python: the bindings build Patterns from the
// Python rule DSL (pyonnxopt/fusion/pattern.py) and hand back Matches.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/model.h"

namespace pyonnxopt::match {

// An attribute's required value. `absent_ok`: the attribute's default
// equals that value, so a node without it matches too.
struct AttrConstraint {
  std::string name;
  ir::AttrType type = ir::AttrType::kInt;  // kInt, kFloat, kString, kInts, kFloats
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::string s;
  bool absent_ok = false;
};

struct Element {
  enum class Kind { kOp, kValue } kind = Kind::kValue;
  std::string name;  // the binding's name in the Match

  // kOp
  std::vector<std::string> op_types;  // any of these
  std::string domain;                 // "" and "ai.onnx" are the same
  std::vector<int> inputs;            // element indices, in input order
  bool commutative = false;           // inputs 0 and 1 may come in either order
  bool exclusive = true;              // (not the root) its outputs are read only inside the match
  int output_index = 0;               // which output of the node its reader reads
  std::vector<AttrConstraint> attrs;

  // kValue
  bool constant = false;  // an initializer that is not a graph input
  bool optional = false;  // may be an omitted input (absent or "")
  int32_t dtype = 0;      // required element type; 0: any
  int rank = -1;          // required rank (from known shapes); -1: any
  bool scalar = false;    // a constant with exactly one element
  bool has_value = false; // a constant whose every element equals `value`
  double value = 0;
};

struct Pattern {
  std::vector<Element> elements;  // [0] is the root op
  // Empty when well formed, else what is wrong (an input index out of
  // range, a root that is not an op, ...).
  std::string validate() const;
};

// Bindings, one per element: the node (op elements) or the value (value
// elements; nullptr for an omitted optional input).
struct Match {
  std::vector<ir::Node*> nodes;
  std::vector<ir::Value*> values;
};

// A root-op node where the pattern failed after the root's op type matched,
// and the first condition that failed on the most promising attempt.
// `depth`: how many elements that attempt had bound (a rule with several
// variant patterns reports the one that came closest); `ops`: how many op
// elements had found a node of their type (the failing one included), so a
// caller can tell an Add that is only an Add from one where the pattern's
// shape had begun to appear.
struct NearMiss {
  ir::Node* anchor = nullptr;
  std::string reason;
  int depth = 0;
  int ops = 0;
};

struct Matches {
  std::vector<Match> found;
  std::vector<NearMiss> near;
};

// Every match of `pattern` in `graph` (not its subgraphs), one per root node,
// in graph order. Matches may overlap; the caller applies them one by one.
// Pinned nodes never match.
Matches find_all(const ir::Graph& graph, const Pattern& pattern);

// The closest near miss at each root node over several patterns (a rule's
// variants): the one that bound the most elements, the first of those kept.
struct NearMissBook {
  std::unordered_map<const ir::Node*, size_t> at;  // anchor -> its entry
  std::vector<NearMiss> entries;                   // in the order anchors came
};

// find_all's matches. Near misses with at least `min_ops` ops go into `book`
// where they bound more than the one it holds for their root (a reason is
// written only then); without a book none are gathered. For rules with
// hundreds of variants: the near misses of each variant at each Add of a
// 100,000-node graph, handed to Python, cost more than the matching.
std::vector<Match> find_matches(const ir::Graph& graph, const Pattern& pattern, NearMissBook* book, int min_ops);

}  // namespace pyonnxopt::match
