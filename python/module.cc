// strata._strata: the C++ SDK (sdk/strata.h) for the Python package
// (python/strata). The Keras- and tf.distribute-shaped API is the package's
// Python; this module holds what must run in C++: datasets over numpy
// arrays, models, their Fit / Evaluate / Predict, and the strategies.
//
// Errors: an absl::Status that is not OK raises the strata.errors class of
// its code (tf.errors' names) carrying its message. Every call that may
// block (Fit, Evaluate, Predict) releases the GIL; Fit runs on a thread of
// its own while the calling thread waits for signals, so Ctrl-C stops it
// (and its local cluster) and raises KeyboardInterrupt.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/ps_client.h"
#include "client/push_tag.h"
#include "common/tensor.h"
#include "sdk/strata.h"
#include "worker/dataset.h"

namespace py = pybind11;
namespace sdk = strata::sdk;

namespace {

const char* ErrorClass(absl::StatusCode code) {
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
[[noreturn]] void Raise(const absl::Status& status) {
  py::object errors = py::module_::import("strata.errors");
  py::object cls = errors.attr(ErrorClass(status.code()));
  py::object error = cls(std::string(status.message()),
                         static_cast<int>(status.code()));
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Value(absl::StatusOr<T> s) {
  if (!s.ok()) Raise(s.status());
  return *std::move(s);
}

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// Rows of `x` (2-D, C order after the cast) as one vector.
std::vector<float> Rows(const FloatArray& x, int64_t* features) {
  if (x.ndim() != 2) {
    Raise(absl::InvalidArgumentError(
        "x must be 2-D (examples, features) after flattening"));
  }
  *features = x.shape(1);
  return std::vector<float>(x.data(), x.data() + x.size());
}

sdk::Dataset FromArrays(const FloatArray& x, const IntArray& y) {
  int64_t features = 0;
  std::vector<float> rows = Rows(x, &features);
  if (y.ndim() != 1 || y.shape(0) != x.shape(0)) {
    Raise(absl::InvalidArgumentError(
        "y must be 1-D with one label per row of x"));
  }
  std::vector<int32_t> labels(y.data(), y.data() + y.size());
  return sdk::datasets::FromArrays(std::move(rows), std::move(labels),
                                   features);
}

sdk::Layer LayerFrom(const py::dict& d) {
  sdk::Layer l;
  l.type = d["type"].cast<std::string>();
  if (d.contains("units")) l.units = d["units"].cast<int64_t>();
  if (d.contains("activation")) {
    l.activation = d["activation"].cast<std::string>();
  }
  if (d.contains("use_bias")) l.use_bias = d["use_bias"].cast<bool>();
  if (d.contains("rate")) l.rate = d["rate"].cast<double>();
  if (d.contains("input_shape")) {
    l.input_shape = d["input_shape"].cast<std::vector<int64_t>>();
  }
  if (d.contains("name")) l.name = d["name"].cast<std::string>();
  return l;
}

sdk::Optimizer OptimizerFrom(const py::dict& d) {
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

py::dict EpochDict(const sdk::EpochResult& e) {
  py::dict d;
  d["epoch"] = e.epoch;
  d["steps"] = e.steps;
  d["loss"] = e.loss;
  d["accuracy"] = e.accuracy;
  d["evaluated"] = e.evaluated;
  d["test_loss"] = e.test_loss;
  d["test_accuracy"] = e.test_accuracy;
  d["examples_per_second"] = e.examples_per_second;
  d["seconds"] = e.seconds;
  return d;
}

// A model and the strategy it was built under.
class PyModel {
 public:
  PyModel(const py::list& layers, const std::string& name, uint64_t seed,
          std::shared_ptr<sdk::Strategy> strategy) {
    std::vector<sdk::Layer> ls;
    for (const py::handle& h : layers) ls.push_back(LayerFrom(h.cast<py::dict>()));
    sdk::ModelOptions options;
    options.name = name;
    options.seed = seed;
    auto scope = strategy->Scope();
    model_ = std::make_unique<sdk::Sequential>(std::move(ls), options);
  }

  void Compile(const py::dict& optimizer, const std::string& loss,
               const std::vector<std::string>& metrics) {
    Check(model_->Compile(OptimizerFrom(optimizer), loss, metrics));
  }

  // verbose 0: silent; otherwise a line per epoch, written to Python's
  // sys.stdout as it comes.
  py::list Fit(const sdk::Dataset& train, int epochs, int64_t batch_size,
               std::optional<sdk::Dataset> validation, int validation_freq,
               uint64_t shuffle_seed, int verbose) {
    sdk::FitOptions options;
    options.epochs = epochs;
    options.batch_size = batch_size;
    options.validation = std::move(validation);
    options.validation_freq = validation_freq;
    options.shuffle_seed = shuffle_seed;
    options.verbose = verbose > 0 ? 1 : 0;
    std::ostringstream out;
    options.out = &out;
    std::atomic<bool> stop{false};
    options.stop = &stop;
    std::atomic<bool> done{false};
    std::optional<absl::StatusOr<sdk::History>> result;
    bool interrupted = false;
    {
      py::gil_scoped_release release;
      std::thread fit([&] {
        result.emplace(model_->Fit(train, options));
        done = true;
      });
      while (!done) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        py::gil_scoped_acquire acquire;
        if (PyErr_CheckSignals() != 0) {
          // Keep the KeyboardInterrupt; stop the Fit and wait for it.
          interrupted = true;
          stop = true;
          break;
        }
      }
      fit.join();
    }
    if (interrupted) throw py::error_already_set();
    if (verbose > 0) {
      py::module_::import("sys").attr("stdout").attr("write")(out.str());
    }
    sdk::History history = Value(*std::move(result));
    py::list epochs_out;
    for (const sdk::EpochResult& e : history.epochs) {
      epochs_out.append(EpochDict(e));
    }
    return epochs_out;
  }

  py::tuple Evaluate(const sdk::Dataset& data, int64_t batch_size) const {
    absl::StatusOr<sdk::EvalResult> r;
    {
      py::gil_scoped_release release;
      r = model_->Evaluate(data, batch_size);
    }
    sdk::EvalResult e = Value(std::move(r));
    return py::make_tuple(e.loss, e.accuracy, e.examples);
  }

  py::array_t<float> Predict(const FloatArray& x, int64_t batch_size) const {
    int64_t features = 0;
    std::vector<float> rows = Rows(x, &features);
    const int64_t n = x.shape(0);
    absl::StatusOr<std::vector<float>> out;
    {
      py::gil_scoped_release release;
      std::vector<int32_t> labels(static_cast<size_t>(n), 0);
      out = model_->Predict(
          sdk::datasets::FromArrays(std::move(rows), std::move(labels),
                                    features),
          batch_size);
    }
    std::vector<float> values = Value(std::move(out));
    const int64_t outputs = model_->num_outputs();
    py::array_t<float> result({n, outputs});
    std::copy(values.begin(), values.end(), result.mutable_data());
    return result;
  }

  std::vector<py::array_t<float>> GetWeights() const {
    std::vector<std::vector<float>> w = Value(model_->GetWeights());
    std::vector<std::vector<int64_t>> shapes = Shapes();
    std::vector<py::array_t<float>> out;
    for (size_t i = 0; i < w.size(); ++i) {
      py::array_t<float> a(shapes[i]);
      std::copy(w[i].begin(), w[i].end(), a.mutable_data());
      out.push_back(std::move(a));
    }
    return out;
  }

  void SetWeights(const std::vector<FloatArray>& weights) {
    std::vector<std::vector<float>> w;
    for (const FloatArray& a : weights) {
      w.emplace_back(a.data(), a.data() + a.size());
    }
    Check(model_->SetWeights(std::move(w)));
  }

  // Each weight's shape: a dense kernel [inputs, units], a bias [units].
  std::vector<std::vector<int64_t>> Shapes() const {
    std::vector<std::string> names = Value(model_->WeightNames());
    std::vector<std::vector<float>> w = Value(model_->GetWeights());
    std::vector<std::vector<int64_t>> shapes;
    int64_t inputs = model_->num_features();
    for (size_t i = 0; i < names.size(); ++i) {
      const bool kernel = names[i].size() >= 7 &&
                          names[i].compare(names[i].size() - 7, 7, "/kernel") == 0;
      if (kernel) {
        const int64_t units =
            inputs > 0 ? static_cast<int64_t>(w[i].size()) / inputs : 0;
        shapes.push_back({inputs, units});
        inputs = units;
      } else {
        shapes.push_back({static_cast<int64_t>(w[i].size())});
      }
    }
    return shapes;
  }

  std::vector<std::string> WeightNames() const {
    return Value(model_->WeightNames());
  }
  std::string Summary() const { return Value(model_->Summary()); }
  bool compiled() const { return model_->compiled(); }
  int64_t num_features() const { return model_->num_features(); }
  int64_t num_outputs() const { return model_->num_outputs(); }
  std::string strategy_name() const { return model_->strategy().name(); }

 private:
  std::unique_ptr<sdk::Sequential> model_;
};

sdk::LocalClusterOptions ClusterOptions(int num_ps, int num_workers,
                                        const std::string& update,
                                        const std::string& collective,
                                        const std::string& bin_dir) {
  sdk::LocalClusterOptions o;
  o.num_ps = num_ps;
  o.num_workers = num_workers;
  o.update = update;
  o.collective = collective;
  o.bin_dir = bin_dir;
  return o;
}

// --- PsClient ---------------------------------------------------------------

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
    const py::dict init = d["initializer"].cast<py::dict>();
    strata::v1::Initializer* i = spec.mutable_initializer();
    i->set_type(init["type"].cast<std::string>());
    auto num = [&init](const char* key) {
      return init.contains(key) ? init[key].cast<double>() : 0.0;
    };
    if (init.contains("seed")) i->set_seed(init["seed"].cast<uint64_t>());
    i->set_value(num("value"));
    i->set_minval(num("minval"));
    i->set_maxval(num("maxval"));
    i->set_mean(num("mean"));
    i->set_stddev(num("stddev"));
    const sdk::Optimizer o = OptimizerFrom(d["optimizer"].cast<py::dict>());
    strata::v1::OptimizerSpec* os = spec.mutable_optimizer();
    os->set_type(o.type);
    os->set_learning_rate(o.learning_rate);
    os->set_momentum(o.momentum);
    os->set_nesterov(o.nesterov);
    os->set_beta_1(o.beta_1);
    os->set_beta_2(o.beta_2);
    os->set_epsilon(o.epsilon);
    os->set_amsgrad(o.amsgrad);
    os->set_initial_accumulator_value(o.initial_accumulator_value);
    os->set_rho(o.rho);
    os->set_centered(o.centered);
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

PYBIND11_MODULE(_strata, m) {
  m.doc() = "Strata's C++ SDK for the strata Python package";

  py::class_<sdk::Dataset>(m, "Dataset")
      .def("take", &sdk::Dataset::Take)
      .def_property_readonly("in_memory", &sdk::Dataset::in_memory)
      .def("__repr__", &sdk::Dataset::DebugString);
  m.def("dataset_from_arrays", &FromArrays, py::arg("x"), py::arg("y"));
  m.def("dataset_idx", &sdk::datasets::Idx, py::arg("images"),
        py::arg("labels"), py::arg("scale") = 1.0);
  // The examples of an IDX pair as numpy arrays (float32 features scaled by
  // 1 / scale, int32 labels).
  m.def(
      "load_idx",
      [](const std::string& images, const std::string& labels, double scale) {
        absl::StatusOr<strata::Dataset> d;
        {
          py::gil_scoped_release release;
          d = strata::LoadIdx(images, labels, scale, 0);
        }
        strata::Dataset data = Value(std::move(d));
        py::array_t<float> x({data.size, data.features});
        std::copy(data.x.begin(), data.x.end(), x.mutable_data());
        py::array_t<int32_t> y(data.size);
        std::copy(data.labels.begin(), data.labels.end(), y.mutable_data());
        return py::make_tuple(x, y);
      },
      py::arg("images"), py::arg("labels"), py::arg("scale") = 1.0);

  py::class_<sdk::Strategy, std::shared_ptr<sdk::Strategy>>(m, "Strategy")
      .def_property_readonly("name", &sdk::Strategy::name)
      .def_property_readonly("num_replicas_in_sync",
                             &sdk::Strategy::num_replicas_in_sync);
  m.def("one_device_strategy", [] {
    return std::shared_ptr<sdk::Strategy>(
        std::make_shared<sdk::OneDeviceStrategy>());
  });
  m.def(
      "mirrored_strategy",
      [](int replicas) {
        return std::shared_ptr<sdk::Strategy>(
            Value(sdk::MirroredStrategy::Create(replicas)));
      },
      py::arg("replicas"));
  m.def("mirrored_on_all_gpus", [] {
    return std::shared_ptr<sdk::Strategy>(
        Value(sdk::MirroredStrategy::CreateOnAllGpus()));
  });
  m.def(
      "mirrored_on_devices",
      [](const std::vector<std::string>& devices) {
        return std::shared_ptr<sdk::Strategy>(
            Value(sdk::MirroredStrategy::CreateOnDevices(devices)));
      },
      py::arg("devices"));
  m.def(
      "parameter_server_strategy",
      [](int num_ps, int num_workers, const std::string& update,
         const std::string& bin_dir) {
        return std::shared_ptr<sdk::Strategy>(sdk::ParameterServerStrategy::Local(
            ClusterOptions(num_ps, num_workers, update, "ring", bin_dir)));
      },
      py::arg("num_ps"), py::arg("num_workers"), py::arg("update"),
      py::arg("bin_dir"));
  m.def(
      "central_storage_strategy",
      [](int num_ps, int num_workers, const std::string& bin_dir) {
        return std::shared_ptr<sdk::Strategy>(sdk::CentralStorageStrategy::Local(
            ClusterOptions(num_ps, num_workers, "async", "ring", bin_dir)));
      },
      py::arg("num_ps"), py::arg("num_workers"), py::arg("bin_dir"));
  m.def(
      "multi_worker_mirrored_strategy",
      [](int num_ps, int num_workers, const std::string& collective,
         const std::string& bin_dir) {
        return std::shared_ptr<sdk::Strategy>(
            sdk::MultiWorkerMirroredStrategy::Local(ClusterOptions(
                num_ps, num_workers, "async", collective, bin_dir)));
      },
      py::arg("num_ps"), py::arg("num_workers"), py::arg("collective"),
      py::arg("bin_dir"));

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

  py::class_<PyModel>(m, "Model")
      .def(py::init<const py::list&, const std::string&, uint64_t,
                    std::shared_ptr<sdk::Strategy>>(),
           py::arg("layers"), py::arg("name"), py::arg("seed"),
           py::arg("strategy"))
      .def("compile", &PyModel::Compile, py::arg("optimizer"),
           py::arg("loss"), py::arg("metrics"))
      .def("fit", &PyModel::Fit, py::arg("train"), py::arg("epochs"),
           py::arg("batch_size"), py::arg("validation"),
           py::arg("validation_freq"), py::arg("shuffle_seed"),
           py::arg("verbose"))
      .def("evaluate", &PyModel::Evaluate, py::arg("data"),
           py::arg("batch_size"))
      .def("predict", &PyModel::Predict, py::arg("x"), py::arg("batch_size"))
      .def("get_weights", &PyModel::GetWeights)
      .def("set_weights", &PyModel::SetWeights, py::arg("weights"))
      .def("weight_shapes", &PyModel::Shapes)
      .def("weight_names", &PyModel::WeightNames)
      .def("summary", &PyModel::Summary)
      .def_property_readonly("compiled", &PyModel::compiled)
      .def_property_readonly("num_features", &PyModel::num_features)
      .def_property_readonly("num_outputs", &PyModel::num_outputs)
      .def_property_readonly("strategy_name", &PyModel::strategy_name);
}
