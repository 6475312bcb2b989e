"""tf.train: latest_checkpoint over the checkpoints save_weights writes."""
from .keras.saving import latest_checkpoint

__all__ = ["latest_checkpoint"]
