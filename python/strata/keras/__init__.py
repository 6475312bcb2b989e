"""strata.keras: tf.keras's Sequential models over the C++ SDK."""
from . import layers
from . import optimizers
from . import losses
from . import metrics
from . import callbacks
from . import datasets
from . import utils
from .models import Sequential, Model
from . import models
from .layers import Input

__all__ = ["layers", "optimizers", "losses", "metrics", "callbacks",
           "datasets", "utils", "models", "Sequential", "Model", "Input"]
