"""strata.keras.optimizers: Keras's optimizers, names and defaults. The
updates run in C++ (on the PS tasks under the cluster strategies)."""
import numbers


def _rate(name, arg, value, low=0.0, low_open=False, high=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError("%s: `%s` must be a number, got %r" % (name, arg, value))
    value = float(value)
    bad = value <= low if low_open else value < low
    if bad or (high is not None and value >= high):
        raise ValueError("%s: `%s` must be %s %g%s, got %r"
                         % (name, arg, ">" if low_open else ">=", low,
                            "" if high is None else " and < %g" % high, value))
    return value


class LearningRate(float):
    """An optimizer's learning rate as Keras shows it (a variable):
    float(lr), lr.numpy(), lr.assign(value)."""

    def __new__(cls, value, optimizer):
        obj = super().__new__(cls, value)
        obj._optimizer = optimizer
        return obj

    def numpy(self):
        import numpy as np
        return np.float32(self)

    def assign(self, value):
        self._optimizer.learning_rate = value
        return self._optimizer.learning_rate


class Optimizer:
    _type = None

    def __init__(self, name, learning_rate, **kwargs):
        unknown = set(kwargs) - {"clipnorm", "clipvalue", "global_clipnorm",
                                 "use_ema", "weight_decay", "jit_compile"}
        if unknown:
            raise TypeError("%s: unexpected keyword argument(s) %s"
                            % (name, ", ".join(sorted(unknown))))
        for arg in ("clipnorm", "clipvalue", "global_clipnorm", "weight_decay"):
            if kwargs.get(arg) is not None:
                raise ValueError("%s: `%s` is not supported" % (name, arg))
        self.name = name
        self._models = []  # the compiled native models this optimizer trains
        self._lr = _rate(name, "learning_rate", learning_rate, low_open=True)

    @property
    def learning_rate(self):
        """The learning rate: a float with .numpy() and .assign(value), as
        Keras's variable. Setting it (here or by assign) takes effect from the
        next epoch of the models compiled with this optimizer."""
        return LearningRate(self._lr, self)

    @learning_rate.setter
    def learning_rate(self, value):
        if callable(value) and not isinstance(value, (int, float)):
            raise ValueError("%s: learning rate schedules are not supported; use "
                             "callbacks.LearningRateScheduler" % self.name)
        lr = _rate(self.name, "learning_rate", float(value), low_open=True)
        for native in self._models:
            native.set_learning_rate(lr)
        self._lr = lr

    lr = learning_rate

    def _bind(self, native):
        self._models = [native]

    def apply_gradients(self, grads_and_vars, name=None,
                        skip_gradients_aggregation=False, **kwargs):
        """Applies the gradients a GradientTape gave for a model's
        trainable variables: one optimizer step in the runtime on the
        recorded batch (under several replicas, on all of theirs once each
        has applied)."""
        from .. import tape as _tape
        return _tape.apply_gradients(self, grads_and_vars)

    @property
    def iterations(self):
        native = self._models[0] if self._models else None
        if native is None:
            return 0
        try:
            return native.get_optimizer_state()[0]
        except Exception:  # noqa: BLE001 - trained on a cluster
            return 0

    def _spec(self):
        spec = {"type": self._type, "learning_rate": self._lr}
        spec.update({k: v for k, v in vars(self).items()
                     if k != "name" and not k.startswith("_")})
        return spec

    def get_config(self):
        return dict(self._spec(), name=self.name)


class SGD(Optimizer):
    _type = "sgd"

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD",
                 **kwargs):
        super().__init__(name, learning_rate, **kwargs)
        self.momentum = _rate(name, "momentum", momentum, high=1.0)
        self.nesterov = bool(nesterov)


class Adam(Optimizer):
    _type = "adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-07,
                 amsgrad=False, name="Adam", **kwargs):
        super().__init__(name, learning_rate, **kwargs)
        self.beta_1 = _rate(name, "beta_1", beta_1, high=1.0)
        self.beta_2 = _rate(name, "beta_2", beta_2, high=1.0)
        self.epsilon = _rate(name, "epsilon", epsilon, low_open=True)
        self.amsgrad = bool(amsgrad)


class Adagrad(Optimizer):
    _type = "adagrad"

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1,
                 epsilon=1e-07, name="Adagrad", **kwargs):
        super().__init__(name, learning_rate, **kwargs)
        self.initial_accumulator_value = _rate(
            name, "initial_accumulator_value", initial_accumulator_value)
        self.epsilon = _rate(name, "epsilon", epsilon, low_open=True)


class RMSprop(Optimizer):
    _type = "rmsprop"

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-07,
                 centered=False, name="RMSprop", **kwargs):
        super().__init__(name, learning_rate, **kwargs)
        self.rho = _rate(name, "rho", rho, high=1.0)
        self.momentum = _rate(name, "momentum", momentum, high=1.0)
        self.epsilon = _rate(name, "epsilon", epsilon, low_open=True)
        self.centered = bool(centered)


_BY_NAME = {"sgd": SGD, "adam": Adam, "adagrad": Adagrad, "rmsprop": RMSprop}


def get(identifier):
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str) and identifier.lower() in _BY_NAME:
        return _BY_NAME[identifier.lower()]()
    raise ValueError("Could not interpret optimizer identifier: %r (expected one of "
                     "%s or an optimizer object)" % (identifier, ", ".join(_BY_NAME)))


def deserialize(config):
    """An optimizer from get_config()'s dict ({"type", "name", ...})."""
    config = dict(config)
    kind = config.pop("type", None)
    cls = _BY_NAME.get(kind)
    if cls is None:
        raise ValueError("Could not interpret optimizer config: type %r (expected "
                         "one of %s)" % (kind, ", ".join(_BY_NAME)))
    return cls(**config)
