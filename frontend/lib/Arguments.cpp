//===- Arguments.cpp - Checking run-time arguments against a variant ------===//
#include "flashjit/frontend/Arguments.h"

#include "flashjit/frontend/Error.h"
#include "flashjit/frontend/Variant.h"

#include <fmt/format.h>

namespace flashjit {

void Arguments::validateFor(const Variant &variant) const {
  std::vector<ParamDecl> wantParams = variant.params();
  std::vector<BufferDecl> wantBuffers = variant.buffers();
  for (const ParamDecl &p : wantParams) {
    auto it = params.find(p.name);
    if (it == params.end())
      throw UserError(fmt::format("missing value for parameter '{}' ({}) of "
                                  "variant '{}'",
                                  p.name, toString(p.type), variant.name()));
    if (it->second.type != p.type)
      throw UserError(fmt::format("parameter '{}' is {} but was given a {} "
                                  "value",
                                  p.name, toString(p.type),
                                  toString(it->second.type)));
  }
  for (const auto &[name, value] : params) {
    bool known = false;
    for (const ParamDecl &p : wantParams)
      known |= p.name == name;
    if (!known)
      throw UserError(fmt::format("unknown parameter '{}': variant '{}' reads "
                                  "no such parameter",
                                  name, variant.name()));
  }
  for (const BufferDecl &b : wantBuffers) {
    auto it = buffers.find(b.name);
    if (it == buffers.end())
      throw UserError(fmt::format("missing buffer '{}' ({}) of variant '{}'",
                                  b.name, toString(b.elementType),
                                  variant.name()));
    const BufferRef &ref = it->second;
    if (ref.elementType != b.elementType)
      throw UserError(fmt::format("buffer '{}' holds {} but was given {} data",
                                  b.name, toString(b.elementType),
                                  toString(ref.elementType)));
    if (ref.size < 0)
      throw UserError(
          fmt::format("buffer '{}' has size {} < 0", b.name, ref.size));
    if (ref.size > 0 && !ref.data)
      throw UserError(fmt::format("buffer '{}' has size {} but a null data "
                                  "pointer",
                                  b.name, ref.size));
  }
  for (const auto &[name, ref] : buffers) {
    bool known = false;
    for (const BufferDecl &b : wantBuffers)
      known |= b.name == name;
    if (!known)
      throw UserError(fmt::format("unknown buffer '{}': variant '{}' reads no "
                                  "such buffer",
                                  name, variant.name()));
  }
}

} // namespace flashjit
