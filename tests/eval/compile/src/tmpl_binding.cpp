/* Test fixture: gcc errors with notes, template instantiation context and a warning. */
#include <map>
#include <string>
#include <vector>
struct X {};
template <typename T> T twice(T v) { return v.nope() * 2; }
template <typename T> T thrice(T v) { return twice(v) + v; }
int f() { std::map<std::string, std::vector<X>> m; m["a"].push_back(1); return thrice(3); }
int g() { int unused = 1; return h(); }
