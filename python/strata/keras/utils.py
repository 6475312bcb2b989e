"""strata.keras.utils."""
_SEED = [1]


def set_random_seed(seed):
    """Seeds the initializers and dropout of models compiled afterwards."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError("set_random_seed: `seed` must be a non-negative integer, "
                         "got %r" % (seed,))
    _SEED[0] = seed


def _seed():
    return _SEED[0]
