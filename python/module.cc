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
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "python/binding_util.h"
#include "sdk/strata.h"
#include "model/graph.h"
#include "model/keras_format.h"
#include "nlohmann/json.hpp"
#include "worker/dataset.h"

namespace py = pybind11;
namespace sdk = strata::sdk;

namespace {

using strata::python::Check;
using strata::python::OptimizerFrom;
using strata::python::Raise;
using strata::python::Value;

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

using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// Rows of categorical ids (2-D: examples x ids, each >= 0) and 0/1 labels:
// a criteo-file dataset (sdk::datasets::FromIds). `bag`: all of a row's ids
// in one multi-hot column, else one column each.
sdk::Dataset FromIds(const IdArray& x, const IntArray& y, bool bag) {
  if (x.ndim() != 2) {
    Raise(absl::InvalidArgumentError("x must be 2-D (examples, ids)"));
  }
  if (y.ndim() != 1 || y.shape(0) != x.shape(0)) {
    Raise(absl::InvalidArgumentError(
        "y must be 1-D with one label per row of x"));
  }
  std::vector<int64_t> ids(x.data(), x.data() + x.size());
  std::vector<int32_t> labels(y.data(), y.data() + y.size());
  absl::StatusOr<sdk::Dataset> d;
  {
    py::gil_scoped_release release;
    d = sdk::datasets::FromIds(ids, x.shape(1), labels, bag);
  }
  return Value(std::move(d));
}

// An embedding over categorical columns 0..columns-1 (the model's only
// inputs): {"table", "columns", "output_dim", "combiner", "init_scale",
// "optimizer": {"type", "learning_rate", ...}}.
sdk::Embedding EmbeddingFrom(const py::dict& d) {
  std::vector<int64_t> columns(d["columns"].cast<int64_t>());
  for (size_t c = 0; c < columns.size(); ++c) columns[c] = static_cast<int64_t>(c);
  sdk::Embedding e(d["table"].cast<std::string>(), std::move(columns),
                   d["output_dim"].cast<int64_t>(),
                   d["combiner"].cast<std::string>());
  e.init_scale = d["init_scale"].cast<double>();
  const py::dict o = d["optimizer"].cast<py::dict>();
  sdk::TableOptimizer opt(o["type"].cast<std::string>());
  const auto set = [&](const char* key, std::optional<double>* field) {
    if (o.contains(key)) *field = o[key].cast<double>();
  };
  set("learning_rate", &opt.learning_rate);
  set("epsilon", &opt.epsilon);
  set("initial_accumulator_value", &opt.initial_accumulator_value);
  set("beta_1", &opt.beta_1);
  set("beta_2", &opt.beta_2);
  e.optimizer = opt;
  return e;
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

// What the runtime builds from a Keras model config (model.to_json()):
// {"inputs": [(name, shape)], "outputs": [shape], "layers": [{"name",
// "class_name", "output_shape", "weights": [(name, shape, trainable)]}]},
// shapes per example (no batch dimension). Raises InvalidArgumentError
// naming the layer and the argument the runtime refuses.
py::dict KerasGraphInfo(const std::string& config) {
  const nlohmann::json j =
      nlohmann::json::parse(config, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    Raise(absl::InvalidArgumentError("model config: not valid JSON"));
  }
  strata::model::GraphSpec spec =
      Value(strata::model::ParseKerasModel(j, "model"));
  strata::model::Graph graph =
      Value(strata::model::Graph::Build(spec, /*seed=*/0, "model"));
  py::list inputs;
  for (const strata::model::InputSpec& in : graph.inputs()) {
    inputs.append(py::make_tuple(in.name, in.shape));
  }
  py::list outputs;
  for (int i = 0; i < graph.num_outputs(); ++i) {
    outputs.append(graph.output_shape(i));
  }
  py::list layers;
  for (int i = 0; i < graph.num_layers(); ++i) {
    const strata::model::Layer& l = graph.layer(i);
    py::list weights;
    for (const strata::model::WeightDef& w : l.weights()) {
      weights.append(py::make_tuple(w.name, w.shape, w.trainable));
    }
    py::dict d;
    d["name"] = l.name();
    d["class_name"] = l.class_name();
    d["output_shape"] = l.output_shape();
    d["weights"] = weights;
    layers.append(d);
  }
  py::dict out;
  out["inputs"] = inputs;
  out["outputs"] = outputs;
  out["layers"] = layers;
  return out;
}

// A model and the strategy it was built under.
class PyModel {
 public:
  // `embedding` (None or EmbeddingFrom's dict): the model reads
  // categorical ids only, through that embedding, into `layers`.
  PyModel(const py::list& layers, const std::string& name, uint64_t seed,
          std::shared_ptr<sdk::Strategy> strategy, const py::object& embedding) {
    std::vector<sdk::Layer> ls;
    for (const py::handle& h : layers) ls.push_back(LayerFrom(h.cast<py::dict>()));
    sdk::ModelOptions options;
    options.name = name;
    options.seed = seed;
    auto scope = strategy->Scope();
    if (embedding.is_none()) {
      model_ = std::make_unique<sdk::Sequential>(std::move(ls), options);
      return;
    }
    sdk::Inputs inputs;
    inputs.dense = 0;
    inputs.categorical = 26;  // the criteo file's columns (FromIds)
    inputs.embeddings.push_back(EmbeddingFrom(embedding.cast<py::dict>()));
    model_ = std::make_unique<sdk::Sequential>(std::move(inputs),
                                               std::move(ls), options);
  }

  // A model from Keras's model config JSON (model.to_json()).
  PyModel(const std::string& keras_json, const std::string& name,
          uint64_t seed, std::shared_ptr<sdk::Strategy> strategy) {
    sdk::ModelOptions options;
    options.name = name;
    options.seed = seed;
    auto scope = strategy->Scope();
    model_ = std::make_unique<sdk::Sequential>(sdk::KerasModel{keras_json},
                                               options);
  }

  void Compile(const py::dict& optimizer, const std::string& loss,
               const std::vector<std::string>& metrics, bool from_logits,
               double delta) {
    sdk::Loss l(loss, from_logits);
    l.delta = delta;
    Check(model_->Compile(OptimizerFrom(optimizer), l, metrics));
  }

  // verbose 0: silent; otherwise a line per epoch, written to Python's
  // sys.stdout as it comes. `on_progress` (None or a callable) is called on
  // this thread, about every 50 ms while the Fit runs and once after it,
  // when the progress changed, with (epoch, epochs, step, steps, loss,
  // accuracy), and
  // `on_epoch` (None or a callable) with each epoch's dict (as returned) as
  // it ends; an exception either raises stops the Fit and propagates.
  py::list Fit(const sdk::Dataset& train, int epochs, int64_t batch_size,
               std::optional<sdk::Dataset> validation, int validation_freq,
               uint64_t shuffle_seed, int verbose,
               const py::object& on_progress, const py::object& on_epoch) {
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
    sdk::FitProgress progress;
    if (!on_progress.is_none()) options.progress = &progress;
    // Epochs ended on the Fit's thread, handed to `on_epoch` on this one.
    absl::Mutex ended_mu;
    std::vector<sdk::EpochResult> ended;
    if (!on_epoch.is_none()) {
      options.on_epoch_end = [&](const sdk::EpochResult& e) {
        absl::MutexLock lock(&ended_mu);
        ended.push_back(e);
      };
    }
    const auto drain = [&] {
      std::vector<sdk::EpochResult> batch;
      {
        absl::MutexLock lock(&ended_mu);
        batch.swap(ended);
      }
      for (const sdk::EpochResult& e : batch) on_epoch(EpochDict(e));
    };
    // The progress is read before the ended epochs are drained: an epoch's
    // end is queued before the progress moves on, so an epoch is never
    // shown as begun before the one before it is shown as ended.
    int shown_epoch = -1;
    int64_t shown_step = -1;
    const auto poll = [&] {
      const int epoch = progress.epoch;
      const int64_t step = progress.step;
      const int epochs_total = progress.epochs;
      const int64_t steps = progress.steps;
      const double loss = progress.loss;
      const double accuracy = progress.accuracy;
      drain();
      if (options.progress == nullptr || epoch == 0 ||
          (epoch == shown_epoch && step == shown_step)) {
        return;
      }
      shown_epoch = epoch;
      shown_step = step;
      on_progress(epoch, epochs_total, step, steps, loss, accuracy);
    };
    // Notified when the Fit returns, so that the wait ends at once (a
    // local strategy's fit runs one Fit per epoch).
    absl::Notification done;
    std::optional<absl::StatusOr<sdk::History>> result;
    std::optional<py::error_already_set> raised;
    {
      py::gil_scoped_release release;
      std::thread fit([&] {
        result.emplace(model_->Fit(train, options));
        done.Notify();
      });
      while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
        py::gil_scoped_acquire acquire;
        if (PyErr_CheckSignals() != 0) {
          // Keep the KeyboardInterrupt; stop the Fit and wait for it.
          raised.emplace();
          stop = true;
          break;
        }
        try {
          poll();
        } catch (py::error_already_set& e) {
          raised.emplace(std::move(e));
          stop = true;
          break;
        }
      }
      fit.join();
    }
    if (raised.has_value()) throw *std::move(raised);
    poll();  // where it ended
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
    std::vector<int32_t> labels(static_cast<size_t>(x.shape(0)), 0);
    return PredictDataset(sdk::datasets::FromArrays(std::move(rows),
                                                    std::move(labels), features),
                          batch_size);
  }

  // Predict over a dataset (a model with an embedding reads its ids so).
  py::array_t<float> PredictDataset(const sdk::Dataset& data,
                                    int64_t batch_size) const {
    absl::StatusOr<std::vector<float>> out;
    {
      py::gil_scoped_release release;
      out = model_->Predict(data, batch_size);
    }
    std::vector<float> values = Value(std::move(out));
    const int64_t outputs = model_->num_outputs();
    const int64_t n = outputs > 0 ? static_cast<int64_t>(values.size()) / outputs : 0;
    py::array_t<float> result({n, outputs});
    std::copy(values.begin(), values.end(), result.mutable_data());
    return result;
  }

  std::vector<std::pair<std::string, int64_t>> TableRows() const {
    return model_->TableRows();
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

  // Each weight's shape (a Dense kernel [inputs, units], a bias [units]).
  std::vector<std::vector<int64_t>> Shapes() const {
    return Value(model_->WeightShapes());
  }

  // The non-trainable state (moving statistics): names, shapes, values.
  std::vector<std::string> StateNames() const {
    return Value(model_->StateNames());
  }
  std::vector<std::vector<int64_t>> StateShapes() const {
    return Value(model_->StateShapes());
  }
  std::vector<py::array_t<float>> GetState() const {
    std::vector<std::vector<float>> v = Value(model_->GetState());
    std::vector<std::vector<int64_t>> shapes = StateShapes();
    std::vector<py::array_t<float>> out;
    for (size_t i = 0; i < v.size(); ++i) {
      py::array_t<float> a(shapes[i]);
      std::copy(v[i].begin(), v[i].end(), a.mutable_data());
      out.push_back(std::move(a));
    }
    return out;
  }
  void SetState(const std::vector<FloatArray>& state) {
    std::vector<std::vector<float>> v;
    for (const FloatArray& a : state) v.emplace_back(a.data(), a.data() + a.size());
    Check(model_->SetState(std::move(v)));
  }

  std::vector<std::string> WeightNames() const {
    return Value(model_->WeightNames());
  }
  std::string Summary() const { return Value(model_->Summary()); }
  void SetLearningRate(double lr) { Check(model_->SetLearningRate(lr)); }

  // (iterations, slot names, [weight][slot] float32 arrays).
  py::tuple GetOptimizerState() const {
    sdk::OptimizerState st = Value(model_->GetOptimizerState());
    py::list weights;
    for (const auto& per_weight : st.slots) {
      py::list slots;
      for (const std::vector<float>& slot : per_weight) {
        py::array_t<float> a(static_cast<py::ssize_t>(slot.size()));
        std::copy(slot.begin(), slot.end(), a.mutable_data());
        slots.append(a);
      }
      weights.append(slots);
    }
    return py::make_tuple(st.iterations, st.slot_names, weights);
  }
  void SetOptimizerState(int64_t iterations,
                         const std::vector<std::string>& slot_names,
                         const std::vector<std::vector<FloatArray>>& slots) {
    sdk::OptimizerState st;
    st.iterations = iterations;
    st.slot_names = slot_names;
    for (const auto& per_weight : slots) {
      st.slots.emplace_back();
      for (const FloatArray& a : per_weight) {
        st.slots.back().emplace_back(a.data(), a.data() + a.size());
      }
    }
    Check(model_->SetOptimizerState(st));
  }
  double learning_rate() const { return model_->learning_rate(); }
  bool compiled() const { return model_->compiled(); }
  int64_t num_features() const { return model_->num_features(); }
  int64_t num_outputs() const { return model_->num_outputs(); }
  std::string strategy_name() const { return model_->strategy().name(); }

 private:
  std::unique_ptr<sdk::Sequential> model_;
};

// A local cluster's options, or a running cluster's where `coordinator`
// (its host:port) is not empty.
sdk::LocalClusterOptions ClusterOptions(int num_ps, int num_workers,
                                        const std::string& update,
                                        const std::string& collective,
                                        const std::string& bin_dir,
                                        const std::string& coordinator,
                                        const std::string& export_dir) {
  sdk::LocalClusterOptions o;
  o.num_ps = num_ps;
  o.num_workers = num_workers;
  o.update = update;
  o.collective = collective;
  o.bin_dir = bin_dir;
  o.coordinator = coordinator;
  o.export_dir = export_dir;
  return o;
}

}  // namespace

PYBIND11_MODULE(_strata, m) {
  m.doc() = "Strata's C++ SDK for the strata Python package";

  py::class_<sdk::Dataset>(m, "Dataset")
      .def("take", &sdk::Dataset::Take)
      .def_property_readonly("in_memory", &sdk::Dataset::in_memory)
      .def("__repr__", &sdk::Dataset::DebugString);
  m.def("dataset_from_arrays", &FromArrays, py::arg("x"), py::arg("y"));
  m.def("dataset_from_ids", &FromIds, py::arg("x"), py::arg("y"),
        py::arg("bag"));
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
         const std::string& bin_dir, const std::string& coordinator,
         const std::string& strategy_json) {
        sdk::LocalClusterOptions o = ClusterOptions(
            num_ps, num_workers, update, "ring", bin_dir, coordinator, "");
        o.strategy_json = strategy_json;
        return std::shared_ptr<sdk::Strategy>(
            sdk::ParameterServerStrategy::Local(std::move(o)));
      },
      py::arg("num_ps"), py::arg("num_workers"), py::arg("update"),
      py::arg("bin_dir"), py::arg("coordinator") = "",
      py::arg("strategy_json") = "");
  m.def(
      "central_storage_strategy",
      [](int num_ps, int num_workers, const std::string& bin_dir,
         const std::string& coordinator) {
        return std::shared_ptr<sdk::Strategy>(
            sdk::CentralStorageStrategy::Local(
                ClusterOptions(num_ps, num_workers, "async", "ring", bin_dir,
                               coordinator, "")));
      },
      py::arg("num_ps"), py::arg("num_workers"), py::arg("bin_dir"),
      py::arg("coordinator") = "");
  m.def(
      "multi_worker_mirrored_strategy",
      [](int num_ps, int num_workers, const std::string& collective,
         const std::string& bin_dir, const std::string& coordinator,
         const std::string& export_dir, const std::string& strategy_json) {
        sdk::LocalClusterOptions o =
            ClusterOptions(num_ps, num_workers, "async", collective, bin_dir,
                           coordinator, export_dir);
        o.strategy_json = strategy_json;
        return std::shared_ptr<sdk::Strategy>(
            sdk::MultiWorkerMirroredStrategy::Local(std::move(o)));
      },
      py::arg("num_ps"), py::arg("num_workers"), py::arg("collective"),
      py::arg("bin_dir"), py::arg("coordinator") = "",
      py::arg("export_dir") = "", py::arg("strategy_json") = "");

  strata::python::BindPsClient(m);
  m.def("keras_graph_info", &KerasGraphInfo, py::arg("config"));

  py::class_<PyModel>(m, "Model")
      .def(py::init<const py::list&, const std::string&, uint64_t,
                    std::shared_ptr<sdk::Strategy>, const py::object&>(),
           py::arg("layers"), py::arg("name"), py::arg("seed"),
           py::arg("strategy"), py::arg("embedding") = py::none())
      .def(py::init<const std::string&, const std::string&, uint64_t,
                    std::shared_ptr<sdk::Strategy>>(),
           py::arg("keras_json"), py::arg("name"), py::arg("seed"),
           py::arg("strategy"))
      .def("compile", &PyModel::Compile, py::arg("optimizer"),
           py::arg("loss"), py::arg("metrics"), py::arg("from_logits") = false,
           py::arg("delta") = 1.0)
      .def("fit", &PyModel::Fit, py::arg("train"), py::arg("epochs"),
           py::arg("batch_size"), py::arg("validation"),
           py::arg("validation_freq"), py::arg("shuffle_seed"),
           py::arg("verbose"), py::arg("on_progress") = py::none(),
           py::arg("on_epoch") = py::none())
      .def("evaluate", &PyModel::Evaluate, py::arg("data"),
           py::arg("batch_size"))
      .def("predict", &PyModel::Predict, py::arg("x"), py::arg("batch_size"))
      .def("predict_dataset", &PyModel::PredictDataset, py::arg("data"),
           py::arg("batch_size"))
      .def("table_rows", &PyModel::TableRows)
      .def("get_weights", &PyModel::GetWeights)
      .def("set_weights", &PyModel::SetWeights, py::arg("weights"))
      .def("weight_shapes", &PyModel::Shapes)
      .def("weight_names", &PyModel::WeightNames)
      .def("state_names", &PyModel::StateNames)
      .def("state_shapes", &PyModel::StateShapes)
      .def("get_state", &PyModel::GetState)
      .def("set_state", &PyModel::SetState, py::arg("state"))
      .def("summary", &PyModel::Summary)
      .def("get_optimizer_state", &PyModel::GetOptimizerState)
      .def("set_optimizer_state", &PyModel::SetOptimizerState,
           py::arg("iterations"), py::arg("slot_names"), py::arg("slots"))
      .def("set_learning_rate", &PyModel::SetLearningRate,
           py::arg("learning_rate"))
      .def_property_readonly("learning_rate", &PyModel::learning_rate)
      .def_property_readonly("compiled", &PyModel::compiled)
      .def_property_readonly("num_features", &PyModel::num_features)
      .def_property_readonly("num_outputs", &PyModel::num_outputs)
      .def_property_readonly("strategy_name", &PyModel::strategy_name);
}
