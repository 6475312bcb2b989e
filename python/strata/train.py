"""tf.train: latest_checkpoint over the checkpoints save_weights writes,
and Checkpoint (a model's weights, with its optimizer's state, saved and
restored under numbered prefixes)."""
import os

from .keras.saving import latest_checkpoint, note_checkpoint

__all__ = ["latest_checkpoint", "Checkpoint"]


class Checkpoint:
    """tf.train.Checkpoint(model=..., optimizer=...): save(prefix) writes
    "<prefix>-<n>" (Keras's weights file with the optimizer's state) and
    returns it; restore(path) loads it into the model (at its compile, if
    it is not compiled yet)."""

    def __init__(self, root=None, **kwargs):
        self._model = kwargs.pop("model", root)
        self._optimizer = kwargs.pop("optimizer", None)
        if kwargs:
            raise ValueError("Checkpoint: only `model` and `optimizer` are saved; got "
                             "%s" % ", ".join(sorted(kwargs)))
        if self._model is None:
            raise ValueError("Checkpoint: pass the model (model=...)")
        self.save_counter = 0

    def save(self, file_prefix, options=None):
        self.save_counter += 1
        path = "%s-%d" % (os.fspath(file_prefix), self.save_counter)
        self.write(path)
        note_checkpoint(path)
        return path

    def write(self, file_prefix, options=None):
        from .keras import saving as _saving
        path = os.fspath(file_prefix)
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        _saving.write_checkpoint(self._model, path)
        return path

    def restore(self, save_path, options=None):
        from .keras import saving as _saving
        if save_path is None:
            raise ValueError("Checkpoint.restore: no checkpoint (save_path is None)")
        _saving.read_checkpoint(self._model, os.fspath(save_path))
        return self

    read = restore
