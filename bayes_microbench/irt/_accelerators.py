"""The NUTS accelerators behind one switch, pinned to the library versions they were tested with.

Two accelerators sit on top of the plain path (nutpie's chains as threads of one process,
XLA's own kernel for the fused likelihood Op of :mod:`._likelihood`, which always stays):

- ``ffi``: the one-pass float32 2PL/3PL likelihood kernel called by XLA (:mod:`._ffi_2pl`;
  reads XLA's FFI call frame by its C layout);
- ``workers``: the chains in forked worker processes pinned to one core each
  (:mod:`._chains`; asks a private JAX module whether JAX has started).

``BAYES_MICROBENCH_ACCELERATE`` (:data:`SWITCH`) chooses them: ``auto`` (the default:
each one whose libraries are inside :data:`TESTED`), ``off`` (none: the plain path), or a
comma list of names (those only, still version-checked; for side-by-side timings).
Outside the tested range, or when an accelerator's own check fails at first use, the
plain path runs and :func:`fall_back` logs one warning naming what fell back and why.

Why: docs/decisions/0027-accelerators-behind-one-switch.md (what each one saves, why the
versions are pinned, and the nutpie callback patch measured and dropped).
"""

from __future__ import annotations

import logging
import os
import re
from importlib import metadata

from ..exceptions import ConfigurationError

#: The environment variable that turns the accelerators on (``auto``) or off (``off``).
SWITCH = "BAYES_MICROBENCH_ACCELERATE"

#: The earlier switch of the FFI kernel alone; no longer read (a warning says so).
OLD_SWITCH = "BAYES_MICROBENCH_FFI_KERNEL"

#: name -> (what it is, the distributions whose versions it depends on).
ACCELERATORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ffi": ("the one-pass FFI likelihood kernel", ("jax", "jaxlib")),
    "workers": ("NUTS chains in forked pinned worker processes", ("jax", "nutpie")),
}

#: distribution -> (lowest tested version, first untested version): the range the
#: accelerators were checked with (jax and jaxlib 0.12.0.1, nutpie 0.16.11).
TESTED: dict[str, tuple[str, str]] = {
    "jax": ("0.12.0", "0.13"),
    "jaxlib": ("0.12.0", "0.13"),
    "nutpie": ("0.16.11", "0.17"),
}

logger = logging.getLogger(__name__)

#: name -> why it fell back in this process (each is logged once).
_fallen: dict[str, str] = {}
#: set in a forked NUTS worker: fallbacks are recorded, and the parent logs them once.
_deferred: list[bool] = [False]


def requested() -> frozenset[str]:
    """The accelerators :data:`SWITCH` asks for (``auto``: all of them).

    Raises
    ------
    ConfigurationError
        A value that is neither ``auto``, ``off`` nor a comma list of accelerator names.
    """
    if os.environ.get(OLD_SWITCH) is not None and OLD_SWITCH not in _fallen:
        _fallen[OLD_SWITCH] = "ignored"
        logger.warning(
            "%s is no longer read; set %s=off for the plain path, or %s=workers "
            "to leave out the FFI kernel only",
            OLD_SWITCH,
            SWITCH,
            SWITCH,
        )
    value = os.environ.get(SWITCH, "auto").strip().lower()
    if value in ("", "auto"):
        return frozenset(ACCELERATORS)
    if value == "off":
        return frozenset()
    names = {x.strip() for x in value.split(",") if x.strip()}
    unknown = sorted(names - set(ACCELERATORS))
    if unknown:
        raise ConfigurationError(
            f"{SWITCH}={os.environ[SWITCH]!r} names no accelerator {unknown}: set it to "
            f"'auto', 'off' or a comma list of {list(ACCELERATORS)}"
        )
    return frozenset(names)


def installed(distribution: str) -> str | None:
    """The installed version of ``distribution`` (None: not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string (``0.12.0.1`` -> (0, 12, 0, 1))."""
    parts = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.end() < len(piece):  # '0rc1', '0+local': what follows is no release number
            break
    return tuple(parts)


def untested(name: str) -> str | None:
    """Why accelerator ``name``'s libraries are outside :data:`TESTED` (None: inside)."""
    for dist in ACCELERATORS[name][1]:
        version = installed(dist)
        low, high = TESTED[dist]
        if version is None:
            return f"{dist} is not installed"
        if not _release(low) <= _release(version) < _release(high):
            return f"{dist} {version} is outside the tested range >={low},<{high}"
    return None


def enabled(name: str) -> bool:
    """Whether accelerator ``name`` is to be used here: asked for, tested, not fallen back.

    One that is asked for but outside :data:`TESTED` falls back (:func:`fall_back`).
    """
    if name not in requested() or name in _fallen:
        return False
    why = untested(name)
    if why is not None:
        fall_back(name, why)
        return False
    return True


def fall_back(name: str, reason: str) -> None:
    """Record that accelerator ``name`` is not used in this process, and log why, once."""
    if name in _fallen:
        return
    _fallen[name] = reason
    if not _deferred[0]:
        logger.warning(
            "%s (%s=%s) is not used: %s; the plain path runs instead (%s=off skips the "
            "accelerators and this check)",
            ACCELERATORS[name][0],
            SWITCH,
            name,
            reason,
            SWITCH,
        )


def fallen() -> dict[str, str]:
    """The accelerators that fell back in this process, with why."""
    return {k: v for k, v in _fallen.items() if k in ACCELERATORS}


def defer_notes() -> None:
    """Record fallbacks without logging them (a NUTS worker: its parent logs them once)."""
    _deferred[0] = True


def status() -> dict[str, str]:
    """Each accelerator's state before use: ``"active"``, or why it is not used.

    Reads the switch and the versions only (no accelerator is started); an
    accelerator that fell back in this process gives its reason.
    """
    asked = requested()
    out = {}
    for name in ACCELERATORS:
        if name in _fallen:
            out[name] = _fallen[name]
        elif name not in asked:
            out[name] = f"switched off by {SWITCH}"
        else:
            out[name] = untested(name) or "active"
    return out
