// PLACEHOLDER: being written.
#include "algorithms/algorithm.h"
namespace braid::algorithms {
TreeNode binaryTree(int, int, int, bool) { return TreeNode{}; }
}  // namespace braid::algorithms
