"""Hierarchical Bayesian IRT: models, fitting, diagnostics, checks and saved posteriors.

Importing this package does not import PyMC; building or fitting a model does.

>>> from bayes_microbench.irt import IRTModel, load_posterior  # doctest: +SKIP
"""

from __future__ import annotations

from .config import IRTConfig, SamplerConfig
from .diagnostics import ConvergenceSummary
from .io import FittedIRT, load_posterior, save_posterior
from .model import IRTModel

__all__ = [
    "ConvergenceSummary",
    "FittedIRT",
    "IRTConfig",
    "IRTModel",
    "SamplerConfig",
    "load_posterior",
    "save_posterior",
]
