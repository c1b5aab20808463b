"""The package's interval probabilities: one default for the tool, one for the study's protocol.

Light on purpose (no numpy, no PyMC): commands read these for their help texts.
Why: one default for every interval the tool prints, and the study's 95% only where
its protocol fixes it (docs/decisions/0011-one-interval-default.md).
"""

from __future__ import annotations

#: Probability of every credible / confidence / predictive interval the tool prints by
#: default (score, design, plan, mdad, validate, adapt, checks); pass ``ci_prob=`` to change it.
DEFAULT_CI_PROB = 0.9
#: Probability the study's protocol fixes: the percentile-bootstrap interval of the study's
#: MDAD (:mod:`bayes_microbench.mdad`, the exact random rows of :mod:`bayes_microbench.analytic`).
STUDY_CI_PROB = 0.95
#: ``adapt --goal rank``: the certainty P(ahead) or P(behind) must pass to stop (not an
#: interval default, though the rank run's printed interval takes the same probability).
DEFAULT_RANK_PROB = 0.95


def percent(prob: float) -> str:
    """``prob`` as a whole percentage for help texts and titles (``0.9`` -> ``"90%"``).

    Why: a text that names the default should print the constant, not repeat it.
    """
    return f"{100 * prob:.0f}%"
