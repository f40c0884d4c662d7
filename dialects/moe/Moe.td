//===- Moe.td - The moe dialect umbrella -------------------*- tablegen -*-===//
//
// Part of moe-compiler.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_MOE_MOE_TD
#define MOE_DIALECT_MOE_MOE_TD

include "moe/MoeDialect.td"
include "moe/MoeAttrs.td"
include "moe/MoeOps.td"

#endif // MOE_DIALECT_MOE_MOE_TD
