// What the strata._strata sources share: absl::Status -> the
// strata.errors class of its code (tf.errors' names, raised with the GIL
// held), and the optimizer dict the Python package passes.
#ifndef STRATA_PYTHON_BINDING_UTIL_H_
#define STRATA_PYTHON_BINDING_UTIL_H_

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdk/strata.h"

namespace strata::python {

namespace py = pybind11;
namespace sdk = strata::sdk;

inline const char* ErrorClass(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kCancelled:
      return "CancelledError";
    case absl::StatusCode::kInvalidArgument:
      return "InvalidArgumentError";
    case absl::StatusCode::kDeadlineExceeded:
      return "DeadlineExceededError";
    case absl::StatusCode::kNotFound:
      return "NotFoundError";
    case absl::StatusCode::kAlreadyExists:
      return "AlreadyExistsError";
    case absl::StatusCode::kPermissionDenied:
      return "PermissionDeniedError";
    case absl::StatusCode::kResourceExhausted:
      return "ResourceExhaustedError";
    case absl::StatusCode::kFailedPrecondition:
      return "FailedPreconditionError";
    case absl::StatusCode::kAborted:
      return "AbortedError";
    case absl::StatusCode::kOutOfRange:
      return "OutOfRangeError";
    case absl::StatusCode::kUnimplemented:
      return "UnimplementedError";
    case absl::StatusCode::kInternal:
      return "InternalError";
    case absl::StatusCode::kUnavailable:
      return "UnavailableError";
    case absl::StatusCode::kDataLoss:
      return "DataLossError";
    case absl::StatusCode::kUnauthenticated:
      return "UnauthenticatedError";
    default:
      return "UnknownError";
  }
}

// Raises the status's strata.errors class (with the GIL held).
[[noreturn]] inline void Raise(const absl::Status& status) {
  py::object errors = py::module_::import("strata.errors");
  py::object cls = errors.attr(ErrorClass(status.code()));
  py::object error = cls(std::string(status.message()),
                         static_cast<int>(status.code()));
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

inline void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Value(absl::StatusOr<T> s) {
  if (!s.ok()) Raise(s.status());
  return *std::move(s);
}

// Keras optimizer arguments (python/strata/keras/optimizers.py _spec).
inline sdk::Optimizer OptimizerFrom(const py::dict& d) {
  sdk::Optimizer o(d["type"].cast<std::string>());
  auto num = [&d](const char* key, double* out) {
    if (d.contains(key)) *out = d[key].cast<double>();
  };
  auto flag = [&d](const char* key, bool* out) {
    if (d.contains(key)) *out = d[key].cast<bool>();
  };
  num("learning_rate", &o.learning_rate);
  num("momentum", &o.momentum);
  flag("nesterov", &o.nesterov);
  num("beta_1", &o.beta_1);
  num("beta_2", &o.beta_2);
  num("epsilon", &o.epsilon);
  flag("amsgrad", &o.amsgrad);
  num("initial_accumulator_value", &o.initial_accumulator_value);
  num("rho", &o.rho);
  flag("centered", &o.centered);
  return o;
}

// Registers strata._strata.PsClient (ps_client_binding.cc).
void BindPsClient(py::module_& m);

}  // namespace strata::python

#endif  // STRATA_PYTHON_BINDING_UTIL_H_
