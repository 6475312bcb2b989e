"""Strata from Python: tf.keras- and tf.distribute-shaped training.

    import strata as tf
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([...])
    model.compile(...); model.fit(dataset, epochs=10)

The C++ SDK (sdk/strata.h) does the work: ``fit`` never runs a Python
step loop.
"""
from . import errors
from . import data
from . import distribute
from . import keras
from .ps_client import PsClient

__version__ = "0.5.0"

__all__ = ["errors", "data", "distribute", "keras", "PsClient"]
