//===- Error.cpp - flashjit's typed exceptions ----------------------------===//
#include "flashjit/frontend/Error.h"

#include <fmt/format.h>

#include <algorithm>

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

namespace {
/// Moves \p pos back to the start of the UTF-8 character holding it.
size_t charStart(std::string_view text, size_t pos) {
  while (pos > 0 && pos < text.size() &&
         (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80)
    --pos;
  return pos;
}

/// The quoted text and caret lines of a ParseError: the whole text when
/// short, else the kExcerptChars around \p column marked with "...".
std::string caretLines(std::string_view text, size_t column) {
  size_t at = column ? column - 1 : 0;
  if (text.size() <= kExcerptChars)
    return fmt::format("  {}\n  {}^", text, std::string(at, ' '));
  size_t begin = charStart(
      text, std::min(at > kExcerptChars / 2 ? at - kExcerptChars / 2 : 0,
                     text.size() - kExcerptChars));
  size_t end = charStart(text, std::min(begin + kExcerptChars, text.size()));
  std::string before = begin > 0 ? "..." : "";
  std::string after = end < text.size() ? "..." : "";
  return fmt::format("  {}{}{}\n  {}^\n  (a text of {} bytes; columns {}-{} "
                     "shown)",
                     before, text.substr(begin, end - begin), after,
                     std::string(before.size() + (at - begin), ' '),
                     text.size(), begin + 1, end);
}
} // namespace

std::string excerpt(std::string_view text, size_t limit) {
  if (text.size() <= limit)
    return std::string(text);
  return fmt::format("{}... ({} bytes in all)",
                     text.substr(0, charStart(text, limit)), text.size());
}

ParseError::ParseError(const std::string &message, const std::string &text,
                       size_t column)
    : UserError(fmt::format("{} at column {}\n{}", message, column,
                            caretLines(text, column)),
                std::source_location()),
      column_(column) {}

} // namespace flashjit
