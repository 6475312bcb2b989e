"""What the Keras tests share: the Fashion-MNIST skip mark and a separable
toy problem."""
import os

import numpy as np
import pytest

FASHION = "/usr/share/datasets/fashion-mnist"
needs_fashion = pytest.mark.skipif(
    not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")),
    reason="Fashion-MNIST is not installed")


def toy(n=2000, seed=0):
    """float32 points in [0, 1)^2, labelled 1 where x0 > x1."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, 2)).astype(np.float32)
    return x, (x[:, 0] > x[:, 1]).astype(np.int32)
