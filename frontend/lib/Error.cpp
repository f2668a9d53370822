//===- Error.cpp - flashjit's typed exceptions ----------------------------===//
#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

namespace flashjit {

static std::string withLocation(const std::string &message,
                                const std::source_location &loc) {
  if (!loc.file_name() || !*loc.file_name())
    return message;
  return fmt::format("{}:{}:{}: error: {}", loc.file_name(), loc.line(),
                     loc.column(), message);
}

UserError::UserError(const std::string &message, std::source_location loc)
    : Error(withLocation(message, loc)), message_(message), loc_(loc) {}

ParseError::ParseError(const std::string &message, const std::string &text,
                       size_t column)
    : UserError(fmt::format("{} at column {}\n  {}\n  {}^", message, column,
                            text, std::string(column ? column - 1 : 0, ' ')),
                std::source_location()),
      column_(column) {}

} // namespace flashjit
