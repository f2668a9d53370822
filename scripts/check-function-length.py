#!/usr/bin/env python3
"""Lists C++ functions longer than a limit (issue 13: none in compiler/lib
over ~150 lines) and, with --files, source files over a line limit (~600).

    scripts/check-function-length.py [--max-lines 150] [--max-file-lines 600]
                                     [--strict] [--allow NAME ...] [PATH ...]

PATH: files or folders (default: compiler/lib). Prints one line per
offender, longest first:

    <lines>  <path>:<first line>  <name>

and exits 0, or 1 with --strict when there is an offender that --allow
does not name (a known one, e.g. in a file another branch is splitting;
an --allow that matches nothing is reported, so the list can shrink).

Approximate by design (no C++ parser): comments, string and character
literals (raw strings too) and preprocessor lines are blanked, then braces
are matched. A `{` opened at namespace, class or extern scope whose header
(the text since the previous `;`, `{` or `}`) has a parameter list and does
not start with class/struct/union/enum/namespace is a function body; its
length runs from the header's first line to the closing brace, so a lambda
or local class counts toward the function that holds it. Member functions
defined in a class body count on their own, as do functions in headers.
"""
import argparse
import os
import re
import sys

SOURCE_EXTS = (".cpp", ".cc", ".cxx", ".h", ".hpp", ".inc")


def blank_non_code(text):
    """Returns text with comments, literals and preprocessor lines replaced
    by spaces (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        ch = text[i]
        if at_line_start and ch in " \t":
            out.append(ch)
            i += 1
            continue
        if at_line_start and ch == "#":
            # Preprocessor line, with backslash continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        at_line_start = False
        if ch == "\n":
            at_line_start = True
            out.append(ch)
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif ch == "R" and text.startswith('"', i + 1) and (
                i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(ch)
                i += 1
                continue
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + m.end())
            end = n if end < 0 else end + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif ch in "\"'":
            # A digit separator (1'000) is not a literal.
            if ch == "'" and i > 0 and text[i - 1].isalnum() and \
                    i + 1 < n and text[i + 1].isalnum() and \
                    (i + 2 >= n or text[i + 2] != "'"):
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


NON_FUNCTION_HEADER = re.compile(
    r"^\s*(template\s*<.*>\s*)?(class|struct|union|enum|namespace)\b|"
    r"^\s*extern\s*$|^\s*(namespace)\s*$", re.S)


def function_name(header):
    """The qualified name before the parameter list of a header."""
    m = re.search(r"((?:[A-Za-z_~][\w]*\s*(?:<[^()]*>)?\s*::\s*)*"
                  r"(?:operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*))\s*\(",
                  header)
    return re.sub(r"\s+", "", m.group(1)) if m else "?"


def functions(path):
    """Yields (first line, last line, name) of each function definition."""
    with open(path, encoding="utf-8", errors="replace") as f:
        code = blank_non_code(f.read())
    # Scope kinds: 'ns' (namespace, extern, class: functions start here),
    # 'fn' (a function body), 'block' (nested in a function body), 'init'
    # (a brace initializer in a constructor's init list).
    stack = []
    header_start, header_line = None, 1
    line = 1
    for i, ch in enumerate(code):
        if ch == "\n":
            line += 1
            continue
        if ch not in "{};":
            if ch not in " \t" and header_start is None:
                header_start, header_line = i, line
            continue
        in_function = any(k == "fn" for k, _, _ in stack)
        if ch == "{":
            header = code[header_start:i] if header_start is not None else ""
            if in_function:
                stack.append(("block", 0, ""))
            elif re.search(r"\)\s*:(?!:)", header) and \
                    re.search(r"[\w>]\s*$", header):
                # A brace initializer in a constructor's init list: the
                # header goes on after it.
                stack.append(("init", 0, ""))
                continue
            elif NON_FUNCTION_HEADER.search(header) or "(" not in header or \
                    re.search(r"=\s*$", header) or \
                    re.match(r"^\s*\)?\s*$", header):
                stack.append(("ns", 0, ""))
            else:
                start = header_line
                stack.append(("fn", start, function_name(header)))
        elif ch == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "fn":
                    yield start, line, name
                elif kind == "init":
                    continue
        header_start = None
    return


def iter_files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, _, names in os.walk(p):
            for name in sorted(names):
                if name.endswith(SOURCE_EXTS):
                    yield os.path.join(root, name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=["compiler/lib"])
    ap.add_argument("--max-lines", type=int, default=150,
                    help="longest allowed function, in lines (default 150)")
    ap.add_argument("--max-file-lines", type=int, default=0,
                    help="also list files longer than this (0: don't)")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when there is an offender")
    ap.add_argument("--allow", action="append", default=[], metavar="NAME",
                    help="a function name (as printed) that --strict "
                    "tolerates; may repeat")
    args = ap.parse_args()
    long_functions, long_files = [], []
    for path in iter_files(args.paths):
        for first, last, name in functions(path):
            n = last - first + 1
            if n > args.max_lines:
                long_functions.append((n, f"{path}:{first}", name))
        if args.max_file_lines:
            with open(path, encoding="utf-8", errors="replace") as f:
                n = sum(1 for _ in f)
            if n > args.max_file_lines:
                long_files.append((n, path))
    failing = 0
    for n, where, name in sorted(long_functions, reverse=True):
        allowed = name in args.allow
        failing += not allowed
        print(f"{n:5d}  {where}  {name}" + ("  (allowed)" if allowed else ""))
    for name in args.allow:
        if not any(name == f[2] for f in long_functions):
            print(f"note: --allow {name} matches no offender; drop it")
    for n, path in sorted(long_files, reverse=True):
        print(f"{n:5d}  {path}  (file)")
    print(f"check-function-length: {len(long_functions)} function(s) over "
          f"{args.max_lines} lines" +
          (f", {len(long_files)} file(s) over {args.max_file_lines} lines"
           if args.max_file_lines else ""))
    return 1 if args.strict and (failing or long_files) else 0


if __name__ == "__main__":
    sys.exit(main())
