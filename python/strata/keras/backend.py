"""strata.keras.backend: clear_session (resets the automatic names)."""
from .layers import clear_session

__all__ = ["clear_session"]
