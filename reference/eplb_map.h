// Eigen reference of eplb_map: logical -> physical expert ids with load recording.
#pragma once

#include <cstdint>
#include <optional>

#include "reference/types.h"

namespace warmkey::reference {

using RowMatrixXi64 = Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// For every flat offset o of ids (row = o / top_k), with L = replica_count.size(), slots =
// l2p.cols(), P = load.size():
//   valid = 0 <= e < L; rc = replica_count[e] clamped to [1, slots] (1 when invalid);
//   r = ((row * 2654435769) mod 2^32) mod rc; out[o] = valid ? l2p[e, r] : -1;
//   when record and (no num_unpadded or o < num_unpadded * top_k) and 0 <= out[o] < P: load[out[o]] += 1.
// load is accumulated into (not cleared). out is written as int64 (the caller narrows it to the
// ids dtype). Recipe: exact integer arithmetic; the order of the load additions is irrelevant.
void eplb_map(const Eigen::Ref<const IndexVector>& ids, const Eigen::Ref<const IndexVector>& replica_count,
              const Eigen::Ref<const RowMatrixXi64>& l2p, bool record, Eigen::Ref<Eigen::VectorXi> load,
              Eigen::Ref<IndexVector> out, std::int64_t top_k, std::optional<std::int64_t> num_unpadded);

}  // namespace warmkey::reference
