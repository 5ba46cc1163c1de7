// KernelDef lookups and LaunchSpec builders.
#include "warmup/signature.h"

#include "warmup/error.h"

namespace warmkey {

int KernelDef::param_index(std::string_view param_name) const {
  for (int i = 0; i < static_cast<int>(params.size()); ++i) {
    if (params[i].name == param_name) return i;
  }
  return -1;
}

namespace {
ArgValue& next_arg(LaunchSpec& s) {
  if (s.num_args >= kMaxParams) throw BindError(str_cat("launch spec: more than ", kMaxParams, " arguments"));
  return s.args[s.num_args++];
}
}  // namespace

LaunchSpec& LaunchSpec::constant(std::int64_t v) {
  if (num_constexprs >= kMaxConstexprs)
    throw BindError(str_cat("launch spec: more than ", kMaxConstexprs, " constexprs"));
  constexprs[num_constexprs++] = v;
  return *this;
}

LaunchSpec& LaunchSpec::ptr(const Tensor& t) {
  ArgValue& a = next_arg(*this);
  a = ArgValue{};
  a.kind = ParamKind::pointer;
  a.tensor = &t;
  return *this;
}

LaunchSpec& LaunchSpec::ptr(const std::optional<Tensor>& t) {
  ArgValue& a = next_arg(*this);
  a = ArgValue{};
  a.kind = ParamKind::pointer;
  a.tensor = t ? &*t : nullptr;
  return *this;
}

LaunchSpec& LaunchSpec::integer(__int128 v) {
  ArgValue& a = next_arg(*this);
  a = ArgValue{};
  a.kind = ParamKind::integer;
  a.integer = v;
  return *this;
}

LaunchSpec& LaunchSpec::floating(double v) {
  ArgValue& a = next_arg(*this);
  a = ArgValue{};
  a.kind = ParamKind::floating;
  a.floating = v;
  return *this;
}

LaunchSpec& LaunchSpec::flag(bool v) {
  ArgValue& a = next_arg(*this);
  a = ArgValue{};
  a.kind = ParamKind::boolean;
  a.boolean = v;
  return *this;
}

}  // namespace warmkey
