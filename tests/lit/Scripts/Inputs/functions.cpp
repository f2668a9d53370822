// Input of check-function-length.test: C++ constructs the checker must
// count right. Braces in comments { and strings are not code.
#include <string>

namespace outer {
namespace {

struct Widget {
  Widget(int a) : a(a), b{a + 1} {
    (void)a;
    (void)b;
    (void)this;
    (void)0;
  }
  int a;
  int b{0};

  int shortMember() { return a; }

  int longMember() const {
    auto lambda = [&](int x) {
      return x + a;
    };
    std::string s = "}}}{";
    const char *raw = R"x(
      } } {
    )x";
    return lambda(b) + static_cast<int>(s.size()) + (raw ? 1 : 0);
  }
};

} // namespace

int free_function_with_a_long_body(int x) {
  if (x > 0) {
    x += 1'000;
  }
  for (int i = 0; i < 3; ++i) {
    x += i;
  }
  char c = '{';
  return x + c;
}

int shortFree() { return 1; }

} // namespace outer
