"""Fashion-MNIST from the Debian package dataset-fashion-mnist."""
import os

import numpy as np

from ... import _strata

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def load_data(path=None):
    """((x_train, y_train), (x_test, y_test)) as Keras returns them: uint8
    arrays of shapes (60000, 28, 28), (60000,), (10000, 28, 28), (10000,).
    $STRATA_FASHION_MNIST_DIR or `path` names another directory."""
    d = path or os.environ.get("STRATA_FASHION_MNIST_DIR", DEFAULT_DIR)
    out = []
    for split in ("train", "t10k"):
        x, y = _strata.load_idx(os.path.join(d, split + "-images-idx3-ubyte.gz"),
                                os.path.join(d, split + "-labels-idx1-ubyte.gz"))
        out.append((x.astype(np.uint8).reshape(-1, 28, 28), y.astype(np.uint8)))
    return tuple(out)
