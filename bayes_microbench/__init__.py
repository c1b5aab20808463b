"""bayes_microbench: reliable LLM micro-benchmarking.

Importing the package is cheap: PyMC and ArviZ load only when a Bayesian
function is first used, so the frequentist tools stay fast to start.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .exceptions import (
    BayesMicrobenchError,
    ConvergenceWarning,
    DroppedDataWarning,
    ResponsesError,
    UserInputError,
)
from .io import load_responses, save_responses
from .responses import Responses
from .simulate import SimulationTruth, simulate_responses

try:
    __version__ = version("bayes-microbench")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = [
    "BayesMicrobenchError",
    "ConvergenceWarning",
    "DroppedDataWarning",
    "Responses",
    "ResponsesError",
    "SimulationTruth",
    "UserInputError",
    "__version__",
    "load_responses",
    "save_responses",
    "simulate_responses",
]
