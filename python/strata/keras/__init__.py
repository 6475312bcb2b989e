"""strata.keras: tf.keras's models (Sequential, functional and subclassed)
over the C++ model runtime."""
from . import layers
from . import initializers
from . import regularizers
from . import optimizers
from . import losses
from . import metrics
from . import callbacks
from . import datasets
from . import utils
from . import backend
from .models import Sequential, Model
from . import models
from .layers import Input

__all__ = ["layers", "initializers", "regularizers", "optimizers", "losses",
           "metrics", "callbacks", "datasets", "utils", "backend", "models",
           "Sequential", "Model", "Input"]
