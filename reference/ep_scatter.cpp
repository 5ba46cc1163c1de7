// Reference of ep_scatter.
#include "reference/ep_scatter.h"

#include <algorithm>

#include "warmup/error.h"

namespace warmkey::reference {

EpScatterResult ep_scatter(const std::vector<std::uint8_t>& x, std::int64_t hidden,
                           const std::vector<std::uint32_t>& scale, std::int64_t scale_cols, bool packed,
                           const Eigen::Ref<const IndexVector>& topk, std::int64_t top_k,
                           const std::vector<std::int32_t>& counts, std::int64_t first_expert, std::int64_t out_rows,
                           std::int64_t align_m) {
  const std::int64_t n = top_k > 0 ? topk.size() / top_k : 0;
  const auto e_local = static_cast<std::int64_t>(counts.size());
  if (top_k < 1 || topk.size() != n * top_k || static_cast<std::int64_t>(x.size()) != n * hidden ||
      static_cast<std::int64_t>(scale.size()) != n * scale_cols || align_m < 1)
    throw Error(str_cat("reference ep_scatter: inconsistent shapes: x ", x.size(), " bytes, H ", hidden, ", scale ",
                        scale.size(), " words of ", scale_cols, ", topk ", topk.size(), " of K ", top_k));
  EpScatterResult r;
  r.expert_start.resize(static_cast<std::size_t>(e_local));
  r.expert_counter.assign(static_cast<std::size_t>(e_local), 0);
  std::int64_t acc = 0;
  for (std::int64_t e = 0; e < e_local; ++e) {
    r.expert_start[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(acc);
    acc += (counts[static_cast<std::size_t>(e)] + align_m - 1) / align_m * align_m;
  }
  r.m_indices.assign(static_cast<std::size_t>(out_rows), -1);
  for (std::int64_t e = 0; e < e_local; ++e) {
    const std::int64_t s = r.expert_start[static_cast<std::size_t>(e)];
    for (std::int64_t i = 0; i < counts[static_cast<std::size_t>(e)] && s + i < out_rows; ++i)
      r.m_indices[static_cast<std::size_t>(s + i)] = static_cast<std::int32_t>(e);
  }
  r.output.assign(static_cast<std::size_t>(out_rows * hidden), 0);
  r.output_scale.assign(static_cast<std::size_t>(out_rows * scale_cols), 0);
  r.output_index.assign(static_cast<std::size_t>(n * top_k), -1);
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t j = 0; j < top_k; ++j) {
      const std::int64_t id = topk(t * top_k + j), e = id - first_expert;
      if (id < 0 || e < 0 || e >= e_local) continue;
      const std::int64_t slot = r.expert_counter[static_cast<std::size_t>(e)]++;
      const std::int64_t d = r.expert_start[static_cast<std::size_t>(e)] + slot;
      if (slot >= counts[static_cast<std::size_t>(e)] || d >= out_rows) continue;
      r.output_index[static_cast<std::size_t>(t * top_k + j)] = static_cast<std::int32_t>(d);
      std::copy_n(x.begin() + t * hidden, hidden, r.output.begin() + d * hidden);
      for (std::int64_t g = 0; g < scale_cols; ++g)
        r.output_scale[static_cast<std::size_t>(packed ? g * out_rows + d : d * scale_cols + g)] =
            scale[static_cast<std::size_t>(t * scale_cols + g)];
    }
  }
  return r;
}

}  // namespace warmkey::reference
