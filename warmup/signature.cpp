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
ArgValue& next_arg(LaunchSpec& s, std::string_view name, ParamKind kind) {
  if (s.num_args >= kMaxParams)
    throw BindError(str_cat("launch spec: more than ", kMaxParams, " arguments (at '", name, "')"));
  ArgValue& a = s.args[s.num_args++];
  a = ArgValue{};
  a.name = name;
  a.kind = kind;
  return a;
}
}  // namespace

LaunchSpec& LaunchSpec::constant(std::string_view name, std::int64_t v) {
  if (num_constexprs >= kMaxConstexprs)
    throw BindError(str_cat("launch spec: more than ", kMaxConstexprs, " constexprs (at '", name, "')"));
  constexpr_names[num_constexprs] = name;
  constexprs[num_constexprs++] = v;
  return *this;
}

LaunchSpec& LaunchSpec::ptr(std::string_view name, const Tensor& t) {
  next_arg(*this, name, ParamKind::pointer).tensor = &t;
  return *this;
}

LaunchSpec& LaunchSpec::ptr(std::string_view name, const std::optional<Tensor>& t) {
  next_arg(*this, name, ParamKind::pointer).tensor = t ? &*t : nullptr;
  return *this;
}

LaunchSpec& LaunchSpec::integer(std::string_view name, __int128 v) {
  next_arg(*this, name, ParamKind::integer).integer = v;
  return *this;
}

LaunchSpec& LaunchSpec::floating(std::string_view name, double v) {
  next_arg(*this, name, ParamKind::floating).floating = v;
  return *this;
}

LaunchSpec& LaunchSpec::flag(std::string_view name, bool v) {
  next_arg(*this, name, ParamKind::boolean).boolean = v;
  return *this;
}

LaunchSpec& LaunchSpec::tensor_map(std::string_view name, const std::optional<TensorMapDesc>& desc) {
  ArgValue& a = next_arg(*this, name, ParamKind::tensor_map);
  if (!desc) return *this;
  if (num_maps >= kMaxTensorMaps)
    throw BindError(str_cat("launch spec: more than ", kMaxTensorMaps, " tensor maps (at '", name, "')"));
  if (desc->tensor == nullptr || desc->rank < 1 || desc->rank > 5)
    throw BindError(str_cat("launch spec: tensor map '", name, "' needs a tensor and a rank in [1, 5]"));
  maps[num_maps] = *desc;
  a.map = num_maps++;
  return *this;
}

}  // namespace warmkey
