//===- Error.h - flashjit's typed exceptions ---------------------*- C++
//-*-===//
//
// Every error flashjit reports to a caller is one of the exceptions below, so
// a host application can tell a mistake in its own input (UserError) from a
// failure inside the compiler (CompileError), the CUDA driver (DriverError)
// or a broken invariant (InternalError). Messages are formatted with fmt and
// name the field and the value that were wrong.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHJIT_FRONTEND_ERROR_H
#define FLASHJIT_FRONTEND_ERROR_H

#include <cstddef>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace flashjit {

/// The most characters of the caller's input an error message quotes.
inline constexpr size_t kExcerptChars = 200;

/// \p text for quoting in a message: unchanged when at most \p limit bytes,
/// else its first \p limit bytes (never splitting a UTF-8 character) and
/// "... (N bytes in all)", so a 2 MB input never makes a 2 MB message.
std::string excerpt(std::string_view text, size_t limit = kExcerptChars);

/// Base class of every exception flashjit throws.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

/// A mistake in the caller's input: a type error in a DSL expression, a bad
/// shape, stride, dtype or option, a missing buffer. Carries the source
/// location of the user's code that caused it where one is known (for DSL
/// expressions: the line that built the offending node).
class UserError : public Error {
public:
  /// \p message describes the problem; \p loc is the user's code location
  /// (none by default: errors about run-time input have no source line).
  UserError(const std::string &message,
            std::source_location loc = std::source_location());
  /// The message without the location prefix.
  const std::string &message() const { return message_; }
  /// Where in the user's code the error was detected.
  const std::source_location &location() const { return loc_; }

private:
  std::string message_;
  std::source_location loc_;
};

/// A syntax error in canonical text (expressions, specs). \c column() is the
/// 1-based column of the offending character in the parsed text. The
/// message shows the text with a caret under that column; of a text longer
/// than kExcerptChars, only the kExcerptChars around the column.
class ParseError : public UserError {
public:
  /// \p text is the whole input, \p column the 1-based column of the error.
  ParseError(const std::string &message, const std::string &text,
             size_t column);
  /// 1-based column of the error in the parsed text.
  size_t column() const { return column_; }

private:
  size_t column_;
};

/// A failure inside the compiler (a pass failed, the lowering produced invalid
/// IR). Names the pass and, where it was dumped, the file holding the IR.
class CompileError : public Error {
public:
  explicit CompileError(const std::string &message) : Error(message) {}
};

/// A failure reported by the CUDA driver, NVRTC or nvJitLink: carries the
/// result code's name and the JIT/compiler log.
class DriverError : public Error {
public:
  explicit DriverError(const std::string &message) : Error(message) {}
};

/// A broken internal invariant: a bug in flashjit, never the caller's fault.
class InternalError : public Error {
public:
  explicit InternalError(const std::string &message) : Error(message) {}
};

} // namespace flashjit

#endif // FLASHJIT_FRONTEND_ERROR_H
