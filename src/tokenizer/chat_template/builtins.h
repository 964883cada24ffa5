// The filters, tests, methods and global functions templates can call, with jinja2's (and
// transformers') semantics.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/chat_template/value.h"

namespace latent::tokenizer::jinja {

class Interpreter;

using FilterFn = Value (*)(Interpreter& interp, const Value& input, CallArgs& args);
using TestFn = bool (*)(Interpreter& interp, const Value& input, CallArgs& args);

struct FilterDef {
  std::string_view name;
  FilterFn fn;
};
struct TestDef {
  std::string_view name;
  TestFn fn;
};

// nullptr when latent has no filter (test) of that name.
const FilterDef* FindFilter(std::string_view name);
const TestDef* FindTest(std::string_view name);
// jinja2 built-ins that latent leaves out, named in the error instead of "no filter named".
bool IsUnsupportedFilter(std::string_view name);

// `obj.name` as a Python attribute of a str, list or dict: a bound method, or an undefined value
// when the type has no such attribute. Mutating methods of lists and dicts come back as undefined
// values that say the sandbox forbids them (as jinja2's sandbox does).
Value StrAttribute(const Value& obj, const std::string& name, bool* found);

// The globals transformers' environment provides: range, dict, namespace, raise_exception,
// strftime_now, cycler, joiner, lipsum (unsupported).
std::vector<std::pair<std::string, Value>> Globals();

// Python's `format % args` and `format.format(*args, **kwargs)`.
std::string PercentFormat(const std::string& format, const Value& args);

// Python slicing obj[start:stop:step] of a str, list, tuple or range; nullopt bounds are absent.
Value SliceValue(const Value& obj, const Value& start, const Value& stop, const Value& step);

}  // namespace latent::tokenizer::jinja
