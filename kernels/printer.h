// Readable text of kernel IR, for dumps, tests and as the code-cache key.
#pragma once
#include <ostream>
#include <string>

#include "kernels/ir.h"

namespace terrace::kernels {

std::string to_string(const Expr& e);
std::string to_string(const Stmt& s);
// The signature (buffers, parallel range) and the body.
std::string to_string(const LoweredFunc& f);

std::ostream& operator<<(std::ostream& os, const Expr& e);
std::ostream& operator<<(std::ostream& os, const Stmt& s);

}  // namespace terrace::kernels
