"""Domain exceptions.

Every error a user can cause (a bad file, a bad value, a bad flag) is a
:class:`UserInputError`. The CLI turns it into one line on stderr and exit
code 2; anything else is an internal error (exit code 1).
"""

from __future__ import annotations


class BayesMicrobenchError(Exception):
    """Base class of the package's own errors."""


class UserInputError(BayesMicrobenchError, ValueError):
    """Input the user can fix: the message says what is wrong, where, and what to do."""


class ResponsesError(UserInputError):
    """A response matrix, items file or harness log that cannot be used as it is."""


class ConfigurationError(UserInputError):
    """An invalid model, sampler or protocol configuration."""


class IncompatibleArtifactError(UserInputError):
    """A saved posterior made with another configuration or an incompatible version."""


class ConvergenceWarning(UserWarning):
    """A fit whose diagnostics (R-hat, ESS, divergences, BFMI) fail the thresholds."""


class DroppedDataWarning(UserWarning):
    """Rows or columns were dropped from the input (each is named in the message)."""
