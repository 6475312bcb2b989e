#include "model/graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/layers.h"

namespace strata {
namespace model {
namespace {

std::string RefText(const TensorRef& r) {
  return absl::StrCat("['", r.layer, "', ", r.node_index, ", ",
                      r.tensor_index, "]");
}

void AddInto(float* dst, const float* src, int64_t n) {
  Eigen::Map<Eigen::ArrayXf>(dst, n) += Eigen::Map<const Eigen::ArrayXf>(src, n);
}

}  // namespace

absl::StatusOr<Graph> Graph::Build(const GraphSpec& spec, uint64_t seed,
                                   const std::string& path) {
  Graph g;
  auto error = [&](const std::string& where, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, where, where.empty() && path.empty() ? "" : ": ",
                     what));
  };
  if (spec.inputs.empty()) return error("", "the model has no input");
  if (spec.layers.empty()) return error("", "the model has no layers");
  std::map<std::string, int> input_index;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const InputSpec& in = spec.inputs[i];
    if (in.shape.empty()) {
      return error("", absl::StrCat("input '", in.name,
                                    "' has no shape (give its shape without "
                                    "the batch dimension)"));
    }
    for (int64_t d : in.shape) {
      if (d < 1 || d > (int64_t{1} << 31)) {
        return error("", absl::StrCat("input '", in.name, "' shape ",
                                      ShapeString(in.shape),
                                      ": every dimension must be known and "
                                      ">= 1"));
      }
    }
    if (!input_index.emplace(in.name, static_cast<int>(i)).second) {
      return error("", absl::StrCat("duplicate input name '", in.name, "'"));
    }
    g.inputs_.push_back(in);
    g.input_offsets_.push_back(g.num_features_);
    g.num_features_ += NumElements(in.shape);
    g.tensor_shapes_.push_back(in.shape);
  }
  // Layers.
  std::map<std::string, int> layer_index;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerConfig& lc = spec.layers[i];
    const std::string lpath = absl::StrCat(path, ".layers[", i, "]");
    bool valid_name = !lc.name.empty() && lc.name.size() <= 128;
    for (char c : lc.name) {
      valid_name = valid_name && ((c >= 'a' && c <= 'z') ||
                                  (c >= 'A' && c <= 'Z') ||
                                  (c >= '0' && c <= '9') || c == '_' ||
                                  c == '-' || c == '.');
    }
    if (!valid_name) {
      return absl::InvalidArgumentError(absl::StrCat(
          lpath, ": layer name '", lc.name,
          "' must be 1 to 128 letters, digits, '_', '-' or '.' (it names "
          "the layer's variables)"));
    }
    if (input_index.count(lc.name) > 0 ||
        !layer_index.emplace(lc.name, static_cast<int>(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          lpath, ": duplicate layer name '", lc.name, "'"));
    }
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer,
                            CreateLayer(lc, lpath));
    layer->set_name(lc.name);
    g.layers_.push_back(std::move(layer));
  }
  // Nodes: (layer, call) pairs, and the tensors they read.
  struct PendingNode {
    int layer;
    std::vector<TensorRef> refs;
  };
  std::vector<PendingNode> pending;
  std::map<std::pair<std::string, int>, int> node_of;  // (layer, call)
  if (spec.sequential) {
    if (spec.inputs.size() != 1) {
      return error("", "a Sequential model has exactly one input");
    }
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      PendingNode p{static_cast<int>(i), {}};
      p.refs.push_back(i == 0 ? TensorRef{spec.inputs[0].name, 0, 0}
                              : TensorRef{spec.layers[i - 1].name, 0, 0});
      node_of[{spec.layers[i].name, 0}] = static_cast<int>(pending.size());
      pending.push_back(std::move(p));
    }
  } else {
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      const LayerConfig& lc = spec.layers[i];
      if (lc.calls.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ".layers[", i, "]: layer '", lc.name,
            "' has no inbound_nodes (it is never called)"));
      }
      for (size_t c = 0; c < lc.calls.size(); ++c) {
        if (lc.calls[c].empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ".layers[", i, "]: layer '", lc.name, "' call ", c,
              " has no input tensors"));
        }
        node_of[{lc.name, static_cast<int>(c)}] =
            static_cast<int>(pending.size());
        pending.push_back({static_cast<int>(i), lc.calls[c]});
      }
    }
  }
  const int num_inputs = static_cast<int>(spec.inputs.size());
  // Resolves a reference to a tensor id: inputs are 0..num_inputs-1, node k
  // is num_inputs + k (before sorting).
  auto resolve = [&](const TensorRef& r, const std::string& where,
                     int* tensor) -> absl::Status {
    if (r.tensor_index != 0) {
      return error(where, absl::StrCat("tensor ", RefText(r),
                                       ": every layer has one output"));
    }
    auto in = input_index.find(r.layer);
    if (in != input_index.end()) {
      *tensor = in->second;
      return absl::OkStatus();
    }
    auto n = node_of.find({r.layer, r.node_index});
    if (n == node_of.end()) {
      return error(where, absl::StrCat("tensor ", RefText(r),
                                       " names no input and no call of a "
                                       "layer of this model"));
    }
    *tensor = num_inputs + n->second;
    return absl::OkStatus();
  };
  const int num_nodes = static_cast<int>(pending.size());
  std::vector<std::vector<int>> node_inputs(num_nodes);
  for (int k = 0; k < num_nodes; ++k) {
    const std::string where =
        absl::StrCat(".layers[", pending[k].layer, "] ('",
                     spec.layers[pending[k].layer].name, "') inbound_nodes");
    for (const TensorRef& r : pending[k].refs) {
      int t = 0;
      STRATA_RETURN_IF_ERROR(resolve(r, where, &t));
      node_inputs[k].push_back(t);
    }
  }
  std::vector<int> outputs;
  if (spec.sequential) {
    outputs.push_back(num_inputs + num_nodes - 1);
  } else {
    if (spec.outputs.empty()) return error("", "the model has no outputs");
    for (const TensorRef& r : spec.outputs) {
      int t = 0;
      STRATA_RETURN_IF_ERROR(resolve(r, ".output_layers", &t));
      if (t < num_inputs) {
        return error(".output_layers",
                     absl::StrCat("output ", RefText(r),
                                  " is an input; outputs are layer outputs"));
      }
      outputs.push_back(t);
    }
  }
  // Topological order (Kahn's algorithm, stable by node index).
  std::vector<int> indegree(num_nodes, 0);
  std::vector<std::vector<int>> users(num_nodes);
  for (int k = 0; k < num_nodes; ++k) {
    for (int t : node_inputs[k]) {
      if (t >= num_inputs) {
        ++indegree[k];
        users[t - num_inputs].push_back(k);
      }
    }
  }
  std::vector<int> order;
  std::set<int> ready;
  for (int k = 0; k < num_nodes; ++k) {
    if (indegree[k] == 0) ready.insert(k);
  }
  while (!ready.empty()) {
    const int k = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(k);
    for (int u : users[k]) {
      if (--indegree[u] == 0) ready.insert(u);
    }
  }
  if (static_cast<int>(order.size()) != num_nodes) {
    for (int k = 0; k < num_nodes; ++k) {
      if (indegree[k] > 0) {
        return error(absl::StrCat(".layers[", pending[k].layer, "]"),
                     absl::StrCat("layer '", spec.layers[pending[k].layer].name,
                                  "' is part of a cycle: the model must be "
                                  "a directed acyclic graph"));
      }
    }
  }
  // Tensor ids in topological order: node order[j] outputs tensor
  // num_inputs + j.
  std::vector<int> new_id(num_inputs + num_nodes);
  for (int i = 0; i < num_inputs; ++i) new_id[i] = i;
  for (int j = 0; j < num_nodes; ++j) new_id[num_inputs + order[j]] = num_inputs + j;
  std::vector<bool> layer_built(g.layers_.size(), false);
  g.tensor_shapes_.resize(num_inputs + num_nodes);
  for (int j = 0; j < num_nodes; ++j) {
    const int k = order[j];
    Node node;
    node.layer = pending[k].layer;
    for (int t : node_inputs[k]) node.inputs.push_back(new_id[t]);
    node.output = num_inputs + j;
    std::vector<Shape> shapes;
    for (int t : node.inputs) shapes.push_back(g.tensor_shapes_[t]);
    Layer& layer = *g.layers_[node.layer];
    const std::string lpath = absl::StrCat(path, ".layers[", node.layer, "]");
    if (!layer_built[node.layer]) {
      absl::Status built = layer.Build(shapes);
      if (!built.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(lpath, ": ", built.message()));
      }
      layer_built[node.layer] = true;
      node.first_call = true;
    } else {
      node.first_call = false;
      if (shapes != layer.input_shapes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            lpath, ": layer '", layer.name(),
            "' is called again on inputs of other shapes (a shared layer "
            "takes the shapes of its first call)"));
      }
    }
    g.tensor_shapes_[node.output] = layer.output_shape();
    g.nodes_.push_back(std::move(node));
  }
  for (int t : outputs) g.outputs_.push_back(new_id[t]);
  for (int t : g.outputs_) g.output_nodes_.push_back(t - num_inputs);
  g.tensor_sizes_.clear();
  for (const Shape& s : g.tensor_shapes_) g.tensor_sizes_.push_back(NumElements(s));
  g.tensor_consumers_.assign(g.tensor_shapes_.size(), 0);
  for (const Node& n : g.nodes_) {
    for (int t : n.inputs) ++g.tensor_consumers_[t];
  }
  // Variables in layer order (Keras's weights order).
  g.layer_weights_.resize(g.layers_.size());
  for (size_t i = 0; i < g.layers_.size(); ++i) {
    const Layer& layer = *g.layers_[i];
    for (const WeightDef& w : layer.weights()) {
      GraphVariable v;
      v.name = absl::StrCat(layer.name(), "/", w.name);
      v.shape = w.shape;
      v.init = w.init;
      if (!w.seed_set) v.init.seed = seed + i;
      v.l1 = w.l1;
      v.l2 = w.l2;
      WeightSlot slot;
      slot.trainable = w.trainable;
      if (w.trainable) {
        slot.index = static_cast<int>(g.variables_.size());
        g.variables_.push_back(std::move(v));
      } else {
        slot.index = static_cast<int>(g.states_.size());
        g.states_.push_back(std::move(v));
      }
      g.layer_weights_[i].push_back(slot);
    }
  }
  return g;
}

const Shape& Graph::output_shape(int i) const {
  return tensor_shapes_[outputs_[i]];
}

const Layer& Graph::output_layer(int i) const {
  return *layers_[nodes_[output_nodes_[i]].layer];
}

int64_t Graph::num_parameters() const {
  int64_t n = 0;
  for (const GraphVariable& v : variables_) n += NumElements(v.shape);
  return n;
}

int64_t Graph::num_state_values() const {
  int64_t n = 0;
  for (const GraphVariable& v : states_) n += NumElements(v.shape);
  return n;
}

int64_t Graph::ActivationFloatsPerExample() const {
  int64_t n = 0;
  for (int64_t s : tensor_sizes_) n += 2 * s;
  for (const Node& node : nodes_) {
    n += layers_[node.layer]->ScratchPerExample();
  }
  return n;
}

bool Graph::HasLayerClass(const std::string& class_name) const {
  for (const auto& l : layers_) {
    if (l->class_name() == class_name) return true;
  }
  return false;
}

void Graph::NodeWeights(const Node& node,
                        absl::Span<const absl::Span<const float>> params,
                        absl::Span<const absl::Span<const float>> states,
                        std::vector<absl::Span<const float>>* out) const {
  out->clear();
  for (const WeightSlot& s : layer_weights_[node.layer]) {
    out->push_back(s.trainable ? params[s.index] : states[s.index]);
  }
}

void Graph::Prepare(GraphWorkspace* ws, int64_t batch) const {
  const size_t n = tensor_shapes_.size();
  ws->values_.resize(n);
  ws->value_ptrs_.resize(n);
  ws->grads_.resize(n);
  ws->grad_set_.assign(n, 0);
  ws->scratch_.resize(nodes_.size());
  ws->forward_args_.resize(nodes_.size());
  ws->backward_args_.resize(nodes_.size());
  (void)batch;
}

absl::Status Graph::Forward(absl::Span<const absl::Span<const float>> params,
                            absl::Span<const absl::Span<const float>> states,
                            const float* x, int64_t batch, bool training,
                            uint64_t seed, GraphWorkspace* ws,
                            std::vector<std::vector<float>>* state_out) const {
  Prepare(ws, batch);
  const int num_inputs = static_cast<int>(inputs_.size());
  if (num_inputs == 1) {
    ws->value_ptrs_[0] = x;
  } else {
    for (int i = 0; i < num_inputs; ++i) {
      const int64_t size = tensor_sizes_[i];
      float* dst = ws->values_[i].Resize(static_cast<size_t>(batch * size));
      for (int64_t b = 0; b < batch; ++b) {
        std::memcpy(dst + b * size, x + b * num_features_ + input_offsets_[i],
                    sizeof(float) * size);
      }
      ws->value_ptrs_[i] = dst;
    }
  }
  if (training && state_out != nullptr) {
    state_out->resize(states_.size());
    for (size_t i = 0; i < states_.size(); ++i) {
      (*state_out)[i].assign(states[i].begin(), states[i].end());
    }
  }
  for (size_t k = 0; k < nodes_.size(); ++k) {
    const Node& node = nodes_[k];
    const Layer& layer = *layers_[node.layer];
    ForwardArgs& a = ws->forward_args_[k];
    a.batch = batch;
    a.training = training;
    a.seed = seed;
    a.layer_index = static_cast<uint64_t>(node.layer);
    a.inputs.clear();
    for (int t : node.inputs) a.inputs.push_back(ws->value_ptrs_[t]);
    NodeWeights(node, params, states, &a.weights);
    a.state_out.clear();
    for (const WeightSlot& s : layer_weights_[node.layer]) {
      a.state_out.push_back(!s.trainable && training && state_out != nullptr
                                ? (*state_out)[s.index].data()
                                : nullptr);
    }
    STRATA_RETURN_IF_ERROR(layer.CheckInputs(a));
    a.output = ws->values_[node.output].Resize(
        static_cast<size_t>(batch * tensor_sizes_[node.output]));
    a.scratch = &ws->scratch_[k];
    layer.Forward(a);
    ws->value_ptrs_[node.output] = a.output;
  }
  return absl::OkStatus();
}

const float* Graph::Output(const GraphWorkspace& ws, int i) const {
  return ws.value_ptrs_[outputs_[i]];
}

void Graph::Backward(absl::Span<const absl::Span<const float>> params,
                     absl::Span<const absl::Span<const float>> states,
                     const float* x, int64_t batch, uint64_t seed,
                     const std::vector<const float*>& output_grads,
                     const std::vector<bool>& preactivation,
                     GraphWorkspace* ws,
                     std::vector<std::vector<float>>* grads,
                     float* input_grad) const {
  const int num_inputs = static_cast<int>(inputs_.size());
  const size_t num_tensors = tensor_shapes_.size();
  grads->resize(variables_.size());
  for (size_t i = 0; i < variables_.size(); ++i) {
    (*grads)[i].resize(static_cast<size_t>(NumElements(variables_[i].shape)));
  }
  // Which tensors need a gradient: inputs when input_grad is wanted, and
  // every node output that leads to a trainable weight or such an input.
  std::vector<char>& needs = ws->needs_;
  needs.assign(num_tensors, 0);
  for (int i = 0; i < num_inputs; ++i) needs[i] = input_grad != nullptr;
  for (const Node& node : nodes_) {
    bool n = false;
    for (const WeightSlot& s : layer_weights_[node.layer]) n = n || s.trainable;
    for (int t : node.inputs) n = n || needs[t];
    needs[node.output] = n;
  }
  ws->grad_set_.assign(num_tensors, 0);
  const int num_out = static_cast<int>(outputs_.size());
  std::vector<char>& fused = ws->fused_;
  fused.assign(num_tensors, 0);
  for (int i = 0; i < num_out; ++i) {
    if (output_grads[i] == nullptr) continue;
    const int t = outputs_[i];
    const int64_t n = batch * tensor_sizes_[t];
    float* g = ws->grads_[t].Resize(static_cast<size_t>(n));
    if (ws->grad_set_[t]) {
      AddInto(g, output_grads[i], n);
    } else {
      std::memcpy(g, output_grads[i], sizeof(float) * n);
      ws->grad_set_[t] = 1;
    }
    if (i < static_cast<int>(preactivation.size()) && preactivation[i]) {
      fused[t] = 1;
    }
  }
  std::vector<char>& written = ws->written_;
  written.assign(variables_.size(), 0);
  std::vector<AlignedFloats>& temps = ws->temps_;
  for (int k = static_cast<int>(nodes_.size()) - 1; k >= 0; --k) {
    const Node& node = nodes_[k];
    const int t = node.output;
    if (!ws->grad_set_[t] || !needs[t]) continue;
    const Layer& layer = *layers_[node.layer];
    BackwardArgs& a = ws->backward_args_[k];
    a.batch = batch;
    a.training = true;
    a.seed = seed;
    a.layer_index = static_cast<uint64_t>(node.layer);
    a.inputs.clear();
    for (int u : node.inputs) a.inputs.push_back(ws->value_ptrs_[u]);
    NodeWeights(node, params, states, &a.weights);
    a.input_grads.clear();
    a.weight_grads.clear();
    a.output = ws->value_ptrs_[t];
    a.output_grad = ws->grads_[t].data();
    a.grad_is_preactivation = fused[t] != 0;
    // Input gradients: straight into the tensor's buffer when it is the
    // first to arrive, else into a temporary added afterwards.
    const size_t num_in = node.inputs.size();
    if (temps.size() < num_in + layer_weights_[node.layer].size()) {
      temps.resize(num_in + layer_weights_[node.layer].size());
    }
    auto& adds = ws->input_adds_;  // (tensor, temp)
    adds.clear();
    for (size_t j = 0; j < num_in; ++j) {
      const int u = node.inputs[j];
      if (!needs[u]) {
        a.input_grads.push_back(nullptr);
        continue;
      }
      const size_t n = static_cast<size_t>(batch * tensor_sizes_[u]);
      if (!ws->grad_set_[u]) {
        a.input_grads.push_back(ws->grads_[u].Resize(n));
        ws->grad_set_[u] = 1;
      } else {
        float* tmp = temps[j].Resize(n);
        a.input_grads.push_back(tmp);
        adds.emplace_back(u, tmp);
      }
    }
    auto& weight_adds = ws->weight_adds_;  // (variable, temp)
    weight_adds.clear();
    const auto& slots = layer_weights_[node.layer];
    for (size_t j = 0; j < slots.size(); ++j) {
      if (!slots[j].trainable) {
        a.weight_grads.push_back(nullptr);
        continue;
      }
      const int v = slots[j].index;
      if (!written[v]) {
        a.weight_grads.push_back((*grads)[v].data());
        written[v] = 1;
      } else {
        float* tmp = temps[num_in + j].Resize((*grads)[v].size());
        a.weight_grads.push_back(tmp);
        weight_adds.emplace_back(v, tmp);
      }
    }
    a.scratch = &ws->scratch_[k];
    layer.Backward(a);
    for (const auto& [u, tmp] : adds) {
      AddInto(ws->grads_[u].data(), tmp, batch * tensor_sizes_[u]);
    }
    for (const auto& [v, tmp] : weight_adds) {
      AddInto((*grads)[v].data(), tmp,
              static_cast<int64_t>((*grads)[v].size()));
    }
  }
  // Weights no gradient reached (a branch cut off from the outputs).
  for (size_t v = 0; v < variables_.size(); ++v) {
    if (!written[v]) std::fill((*grads)[v].begin(), (*grads)[v].end(), 0.0f);
  }
  if (input_grad != nullptr) {
    for (int i = 0; i < num_inputs; ++i) {
      const int64_t size = tensor_sizes_[i];
      const float* g = ws->grad_set_[i] ? ws->grads_[i].data() : nullptr;
      for (int64_t b = 0; b < batch; ++b) {
        float* dst = input_grad + b * num_features_ + input_offsets_[i];
        if (g == nullptr) {
          std::fill(dst, dst + size, 0.0f);
        } else {
          std::memcpy(dst, g + b * size, sizeof(float) * size);
        }
      }
    }
  }
}

double Graph::Regularization(absl::Span<const absl::Span<const float>> params,
                             std::vector<std::vector<float>>* grads) const {
  double loss = 0;
  for (size_t v = 0; v < variables_.size(); ++v) {
    const GraphVariable& var = variables_[v];
    if (var.l1 == 0 && var.l2 == 0) continue;
    const float l1 = static_cast<float>(var.l1);
    const float l2 = static_cast<float>(var.l2);
    const absl::Span<const float> w = params[v];
    double sum1 = 0;
    double sum2 = 0;
    for (float x : w) {
      sum1 += std::fabs(x);
      sum2 += double{x} * x;
    }
    loss += var.l1 * sum1 + var.l2 * sum2;
    if (grads == nullptr) continue;
    float* g = (*grads)[v].data();
    for (size_t i = 0; i < w.size(); ++i) {
      const float sign = w[i] > 0 ? 1.0f : (w[i] < 0 ? -1.0f : 0.0f);
      g[i] += l1 * sign + 2.0f * l2 * w[i];
    }
  }
  return loss;
}

}  // namespace model
}  // namespace strata
