"""The guide programs of examples/python/guides (TensorFlow's and Keras's
guides written as they write them, with `import strata as tf`), each run
for one epoch in a scratch directory; `make guides` runs them in full."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
GUIDES_DIR = os.path.join(HERE, "..", "..", "examples", "python", "guides")
sys.path.insert(0, GUIDES_DIR)
import run_guides  # noqa: E402
from _helpers import needs_fashion  # noqa: E402


@needs_fashion
@pytest.mark.parametrize("program,what,full,short", run_guides.GUIDES,
                         ids=[g[0][:-3] for g in run_guides.GUIDES])
def test_guide_runs_unchanged(program, what, full, short):
    out, acc, seconds = run_guides.run(program, epochs=1, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert acc is not None and acc >= short, (acc, out.stdout[-2000:])
