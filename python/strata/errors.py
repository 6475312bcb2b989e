"""Errors raised by strata, named as tf.errors names them.

Every error of the C++ runtime arrives as the subclass of OpError for its
status code, carrying the status message (``str(e)`` and ``e.message``).
"""


class OpError(Exception):
    """The base class of strata's errors: ``message`` and ``error_code``."""

    def __init__(self, message, error_code=2):
        super().__init__(message)
        self.message = message
        self.error_code = error_code


class CancelledError(OpError):
    pass


class UnknownError(OpError):
    pass


class InvalidArgumentError(OpError, ValueError):
    pass


class DeadlineExceededError(OpError):
    pass


class NotFoundError(OpError):
    pass


class AlreadyExistsError(OpError):
    pass


class PermissionDeniedError(OpError):
    pass


class ResourceExhaustedError(OpError):
    pass


class FailedPreconditionError(OpError):
    pass


class AbortedError(OpError):
    pass


class OutOfRangeError(OpError):
    pass


class UnimplementedError(OpError):
    pass


class InternalError(OpError):
    pass


class UnavailableError(OpError):
    pass


class DataLossError(OpError):
    pass


class UnauthenticatedError(OpError):
    pass
