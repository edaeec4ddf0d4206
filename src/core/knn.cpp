#include "pcops/knn.hpp"

#include "core/validate.hpp"

namespace pcops::core {

void validate_knn(const PointsView& query, const PointsView& ref, const LengthsView& query_lengths,
                  const LengthsView& ref_lengths, const KnnParams& params) {
  check_points(query, "query");
  check_points(ref, "ref");
  PCOPS_CHECK(query.batch == ref.batch, Value, "ref: expected batch size ", query.batch,
              " (as query), got ", ref.batch);
  PCOPS_CHECK(query.dim == ref.dim, Value, "ref: expected dimension ", query.dim,
              " (as query), got ", ref.dim);
  check_lengths(query_lengths, query.batch, query.count, "query_lengths");
  check_lengths(ref_lengths, ref.batch, ref.count, "ref_lengths");
  PCOPS_CHECK(params.k >= 0, Value, "k: expected >= 0, got ", params.k);
  PCOPS_CHECK(ref_lengths.present() || params.k <= ref.count, Value, "k: expected <= ",
              ref.count, " (the number of reference points), got ", params.k);
  checked_mul(checked_mul(query.batch, query.count, "knn output"), params.k, "knn output");
}

}  // namespace pcops::core
