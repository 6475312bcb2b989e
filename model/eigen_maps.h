// Eigen views over the model runtime's row-major Real buffers, one set for
// every layer file (internal to model/).
#ifndef STRATA_MODEL_EIGEN_MAPS_H_
#define STRATA_MODEL_EIGEN_MAPS_H_

#include "Eigen/Core"
#include "model/real.h"

namespace strata {
namespace model {

using ArrayXr = Eigen::Array<Real, Eigen::Dynamic, 1>;
using ArrayXXr = Eigen::Array<Real, Eigen::Dynamic, Eigen::Dynamic>;
using VectorXr = Eigen::Matrix<Real, Eigen::Dynamic, 1>;
using RowVectorXr = Eigen::Matrix<Real, 1, Eigen::Dynamic>;
namespace eigen_maps {

using RowMatrix =
    Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using ArrayMap = Eigen::Map<ArrayXr>;
using ConstArrayMap = Eigen::Map<const ArrayXr>;
using RowVectorMap = Eigen::Map<RowVectorXr>;
using ConstRowVectorMap = Eigen::Map<const RowVectorXr>;
using VectorMap = Eigen::Map<VectorXr>;
using ConstVectorMap = Eigen::Map<const VectorXr>;

}  // namespace eigen_maps
}  // namespace model
}  // namespace strata

#endif  // STRATA_MODEL_EIGEN_MAPS_H_
