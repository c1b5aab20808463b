"""Save and load fitted posteriors (NetCDF of an ``xarray.DataTree``).

Layout of a saved file
----------------------
Groups ``posterior`` (``ability`` (chain, draw, llm) unless items-only,
``difficulty``, ``discrimination``, ``intercept`` (chain, draw, item),
``guessing`` for 3PL, subtask-level ``intercept_mean``, ``intercept_sd``,
``log_disc_mean``, ``log_disc_sd`` (``disc_mean``, ``disc_sd`` under the truncated-normal
discrimination prior) (chain, draw, subtask); coords ``llm``,
``item``, ``subtask`` and ``item_subtask`` (item -> subtask label)),
``sample_stats`` (NUTS), ``observed_data`` (``correct``, unless items-only).

Root attrs: ``model``, ``config_json``, ``config_hash``, ``sampler_json``,
``diagnostics_json``, ``notes_json`` (perfect llms/items), ``package_version``,
``format_version``, ``ability_population`` (``"normal(0,1)"``), ``items_only``,
``thin``, ``wall_seconds``, ``compact``.

A compact file (``compact`` 1, items-only 1-D models): the derived ``difficulty``
is not stored, ``discrimination`` is stored as ``log_discrimination``, and every
item-level variable is packed as CF int16 (``scale_factor`` / ``add_offset``
over its range: a step of 1/65533 of the range); :func:`load_posterior`
unpacks them and recomputes ``difficulty = -intercept / discrimination``.
Why: it keeps three times as many draws under the size cap of ``models/``
(MMLU-Pro's 12032 items), and ``build_models`` measures what it changes.

Group ``calibration`` (optional; :mod:`bayes_microbench.irt.calibration`): the
:class:`~bayes_microbench.misfit.Misfit` of the posterior on the responses it
was fitted on (``Misfit.to_dataset``), with its ``calibration_hash`` attr
checked on load. Files without it still load (``calibration`` is then None).

A ``2pl-md`` posterior has ``ability`` (chain, draw, llm, dim) and
``discrimination`` (chain, draw, item, dim), ``mdisc``, ``loading_sd`` (dim
``extra_dim``), posterior attrs ``anchors`` and ``n_dims``, and
``ability_population`` ``"normal(0,I_D)"`` (see
:mod:`bayes_microbench.irt.multidim`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import xarray as xr

from .._validate import step
from ..exceptions import IncompatibleArtifactError
from ..io import write_atomic
from .config import FORMAT_VERSION, IRTConfig, SamplerConfig
from .diagnostics import ConvergenceSummary, fit_problems, fit_verdict

CALIBRATION_GROUP = "calibration"
#: Item-level variables a compact file packs as int16 (``log_discrimination`` for
#: ``discrimination``); ``difficulty`` is recomputed on load.
PACKED = ("log_discrimination", "intercept", "guessing")
_INT16_STEPS = 65533  # values -32766 .. 32767; -32768 is the fill value


def _engine() -> Literal["netcdf4", "h5netcdf"]:
    """netCDF4 when installed, else h5netcdf (which needs h5py)."""
    import importlib.util

    return "netcdf4" if importlib.util.find_spec("netCDF4") is not None else "h5netcdf"


def save_posterior(
    fit: Any,
    path: str | os.PathLike[str],
    *,
    items_only: bool = False,
    thin: int = 1,
    calibration: Any = None,
    compact: bool = False,
) -> Path:
    """Write a fitted :class:`~bayes_microbench.irt.IRTModel` to ``path`` atomically.

    Parameters
    ----------
    fit
        A fitted ``IRTModel``.
    path
        Output ``.nc`` file.
    items_only
        Keep only item and subtask parameters (no ``ability``, no observed data):
        the small artifact for ``models/``.
    thin
        Keep every ``thin``-th draw.
    calibration
        A :class:`~bayes_microbench.misfit.Misfit` to store in the
        ``calibration`` group (default: the fit's own ``calibration``, if any).
    compact
        Write the compact form (see the module docstring); needs ``items_only``
        and a 1-D model with positive discriminations.

    Returns
    -------
    The path written.
    """
    from .. import __version__

    if fit.idata is None:
        raise IncompatibleArtifactError("cannot save an unfitted IRTModel; call fit() first")
    if not isinstance(thin, int) or thin < 1:
        raise IncompatibleArtifactError(f"thin must be a whole number >= 1, got {thin!r}")
    if compact and (not items_only or fit.config.model == "2pl-md"):
        raise IncompatibleArtifactError(
            "compact=True needs items_only=True and a 1-D model (1pl, 2pl, 3pl), "
            f"got items_only={items_only}, model {fit.config.model!r}"
        )
    tree = fit.idata
    groups: dict[str, xr.Dataset] = {}
    for name in ("posterior", "sample_stats", "observed_data"):
        if name not in tree.children:
            continue
        if items_only and name == "observed_data":
            continue
        ds = tree[name].to_dataset()
        if "draw" in ds.dims and thin > 1:
            ds = ds.isel(draw=slice(None, None, thin))
        if items_only and name == "posterior":
            ds = ds.drop_vars(["ability"]).drop_dims("llm", errors="ignore")
        if name == "posterior":
            ds = ds.astype({v: np.float32 for v in ds.data_vars})
        groups[name] = ds
    misfit = calibration if calibration is not None else getattr(fit, "calibration", None)
    if misfit is not None:
        groups[CALIBRATION_GROUP] = _calibration_group(misfit)
    attrs = {
        "model": fit.config.model,
        "config_json": fit.config.to_json(),
        "config_hash": fit.config.hash(),
        "sampler_json": json.dumps(fit.sampler.to_dict() if fit.sampler else {}),
        "diagnostics_json": json.dumps(fit.diagnostics.to_dict() if fit.diagnostics else None),
        "fit_info_json": json.dumps(fit.fit_info, default=float),
        "notes_json": json.dumps(fit.data.notes),
        "package_version": __version__,
        "format_version": FORMAT_VERSION,
        "ability_population": str(tree["posterior"].attrs.get("ability_population", "normal(0,1)")),
        "items_only": int(items_only),
        "compact": int(compact),
        "thin": thin,
        "wall_seconds": float(fit.wall_seconds or 0.0),
        "benchmark": str(fit.responses.benchmark) if fit.responses is not None else "",
    }
    return _write(Path(path), groups, attrs, compact=compact)


def _write(target: Path, groups: dict[str, xr.Dataset], attrs: Any, *, compact: bool) -> Path:
    """Write ``groups`` with root ``attrs`` atomically, zlib-compressed; packed when ``compact``."""
    if compact:
        groups = dict(groups, posterior=_compact_posterior(groups["posterior"]))
    out = xr.DataTree.from_dict(groups)
    out.attrs.update(attrs)
    encoding: dict[str, dict[Hashable, dict[str, Any]]] = {}
    for name, ds in groups.items():
        enc: dict[Hashable, dict[str, Any]] = {
            v: {"zlib": True, "complevel": 4} for v in ds.data_vars
        }
        if compact and name == "posterior":
            for v in PACKED:
                if v in ds:
                    enc[v] |= _int16_packing(ds[v])
        encoding[f"/{name}"] = enc
    return write_atomic(target, lambda tmp: out.to_netcdf(tmp, engine=_engine(), encoding=encoding))


def _compact_posterior(ds: xr.Dataset) -> xr.Dataset:
    """The posterior group as a compact file stores it: no difficulty, log discrimination."""
    a = ds["discrimination"]
    if not bool(np.isfinite(a).all()) or bool((a <= 0).any()):
        raise IncompatibleArtifactError(
            "the compact form stores log(discrimination) and needs every discrimination "
            "draw positive and finite; save without compact=True"
        )
    log_a = np.log(a.astype(np.float64)).astype(np.float32)
    return ds.drop_vars(["difficulty", "discrimination"]).assign(log_discrimination=log_a)


def _int16_packing(var: xr.DataArray) -> dict[str, Any]:
    """CF int16 packing of ``var`` over its range (a step of 1/65533 of it)."""
    values = np.asarray(var.to_numpy(), dtype=np.float64)
    if not np.isfinite(values).all():
        raise IncompatibleArtifactError(
            f"cannot pack {var.name!r}: it has non-finite draws; save without compact=True"
        )
    lo, hi = float(values.min()), float(values.max())
    scale = (hi - lo) / _INT16_STEPS if hi > lo else 1.0
    return {
        "dtype": "int16",
        "scale_factor": scale,
        "add_offset": lo + 32766 * scale,
        "_FillValue": np.int16(-32768),
    }


def _expand_compact(tree: xr.DataTree) -> xr.DataTree:
    """A compact file's tree with ``discrimination`` and ``difficulty`` restored (float32)."""
    ds = tree["posterior"].to_dataset()
    a = np.exp(ds["log_discrimination"].astype(np.float64))
    unpacked: dict[str, Any] = {
        v: ds[v].astype(np.float32) for v in ("intercept", "guessing") if v in ds.data_vars
    }
    ds = ds.drop_vars("log_discrimination").assign(
        discrimination=a.astype(np.float32),
        difficulty=(-ds["intercept"].astype(np.float64) / a).astype(np.float32),
        **unpacked,
    )
    for v in ds.data_vars.values():
        v.encoding = {}
    groups = {name: tree[name].to_dataset() for name in tree.children}
    groups["posterior"] = ds
    out = xr.DataTree.from_dict(groups)
    out.attrs.update(tree.attrs)
    return out


def _calibration_group(misfit: Any) -> xr.Dataset:
    """A Misfit as the ``calibration`` group, with its hash in the attrs."""
    from .calibration import calibration_hash

    ds = misfit.to_dataset()
    ds.attrs["calibration_hash"] = calibration_hash(ds)
    return ds


def add_calibration(path: str | os.PathLike[str], misfit: Any) -> Path:
    """Write ``misfit`` into the saved posterior at ``path`` (replacing any), atomically.

    Why: the shipped artifacts were fitted before posteriors carried their
    calibration; this adds it without refitting (``build_models --calibrate``).
    """
    fitted = load_posterior(path)
    tree = fitted.idata
    groups = {name: tree[name].to_dataset() for name in tree.children if name != CALIBRATION_GROUP}
    groups[CALIBRATION_GROUP] = _calibration_group(misfit)
    compact = bool(int(tree.attrs.get("compact", 0)))
    return _write(Path(path), groups, tree.attrs, compact=compact)


class FittedIRT:
    """A posterior read back from disk (see :func:`load_posterior`).

    Attributes
    ----------
    idata
        The :class:`xarray.DataTree`.
    posterior
        Its ``posterior`` group as an :class:`xarray.Dataset`.
    config
        The :class:`IRTConfig` it was fitted with.
    sampler
        The :class:`SamplerConfig` (method, chains, draws, ...).
    diagnostics
        The :class:`ConvergenceSummary` of a NUTS fit, else ``None``.
    items_only
        True for a thinned item-only artifact (no ``ability``).
    """

    def __init__(self, tree: xr.DataTree, path: Path) -> None:
        attrs = tree.attrs
        self.path = path
        self.idata = tree
        self.config = IRTConfig.from_dict(json.loads(attrs["config_json"]))
        self.sampler = SamplerConfig(**json.loads(attrs.get("sampler_json", "{}") or "{}"))
        diag = json.loads(attrs.get("diagnostics_json", "null") or "null")
        if diag:
            diag.pop("ok", None)
            self.diagnostics: ConvergenceSummary | None = ConvergenceSummary(**diag)
        else:
            self.diagnostics = None
        self.fit_info: dict[str, Any] = json.loads(attrs.get("fit_info_json", "{}") or "{}")
        self.notes: dict[str, list[str]] = json.loads(attrs.get("notes_json", "{}") or "{}")
        self.items_only = bool(int(attrs.get("items_only", 0)))
        self.compact = bool(int(attrs.get("compact", 0)))
        self.package_version = str(attrs.get("package_version", ""))
        self.wall_seconds = float(attrs.get("wall_seconds", 0.0))
        self.calibration = _read_calibration(tree, path)

    @property
    def posterior(self) -> xr.Dataset:
        return self.idata["posterior"].to_dataset()

    @property
    def model(self) -> str:
        return self.config.model

    @property
    def converged(self) -> bool | None:
        """NUTS: the saved diagnostics' verdict; an approximation: its optimizer's.

        ``None`` when the file records neither (an artifact older than the optimizer flag).
        """
        return fit_verdict(self.diagnostics, self.fit_info)

    def convergence_problems(self) -> list[str]:
        """What failed, one phrase each (empty when converged)."""
        return fit_problems(self.diagnostics, self.fit_info)

    def item_embeddings(self) -> xr.DataArray:
        """Posterior-mean loadings ``(item, dim)`` of a ``2pl-md`` posterior.

        See :func:`bayes_microbench.irt.multidim.item_embeddings`.
        """
        from .multidim import item_embeddings

        return item_embeddings(self.posterior)

    def __repr__(self) -> str:
        post = self.posterior
        kind = "items-only " if self.items_only else ""
        return (
            f"FittedIRT({self.model}, {kind}{post.sizes.get('item', 0)} items, "
            f"{post.sizes['chain']} x {post.sizes['draw']} draws, from {self.path.name})"
        )


def _read_calibration(tree: xr.DataTree, path: Path) -> Any:
    """The saved Misfit, or None; a group whose values do not match its hash is refused."""
    if CALIBRATION_GROUP not in tree.children:
        return None
    from ..misfit import Misfit
    from .calibration import calibration_hash

    ds = tree[CALIBRATION_GROUP].to_dataset()
    if str(ds.attrs.get("calibration_hash", "")) != calibration_hash(ds):
        raise IncompatibleArtifactError(
            f"{path}: its calibration does not match its stored hash (file edited or "
            "corrupt); refit, or rebuild it with 'python -m bayes_microbench.irt.build_models "
            "--calibrate'"
        )
    return Misfit.from_dataset(ds)


def load_posterior(
    path: str | os.PathLike[str], *, config: IRTConfig | dict[str, Any] | None = None
) -> FittedIRT:
    """Read a posterior written by :meth:`IRTModel.save` / :func:`save_posterior`.

    Parameters
    ----------
    path
        The ``.nc`` file.
    config
        When given, the file must have been fitted with exactly this
        configuration (compared by hash); otherwise it is refused.

    Raises
    ------
    IncompatibleArtifactError
        Not such a file, another configuration, or an incompatible format version.
    """
    from .. import __version__

    p = Path(path)
    if p.is_dir():
        raise IncompatibleArtifactError(
            f"{p}: is a folder, not a posterior file; give the .nc file that "
            f"{step('bayes-microbench fit --output', 'IRTModel.save')} wrote "
            "(e.g. models/gpqa-2pl.nc)"
        )
    if not p.exists():
        raise IncompatibleArtifactError(
            f"{p}: no such file; fit a posterior with "
            + step(f"bayes-microbench fit --output {p}", f"IRTModel(responses).fit().save('{p}')")
        )
    try:
        tree = xr.open_datatree(p, engine=_engine())
        tree.load()
        tree.close()
    except (OSError, ValueError) as err:
        raise IncompatibleArtifactError(
            f"{p}: cannot be read as a NetCDF posterior ({type(err).__name__}): the file is "
            "damaged (e.g. a truncated copy) or not a posterior written by this tool; write "
            f"it again with {step('bayes-microbench fit --output', 'IRTModel.save')}, "
            "or for models/*.nc rebuild it "
            "with 'python -m bayes_microbench.irt.build_models'"
        ) from None
    attrs = tree.attrs
    if "config_json" not in attrs or "format_version" not in attrs:
        raise IncompatibleArtifactError(
            f"{p}: not a bayes_microbench posterior (no configuration attrs); "
            "fit one with "
            f"{step('bayes-microbench fit', 'IRTModel(responses).fit().save(path)')}"
        )
    version = int(attrs["format_version"])
    if version != FORMAT_VERSION:
        raise IncompatibleArtifactError(
            f"{p}: saved in posterior format {version} by bayes_microbench "
            f"{attrs.get('package_version', '?')}; this version ({__version__}) reads format "
            f"{FORMAT_VERSION}; refit with this version"
        )
    stored_hash = str(attrs.get("config_hash", ""))
    actual = IRTConfig.from_dict(json.loads(attrs["config_json"]))
    if actual.hash() != stored_hash:
        raise IncompatibleArtifactError(
            f"{p}: its configuration does not match its stored hash (file edited or corrupt); refit"
        )
    if config is not None:
        want = config if isinstance(config, IRTConfig) else IRTConfig.from_dict(config)
        if want.hash() != stored_hash:
            diff = {
                k: (v, want.to_dict()[k])
                for k, v in actual.to_dict().items()
                if want.to_dict()[k] != v
            }
            raise IncompatibleArtifactError(
                f"{p}: fitted with another configuration (file vs requested: {diff}); "
                "refit with the requested configuration or load without config="
            )
    if "posterior" not in tree.children:
        raise IncompatibleArtifactError(f"{p}: no posterior group")
    if int(attrs.get("compact", 0)):
        if "log_discrimination" not in tree["posterior"].data_vars:
            raise IncompatibleArtifactError(
                f"{p}: marked compact but has no 'log_discrimination'; the file is damaged, "
                "write it again"
            )
        tree = _expand_compact(tree)
    return FittedIRT(tree, p)
