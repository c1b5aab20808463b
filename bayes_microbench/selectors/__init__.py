"""Subset selectors: the study's seven methods and the Bayesian ones.

``get_selector(name)`` returns a :class:`~bayes_microbench.selectors.base.Selector`;
``SELECTORS`` maps each name to the module and class that implement it (imported
lazily, so that using ``random`` does not import the IRT machinery).
"""

from __future__ import annotations

import importlib

from ..exceptions import UserInputError
from .base import PreparedSelector, Selection, Selector, weighted_mean_estimate

# name -> (module under bayes_microbench.selectors, class name)
SELECTORS: dict[str, tuple[str, str]] = {
    "random": ("random", "RandomSelector"),
    "random-subtask-equal": ("subtask", "SubtaskEqualSelector"),
    "random-subtask-proportional": ("subtask", "SubtaskProportionalSelector"),
    "stratified-confidence": ("stratified", "StratifiedConfidenceSelector"),
    "anchor-points": ("anchor_points", "AnchorPointsSelector"),
    "tinybenchmarks": ("tinybenchmarks", "TinyBenchmarksSelector"),
    "tinybenchmarks-pirt": ("tinybenchmarks", "TinyBenchmarksPIRTSelector"),
    "tinybenchmarks-gpirt": ("tinybenchmarks", "TinyBenchmarksGPIRTSelector"),
    "diversity": ("diversity", "DiversitySelector"),
    "bayes-fisher": ("bayes_fisher", "BayesFisherSelector"),
    "bayes-ranking": ("bayes_ranking", "BayesRankingSelector"),
}


def get_selector(name: str) -> Selector:
    """The selector registered under ``name`` (see ``SELECTORS``)."""
    if name not in SELECTORS:
        raise UserInputError(f"unknown selector {name!r}; choose from {', '.join(SELECTORS)}")
    module, cls = SELECTORS[name]
    mod = importlib.import_module(f".{module}", __package__)
    selector: Selector = getattr(mod, cls)()
    return selector


__all__ = [
    "SELECTORS",
    "PreparedSelector",
    "Selection",
    "Selector",
    "get_selector",
    "weighted_mean_estimate",
]
