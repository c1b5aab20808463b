"""The shipped posteriors in ``models/``: where they are, their names, what each one is.

A user designs or scores a micro-benchmark of a shared benchmark without fitting:
``--posterior gpqa`` (a benchmark's name: its default model) or ``--posterior
gpqa-2pl`` (a file's name without ``.nc``) resolves to a file in the models
folder. The folder is ``$BAYES_MICROBENCH_MODELS`` when that is set, else
``models/`` beside the package (a checkout or an editable install, which is what
``scripts/setup.sh`` makes). A wheel does not carry the models (they are
megabytes each): there, set ``BAYES_MICROBENCH_MODELS`` to a checkout's
``models/`` folder, or give the ``.nc`` path.

Why a module of its own: the commands resolve names when their arguments are
parsed, before any heavy import, and ``build_models`` and ``models`` share one
table of the benchmarks.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .exceptions import UserInputError

#: The environment variable that points at a models folder (overrides the checkout's).
MODELS_ENV = "BAYES_MICROBENCH_MODELS"


@dataclass(frozen=True)
class Benchmark:
    """A shared matrix that a shipped model is fitted on.

    Attributes
    ----------
    key
        Its short name (``gpqa``, ``bbh``, ...); ``--posterior KEY`` is its default model.
    data
        The responses file, relative to ``../shared/data``.
    title
        What it is, one phrase, for the ``models`` table and the model card.
    default_model
        The file name (without ``.nc``) that ``KEY`` resolves to.
    """

    key: str
    data: str
    title: str
    default_model: str


def _bench(key: str, data: str, title: str) -> Benchmark:
    return Benchmark(key=key, data=data, title=title, default_model=f"{key}-2pl")


#: The shared matrices a model is shipped for, cheapest to fit last in no order:
#: the build order is ``build_models``'s.
BENCHMARKS: dict[str, Benchmark] = {
    b.key: b
    for b in (
        _bench(
            "gpqa",
            "open-llm-leaderboard-v2/gpqa.csv",
            "GPQA main, Open LLM Leaderboard v2",
        ),
        _bench("bbh", "predictaboard-oll-v2/bbh.csv", "BIG-Bench Hard, OLL v2 (PredictaBoard)"),
        _bench("mmlu-pro", "predictaboard-oll-v2/mmlu-pro.csv", "MMLU-Pro, OLL v2 (PredictaBoard)"),
        _bench("musr", "predictaboard-oll-v2/musr.csv", "MuSR, OLL v2 (PredictaBoard)"),
        _bench(
            "math-hard",
            "predictaboard-oll-v2/math-hard.csv",
            "MATH level 5, OLL v2 (PredictaBoard)",
        ),
        _bench("ifeval", "predictaboard-oll-v2/ifeval.csv", "IFEval, OLL v2 (PredictaBoard)"),
        _bench("arc", "metabench-oll-v1/arc.csv", "ARC, metabench's items, OLL v1"),
        _bench("gsm8k", "metabench-oll-v1/gsm8k.csv", "GSM8K, metabench's items, OLL v1"),
        _bench("mmlu", "metabench-oll-v1/mmlu.csv", "MMLU, metabench's items, OLL v1"),
        _bench(
            "truthfulqa", "metabench-oll-v1/truthfulqa.csv", "TruthfulQA, metabench's items, OLL v1"
        ),
        _bench(
            "winogrande", "metabench-oll-v1/winogrande.csv", "Winogrande, metabench's items, OLL v1"
        ),
    )
}


def models_dir() -> Path | None:
    """The folder of shipped models: ``$BAYES_MICROBENCH_MODELS``, else the checkout's ``models/``.

    Returns ``None`` when neither exists (an install from a wheel without the variable).
    """
    env = os.environ.get(MODELS_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    root = Path(__file__).resolve().parent.parent
    # a checkout (or an editable install of one); in site-packages a "models" folder
    # beside the package would be some other distribution's
    here = root / "models"
    return here if here.is_dir() and (root / "pyproject.toml").is_file() else None


def shipped_files(folder: Path | None = None) -> dict[str, Path]:
    """Every ``NAME.nc`` in the models folder, by ``NAME``, sorted by name."""
    folder = models_dir() if folder is None else folder
    if folder is None or not folder.is_dir():
        return {}
    return {p.stem: p for p in sorted(folder.glob("*.nc")) if p.is_file()}


def known_names(folder: Path | None = None) -> list[str]:
    """The names ``--posterior`` accepts: benchmark keys with a shipped default, then file names."""
    files = shipped_files(folder)
    keys = [b.key for b in BENCHMARKS.values() if b.default_model in files]
    return keys + [n for n in files if n not in keys]


def looks_like_name(value: str) -> bool:
    """True for ``gpqa``-like values: no folder separator and no ``.nc``-style suffix."""
    return "/" not in value and os.sep not in value and Path(value).suffix == ""


def resolve_posterior(value: str, *, folder: Path | None = None) -> str:
    """The path ``--posterior VALUE`` means: an existing path, else a shipped model's file.

    Parameters
    ----------
    value
        A path to a ``.nc`` file, a benchmark key (``gpqa``: its default model)
        or a shipped file's name (``gpqa-2pl-md``).
    folder
        The models folder (default :func:`models_dir`).

    Returns
    -------
    str
        ``value`` itself when it names an existing file or looks like a path;
        else the shipped file's path.

    Raises
    ------
    UserInputError
        A name that no shipped model has: one line listing the known names
        (or saying where the models folder was looked for).
    """
    if not looks_like_name(value) or Path(value).exists():
        return value  # a path: the loader says what is wrong with it, if anything
    folder = models_dir() if folder is None else folder
    files = shipped_files(folder)
    if value in BENCHMARKS and BENCHMARKS[value].default_model in files:
        return str(files[BENCHMARKS[value].default_model])
    if value in files:
        return str(files[value])
    if not files:
        where = (
            f"{folder} holds no .nc file"
            if folder is not None
            else (
                "no models folder was found beside the package (an install from a wheel "
                "carries none)"
            )
        )
        raise UserInputError(
            f"{value!r} is neither a file nor a shipped model: {where}; give the path of a "
            f".nc file, or set {MODELS_ENV} to a checkout's models/ folder"
        )
    raise UserInputError(
        f"{value!r} is neither a file nor a shipped model; known names: "
        f"{', '.join(known_names(folder))} (or give the path of a .nc file)"
    )


def model_info(path: Path) -> dict[str, Any]:
    """What the ``models`` command lists for one file, read from its attrs (no draws loaded).

    Returns a dict: ``name``, ``benchmark``, ``aliases`` (benchmark keys that resolve
    to it), ``model``, ``n_llms`` (the llms it was fitted on, from its calibration;
    ``None`` without one), ``n_items``, ``draws`` (saved, all chains), ``calibrated``,
    ``converged`` (``None`` when the file records no verdict), ``problems``,
    ``file_bytes``, ``card`` (the model card's path when it exists) and ``path``.
    """
    import xarray as xr

    from .irt.diagnostics import ConvergenceSummary, fit_problems, fit_verdict
    from .irt.io import CALIBRATION_GROUP, _engine

    try:
        tree = xr.open_datatree(path, engine=_engine())
    except (OSError, ValueError) as err:
        raise UserInputError(
            f"{path}: cannot be read as a NetCDF posterior ({type(err).__name__}); rebuild it "
            "with 'python -m bayes_microbench.irt.build_models'"
        ) from None
    try:
        attrs = dict(tree.attrs)
        post = tree["posterior"]
        sizes = dict(post.sizes)
        calibrated = CALIBRATION_GROUP in tree.children
        n_llms = int(tree[CALIBRATION_GROUP].attrs["n_llms"]) if calibrated else None
    finally:
        tree.close()
    diag = json.loads(attrs.get("diagnostics_json", "null") or "null")
    fit_info = json.loads(attrs.get("fit_info_json", "{}") or "{}")
    summary = None
    if diag:
        diag.pop("ok", None)
        summary = ConvergenceSummary(**diag)
    config = json.loads(attrs.get("config_json", "{}") or "{}")
    model = str(attrs.get("model", ""))
    if model == "2pl-md":
        model = f"2pl-md (D = {config.get('n_dims')})"
    name = path.stem
    card = path.with_suffix(".md")
    return {
        "name": name,
        "benchmark": str(attrs.get("benchmark", "")),
        "aliases": [b.key for b in BENCHMARKS.values() if b.default_model == name],
        "model": model,
        "n_llms": n_llms,
        "n_items": int(sizes.get("item", 0)),
        "draws": int(sizes.get("chain", 0) * sizes.get("draw", 0)),
        "calibrated": calibrated,
        "converged": fit_verdict(summary, fit_info),
        "problems": fit_problems(summary, fit_info),
        "file_bytes": path.stat().st_size,
        "card": str(card) if card.is_file() else None,
        "path": str(path),
    }
