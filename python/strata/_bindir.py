"""Where the Strata daemons (strata-coordinator, strata-ps, strata-worker)
are: $STRATA_BIN_DIR, else the build's bin directory the package was built
beside (the BIN_DIR file the build writes)."""
import os


def bin_dir():
    env = os.environ.get("STRATA_BIN_DIR")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    packaged = os.path.join(here, "bin")
    if os.path.isfile(os.path.join(packaged, "strata-coordinator")):
        return packaged
    try:
        with open(os.path.join(here, "BIN_DIR")) as f:
            return f.read().strip()
    except OSError:
        return ""
