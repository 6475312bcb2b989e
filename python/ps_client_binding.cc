// strata._strata.PsClient: client/ps_client.h for python/strata/ps_client.py.
// Pulls land in numpy arrays without copies (a view of the received buffer,
// or in place into `out`); every call releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "client/push_tag.h"
#include "codec/spec_codec.h"
#include "common/tensor.h"
#include "python/binding_util.h"

namespace strata::python {
namespace {


strata::DType DTypeOf(const py::dtype& dt) {
  if (dt.is(py::dtype::of<float>())) return strata::DType::kFloat32;
  if (dt.is(py::dtype::of<double>())) return strata::DType::kFloat64;
  if (dt.is(py::dtype::of<int32_t>())) return strata::DType::kInt32;
  if (dt.is(py::dtype::of<int64_t>())) return strata::DType::kInt64;
  const std::string name = py::str(py::handle(dt)).cast<std::string>();
  Raise(absl::InvalidArgumentError(
      "dtype " + name + " is not one of float32, float64, int32, int64"));
}

py::dtype NumpyOf(strata::DType dtype) {
  switch (dtype) {
    case strata::DType::kFloat32:
      return py::dtype::of<float>();
    case strata::DType::kFloat64:
      return py::dtype::of<double>();
    case strata::DType::kInt32:
      return py::dtype::of<int32_t>();
    case strata::DType::kInt64:
      return py::dtype::of<int64_t>();
    default:
      Raise(absl::InternalError("the server sent an invalid dtype"));
  }
}

// A C-contiguous array of a PS dtype (no copy when `a` already is one).
py::array Contiguous(const py::handle& a, const char* what) {
  py::array arr = py::array::ensure(a, py::array::c_style);
  if (!arr) {
    throw py::error_already_set();
  }
  (void)DTypeOf(arr.dtype());
  return arr;
}

strata::Shape ShapeOf(const py::array& a) {
  return strata::Shape(a.shape(), a.shape() + a.ndim());
}

py::dict PushDict(const strata::PushResult& r) {
  py::dict d;
  d["version"] = r.version;
  d["applied"] = r.applied;
  d["duplicate"] = r.duplicate;
  d["attempts"] = r.attempts;
  return d;
}

// `parsed`, or its error naming the variable and the field, as the server
// would.
template <typename T>
absl::StatusOr<T> Named(const std::string& variable, const char* field,
                        absl::StatusOr<T> parsed) {
  if (parsed.ok()) return parsed;
  return absl::InvalidArgumentError(absl::StrCat(
      "variable '", variable, "': ", field, ": ", parsed.status().message()));
}

class PyPsClient {
 public:
  PyPsClient(const std::string& target, double deadline_seconds,
             const std::string& token) {
    strata::PsClientOptions options;
    options.deadline = absl::Seconds(deadline_seconds);
    options.security.auth_token = token;
    client_ = strata::PsClient::Connect(target, options);
  }

  // `spec`: name, dtype (numpy), shape, initializer {type, seed, value,
  // minval, maxval, mean, stddev}, optimizer (OptimizerFrom's keys; type
  // also "assign_add"), update {kind: async | sync | staleness,
  // num_replicas, staleness}. The server validates the values.
  bool CreateVariable(const py::dict& d) {
    strata::v1::VariableSpec spec;
    spec.set_name(d["name"].cast<std::string>());
    spec.set_dtype(static_cast<strata::v1::DType>(
        DTypeOf(py::dtype::from_args(d["dtype"]))));
    for (int64_t dim : d["shape"].cast<std::vector<int64_t>>()) {
      spec.add_shape(dim);
    }
    // The spec's initializer and optimizer go to the wire through the one
    // codec (codec/spec_codec.h); the server validates the values.
    const py::dict init = d["initializer"].cast<py::dict>();
    strata::InitializerSpec i;
    i.type = Value(Named(spec.name(), "initializer",
                         strata::ParseInitializerType(
                             init["type"].cast<std::string>())));
    auto num = [&init](const char* key, double fallback) {
      return init.contains(key) ? init[key].cast<double>() : fallback;
    };
    if (init.contains("seed")) i.seed = init["seed"].cast<uint64_t>();
    i.value = num("value", i.value);
    i.minval = num("minval", i.minval);
    i.maxval = num("maxval", i.maxval);
    i.mean = num("mean", i.mean);
    i.stddev = num("stddev", i.stddev);
    *spec.mutable_initializer() = strata::InitializerToProto(i);
    const sdk::Optimizer o = OptimizerFrom(d["optimizer"].cast<py::dict>());
    strata::OptimizerConfig c;
    c.type = Value(
        Named(spec.name(), "optimizer", strata::ParseOptimizerType(o.type)));
    c.learning_rate = o.learning_rate;
    c.momentum = o.momentum;
    c.nesterov = o.nesterov;
    c.beta_1 = o.beta_1;
    c.beta_2 = o.beta_2;
    c.epsilon = o.epsilon;
    c.amsgrad = o.amsgrad;
    c.initial_accumulator_value = o.initial_accumulator_value;
    c.rho = o.rho;
    c.centered = o.centered;
    *spec.mutable_optimizer() = strata::OptimizerToProto(c);
    const py::dict update = d["update"].cast<py::dict>();
    const std::string kind = update["kind"].cast<std::string>();
    strata::v1::UpdateMode* u = spec.mutable_update_mode();
    if (kind == "async") {
      u->set_kind(strata::v1::UpdateMode::ASYNC);
    } else if (kind == "sync") {
      u->set_kind(strata::v1::UpdateMode::SYNC);
    } else if (kind == "staleness") {
      u->set_kind(strata::v1::UpdateMode::STALENESS);
    } else {
      Raise(absl::InvalidArgumentError(
          "update: '" + kind + "' is not one of async, sync, staleness"));
    }
    if (update.contains("num_replicas")) {
      u->set_num_replicas(update["num_replicas"].cast<int32_t>());
    }
    if (update.contains("staleness")) {
      u->set_staleness(update["staleness"].cast<int32_t>());
    }
    absl::StatusOr<bool> created;
    {
      py::gil_scoped_release release;
      created = client_->CreateVariable(spec);
    }
    return Value(std::move(created));
  }

  // Into `out` (written in place, no copy) when given, else a new array
  // over the pulled buffer (no copy either).
  py::tuple Pull(const std::string& name, py::object out, int64_t min_version) {
    strata::PullOptions options;
    options.min_version = min_version;
    if (!out.is_none()) {
      py::array arr = py::array::ensure(out);
      if (!arr || !(arr.flags() & py::array::c_style) || !arr.writeable()) {
        Raise(absl::InvalidArgumentError(
            "out must be a writeable C-contiguous numpy array"));
      }
      const strata::DType want = DTypeOf(arr.dtype());
      void* dst = arr.mutable_data();
      const size_t bytes = static_cast<size_t>(arr.nbytes());
      absl::StatusOr<strata::PullResult> r;
      {
        py::gil_scoped_release release;
        r = client_->Pull(name, dst, bytes, options);
      }
      strata::PullResult result = Value(std::move(r));
      if (result.dtype != want) {
        Raise(absl::InvalidArgumentError(
            "out has dtype " +
            py::str(py::handle(arr.dtype())).cast<std::string>() +
            " but variable '" + name + "' holds " +
            strata::DTypeName(result.dtype)));
      }
      return py::make_tuple(arr, result.version);
    }
    absl::StatusOr<strata::Tensor> t;
    int64_t version = 0;
    {
      py::gil_scoped_release release;
      t = client_->PullTensor(name, options, &version);
    }
    auto tensor = std::make_unique<strata::Tensor>(Value(std::move(t)));
    return py::make_tuple(ArrayOver(std::move(tensor)), version);
  }

  py::tuple PullRows(const std::string& name, const py::handle& ids_obj,
                     int64_t width, const py::dtype& dtype) {
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> ids =
        py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(
            ids_obj);
    if (!ids || ids.ndim() != 1) {
      Raise(absl::InvalidArgumentError("ids must be a 1-D array of integers"));
    }
    py::array out(dtype, std::vector<py::ssize_t>{ids.shape(0), width});
    void* dst = out.mutable_data();
    const size_t bytes = static_cast<size_t>(out.nbytes());
    absl::Span<const int64_t> span(ids.data(), static_cast<size_t>(ids.size()));
    absl::StatusOr<strata::PullResult> r;
    {
      py::gil_scoped_release release;
      r = client_->PullRows(name, span, dst, bytes);
    }
    strata::PullResult result = Value(std::move(r));
    return py::make_tuple(out, result.version);
  }

  py::dict Push(const std::string& name, const py::handle& grad,
                const std::string& job, int64_t worker, int64_t step) {
    py::array g = Contiguous(grad, "grad");
    const strata::DType dtype = DTypeOf(g.dtype());
    const strata::Shape shape = ShapeOf(g);
    const void* data = g.data();
    strata::PushTag tag{job, worker, step};
    absl::StatusOr<strata::PushResult> r;
    {
      py::gil_scoped_release release;
      r = client_->Push(name, dtype, shape, data, tag);
    }
    return PushDict(Value(std::move(r)));
  }

  py::dict PushRows(const std::string& name, const py::handle& ids_obj,
                    const py::handle& grads, const std::string& job,
                    int64_t worker, int64_t step) {
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> ids =
        py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(
            ids_obj);
    if (!ids || ids.ndim() != 1) {
      Raise(absl::InvalidArgumentError("ids must be a 1-D array of integers"));
    }
    py::array g = Contiguous(grads, "grads");
    if (g.ndim() != 2 || g.shape(0) != ids.shape(0)) {
      Raise(absl::InvalidArgumentError(
          "grads must be 2-D with one row per id"));
    }
    const strata::DType dtype = DTypeOf(g.dtype());
    const int64_t width = g.shape(1);
    const void* data = g.data();
    absl::Span<const int64_t> span(ids.data(), static_cast<size_t>(ids.size()));
    strata::PushTag tag{job, worker, step};
    absl::StatusOr<strata::PushResult> r;
    {
      py::gil_scoped_release release;
      r = client_->PushRows(name, dtype, span, width, data, tag);
    }
    return PushDict(Value(std::move(r)));
  }

  int64_t Assign(const std::string& name, const py::handle& value) {
    py::array v = Contiguous(value, "value");
    const strata::DType dtype = DTypeOf(v.dtype());
    const strata::Shape shape = ShapeOf(v);
    const void* data = v.data();
    absl::StatusOr<int64_t> r;
    {
      py::gil_scoped_release release;
      r = client_->Assign(name, dtype, shape, data);
    }
    return Value(std::move(r));
  }

  py::dict Save(const std::string& path) {
    absl::StatusOr<strata::v1::SaveResponse> r;
    {
      py::gil_scoped_release release;
      r = client_->Save(path);
    }
    strata::v1::SaveResponse s = Value(std::move(r));
    py::dict d;
    d["path"] = s.path();
    d["num_variables"] = s.num_variables();
    d["bytes"] = s.bytes();
    return d;
  }

  int64_t Restore(const std::string& path) {
    absl::StatusOr<strata::v1::RestoreResponse> r;
    {
      py::gil_scoped_release release;
      r = client_->Restore(path);
    }
    return Value(std::move(r)).num_variables();
  }

  py::list ListVariables() {
    absl::StatusOr<strata::v1::ListVariablesResponse> r;
    {
      py::gil_scoped_release release;
      r = client_->ListVariables();
    }
    strata::v1::ListVariablesResponse list = Value(std::move(r));
    py::list out;
    for (const strata::v1::VariableInfo& v : list.variables()) {
      py::dict d;
      d["name"] = v.spec().name();
      d["dtype"] = NumpyOf(static_cast<strata::DType>(v.spec().dtype()));
      d["shape"] = py::tuple(py::cast(std::vector<int64_t>(
          v.spec().shape().begin(), v.spec().shape().end())));
      d["version"] = v.version();
      d["optimizer"] = v.spec().optimizer().type();
      out.append(d);
    }
    return out;
  }

 private:
  static py::array ArrayOver(std::unique_ptr<strata::Tensor> tensor) {
    const py::dtype dt = NumpyOf(tensor->dtype);
    std::vector<py::ssize_t> shape(tensor->shape.begin(), tensor->shape.end());
    void* data = tensor->buffer ? tensor->buffer->data() : nullptr;
    py::capsule owner(tensor.release(), [](void* p) {
      delete static_cast<strata::Tensor*>(p);
    });
    return py::array(dt, shape, data, owner);
  }

  std::unique_ptr<strata::PsClient> client_;
};

}  // namespace

void BindPsClient(py::module_& m) {
  py::class_<PyPsClient>(m, "PsClient")
      .def(py::init<const std::string&, double, const std::string&>(),
           py::arg("target"), py::arg("deadline_seconds"), py::arg("token"))
      .def("create_variable", &PyPsClient::CreateVariable, py::arg("spec"))
      .def("pull", &PyPsClient::Pull, py::arg("name"), py::arg("out"),
           py::arg("min_version"))
      .def("pull_rows", &PyPsClient::PullRows, py::arg("name"), py::arg("ids"),
           py::arg("width"), py::arg("dtype"))
      .def("push", &PyPsClient::Push, py::arg("name"), py::arg("grad"),
           py::arg("job"), py::arg("worker"), py::arg("step"))
      .def("push_rows", &PyPsClient::PushRows, py::arg("name"), py::arg("ids"),
           py::arg("grads"), py::arg("job"), py::arg("worker"),
           py::arg("step"))
      .def("assign", &PyPsClient::Assign, py::arg("name"), py::arg("value"))
      .def("save", &PyPsClient::Save, py::arg("path"))
      .def("restore", &PyPsClient::Restore, py::arg("path"))
      .def("list_variables", &PyPsClient::ListVariables);
}

}  // namespace strata::python
