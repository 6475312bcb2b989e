// Eigen views over the model runtime's row-major float buffers, one set for
// every layer file (internal to model/).
#ifndef STRATA_MODEL_EIGEN_MAPS_H_
#define STRATA_MODEL_EIGEN_MAPS_H_

#include "Eigen/Core"

namespace strata {
namespace model {
namespace eigen_maps {

using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;
using RowVectorMap = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowVectorMap = Eigen::Map<const Eigen::RowVectorXf>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;

}  // namespace eigen_maps
}  // namespace model
}  // namespace strata

#endif  // STRATA_MODEL_EIGEN_MAPS_H_
