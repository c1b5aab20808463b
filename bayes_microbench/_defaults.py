"""The package's defaults: interval probabilities, and what ``random_seed=None`` means.

Light on purpose (no numpy, no PyMC): commands read these for their help texts.
Why: one default for every interval the tool prints, and the study's 95% only where
its protocol fixes it (docs/decisions/0011-one-interval-default.md); a ``None`` seed is
a fresh one, said and recorded (docs/decisions/0012-a-none-seed-is-fresh-and-recorded.md).
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

logger = logging.getLogger(__name__)

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


#: The largest seed: numpy, JAX and the samplers all take a 32-bit unsigned seed.
MAX_SEED = 2**32 - 1


def fresh_seed() -> int:
    """A seed drawn from the operating system's entropy, in ``0 .. MAX_SEED``.

    Why: ``random_seed=None`` asks for a fresh run; the drawn seed is what the caller
    records and logs so the run can be repeated (any value is a valid ``--seed``).
    """
    return secrets.randbits(32)


def seed_or_fresh(random_seed: Any, caller: str) -> Any:
    """``random_seed`` unchanged, or for ``None`` a :func:`fresh_seed`, logged at INFO.

    Parameters
    ----------
    random_seed
        A seed (int, ``numpy.random.Generator``) or ``None``.
    caller
        The entry point, named in the log line.

    Why: ``None`` asks for a fresh run, not seed 0; the seed is said so the run can be
    repeated (docs/decisions/0012-a-none-seed-is-fresh-and-recorded.md).
    """
    if random_seed is not None:
        return random_seed
    seed = fresh_seed()
    logger.info(
        "%s: random_seed=None drew seed %d (pass random_seed=%d to repeat)", caller, seed, seed
    )
    return seed
