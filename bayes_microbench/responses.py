"""The response data model: which llm got which item right.

A :class:`Responses` wraps an :class:`xarray.Dataset` with dims ``llm`` and
``item``:

``correct`` (llm, item), float64
    1.0 (correct), 0.0 (wrong) or NaN (missing). Missing stays missing: no
    function of the package turns it into 0.
``confidence`` (llm, item), float64, optional
    The probability the llm gave to the correct answer (NaN where unknown).
``subtask`` (item), str coordinate
    The item's subtask (the benchmark name when it has none).
``n_options`` (item), int coordinate, optional
    Number of answer options (0 where unknown); sets guessing floors.

An llm or item with no observed cell carries no information and breaks
per-llm accuracies; the constructors drop them with a
:class:`~bayes_microbench.exceptions.DroppedDataWarning` that names each one
(``on_empty="raise"`` refuses instead).

Cell spellings
--------------
One set for every reader (wide and long, CSV, Parquet, data frames), so that the
same file means the same thing in either layout:

- correct / wrong: a number equal to 1 or 0 (``1``, ``0``, ``1.0``, ...) or
  ``true`` / ``false`` (any case; a boolean column counts too);
- missing: an empty cell or ``NA``, ``N/A``, ``NaN``, ``null``, ``None`` (any
  case, surrounding spaces ignored);
- anything else is an error naming the llm, the item and the value.

Confidences and ``n_options`` are numbers with the same missing spellings.
An llm, item or subtask name spelled like a missing value counts as blank.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import xarray as xr

from ._validate import check_unique, preview, show_value
from .exceptions import DroppedDataWarning, ResponsesError

EmptyPolicy = Literal["drop", "subset", "raise"]
Labels = Sequence[Any] | np.ndarray


MISSING_SPELLINGS: frozenset[str] = frozenset({"", "na", "n/a", "nan", "null", "none"})
"""Cell texts read as missing, compared after stripping spaces and lower-casing."""
BOOLEAN_SPELLINGS: dict[str, float] = {"true": 1.0, "false": 0.0}
"""Texts read as correct / wrong besides the numbers 1 and 0 (compared lower-cased)."""
_MISSING_NOTE = "NA, N/A, NaN, null and None, in any case, mean missing"
EXPECTED = {
    "binary": f"1, 0 or empty (true / false also read as 1 / 0; {_MISSING_NOTE})",
    "unit": f"a number in [0, 1] or empty ({_MISSING_NOTE})",
}
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def is_missing(value: Any) -> bool:
    """Whether a cell or label is missing: None, NaN, pd.NA or a missing spelling."""
    if isinstance(value, str):
        return value.strip().lower() in MISSING_SPELLINGS
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, (float, np.floating)) and bool(np.isnan(value))


def _cell_float(value: Any, kind: str) -> float | None:
    """One cell as a float (NaN when missing), or None when it is not a valid spelling."""
    if isinstance(value, str):
        text = value.strip()
        low = text.lower()
        if low in MISSING_SPELLINGS:
            return np.nan
        if kind == "binary" and low in BOOLEAN_SPELLINGS:
            return BOOLEAN_SPELLINGS[low]
        return float(text) if _NUMBER.fullmatch(text) else None
    if isinstance(value, (bool, np.bool_)):
        return float(value) if kind == "binary" else None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if value is None or value is pd.NA or value is pd.NaT:
        return np.nan
    return None


def cell_number(value: Any) -> float | None:
    """A numeric cell (``n_options``, a count) as a float, NaN when missing, None when not a number."""
    return _cell_float(value, "number")


def parse_cells(values: Any, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Read cells with the package's one set of spellings (see the module docstring).

    Parameters
    ----------
    values
        An array, Series or DataFrame of cells (numbers, booleans, text, None).
    kind
        ``"binary"`` (correct: 1 / 0 / true / false) or ``"unit"`` (a confidence in [0, 1]).

    Returns
    -------
    The cells as float64 (NaN where missing, same shape) and a mask of invalid cells
    (text that is no valid spelling, or a number outside what ``kind`` allows).
    Every reader goes through here, so one file means the same in every layout.
    """
    frame = values if isinstance(values, pd.DataFrame) else None
    series = values if isinstance(values, pd.Series) else None
    dtypes = (
        list(frame.dtypes) if frame is not None else [series.dtype] if series is not None else []
    )
    arr: np.ndarray | None = None
    if dtypes and all(
        pd.api.types.is_numeric_dtype(d) and (kind == "binary" or not pd.api.types.is_bool_dtype(d))
        for d in dtypes
    ):
        arr = values.to_numpy(dtype=np.float64, na_value=np.nan)
        unparsable = np.zeros(arr.shape, dtype=bool)
    else:
        raw = values.to_numpy(dtype=object) if dtypes else np.asarray(values)
        if raw.dtype.kind in "fiu" or (raw.dtype.kind == "b" and kind == "binary"):
            arr = raw.astype(np.float64)
            unparsable = np.zeros(arr.shape, dtype=bool)
        else:
            flat = raw.astype(object).ravel()
            try:
                codes, uniques = pd.factorize(flat, use_na_sentinel=True)
            except TypeError:  # unhashable cells (lists in a Parquet column): one by one
                codes, uniques = np.arange(len(flat)), flat
            parsed = [_cell_float(u, kind) for u in uniques]
            table = np.array([np.inf if v is None else v for v in parsed] + [np.nan])
            bad_table = np.array([v is None for v in parsed] + [False])
            arr = table[codes].reshape(raw.shape)
            unparsable = bad_table[codes].reshape(raw.shape)
    return arr, unparsable | ~_valid_mask(arr, kind)


def show_cell(value: Any) -> str:
    """A cell as the user wrote it: a number plainly (``2``), other text quoted."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return show_value(float(value.strip()))
    return show_value(value)


def _as_labels(values: Labels, what: str, where: str) -> np.ndarray:
    raw = list(values)
    blank = [i for i, v in enumerate(raw) if is_missing(v)]
    if blank:
        raise ResponsesError(
            f"{where}: blank {what} at position(s) {preview(blank)} (counting from 0; "
            f"{', '.join(sorted(MISSING_SPELLINGS - {''}))} count as blank too); "
            f"every {what} needs a name"
        )
    labels = np.asarray([str(v) for v in raw], dtype=object)
    check_unique(list(labels), f"{what}s", where, ResponsesError)
    return labels


def _bad_cells(
    values: np.ndarray,
    llms: np.ndarray,
    items: Labels,
    allowed: str,
    where: str,
    what: str,
    invalid: np.ndarray | None = None,
    raw: np.ndarray | None = None,
) -> ResponsesError:
    """The error naming the first invalid cell (row-major), with the count of all of them."""
    if invalid is None:
        invalid = ~_valid_mask(values, allowed)
    rows, cols = np.nonzero(invalid)
    r, c = int(rows[0]), int(cols[0])
    n_bad = len(rows)
    more = f" ({n_bad} such cells in all)" if n_bad > 1 else ""
    shown = show_cell(raw[r, c]) if raw is not None else show_value(values[r, c])
    return ResponsesError(
        f"{where}: {what} for llm {llms[r]!r}, item {items[c]!r} is {shown}; "
        f"expected {EXPECTED[allowed]}{more}; fix that cell"
    )


def _valid_mask(values: np.ndarray, allowed: str) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        if allowed == "binary":
            return np.isnan(values) | (values == 0.0) | (values == 1.0)
        return np.isnan(values) | ((values >= 0.0) & (values <= 1.0))


@dataclass(frozen=True, eq=False)
class Responses:
    """An llm x item matrix of 1 / 0 / missing responses, with item metadata.

    Build one with :meth:`from_arrays`, :meth:`from_wide` or :meth:`from_long`,
    or read a file with :func:`bayes_microbench.io.load_responses`.
    """

    data: xr.Dataset

    # ------------------------------------------------------------------ build
    @classmethod
    def from_arrays(
        cls,
        correct: np.ndarray,
        llms: Labels,
        items: Labels,
        *,
        subtask: Labels | None = None,
        confidence: np.ndarray | None = None,
        n_options: Sequence[int] | np.ndarray | None = None,
        benchmark: str = "benchmark",
        on_empty: EmptyPolicy = "drop",
        where: str = "responses",
    ) -> Responses:
        """Validate arrays and build a :class:`Responses`.

        ``correct`` holds 1, 0 or NaN; ``subtask`` defaults to ``benchmark``
        for every item; ``n_options`` uses 0 for "unknown".
        """
        values = np.array(correct, dtype=np.float64, copy=True)
        if values.ndim != 2:
            raise ResponsesError(
                f"{where}: the response matrix must be 2-D (llm x item), got {values.ndim}-D"
            )
        llm_labels = _as_labels(llms, "llm", where)
        item_labels = _as_labels(items, "item id", where)
        if values.shape != (len(llm_labels), len(item_labels)):
            raise ResponsesError(
                f"{where}: matrix shape {values.shape} does not match {len(llm_labels)} llms x "
                f"{len(item_labels)} items"
            )
        if values.size == 0:
            raise ResponsesError(f"{where}: the response matrix is empty (no llms or no items)")
        if not _valid_mask(values, "binary").all():
            raise _bad_cells(values, llm_labels, item_labels, "binary", where, "value")

        if subtask is None:
            sub = np.full(len(item_labels), benchmark, dtype=object)
        else:
            raw_sub = list(subtask)
            if len(raw_sub) != len(item_labels):
                raise ResponsesError(
                    f"{where}: {len(raw_sub)} subtask labels for {len(item_labels)} items"
                )
            sub = np.asarray([str(s) for s in raw_sub], dtype=object)
            blank = [item_labels[i] for i, s in enumerate(raw_sub) if is_missing(s)]
            if blank:
                raise ResponsesError(
                    f"{where}: items without a subtask {preview(blank)}; give each item one"
                )

        conf = None
        if confidence is not None:
            conf = np.array(confidence, dtype=np.float64, copy=True)
            if conf.shape != values.shape:
                raise ResponsesError(
                    f"{where}: confidence shape {conf.shape} differs from responses {values.shape}"
                )
            if not _valid_mask(conf, "unit").all():
                raise _bad_cells(conf, llm_labels, item_labels, "unit", where, "confidence")
            conf[np.isnan(values)] = np.nan
            if np.isnan(conf).all():
                conf = None

        opts = None
        if n_options is not None:
            opts = np.asarray(n_options)
            if opts.shape != (len(item_labels),):
                raise ResponsesError(
                    f"{where}: {opts.shape[0]} n_options for {len(item_labels)} items"
                )
            parsed = [_cell_float(v, "number") for v in opts]
            nums = np.array([np.nan if v is None else v for v in parsed], dtype=np.float64)
            nums[np.isnan(nums) & np.array([v is not None for v in parsed])] = 0.0
            with np.errstate(invalid="ignore"):
                ok = np.isfinite(nums) & (nums == np.round(nums)) & ((nums == 0) | (nums >= 2))
            if not ok.all():
                bad_i = np.nonzero(~ok)[0]
                raise ResponsesError(
                    f"{where}: n_options of item {item_labels[bad_i[0]]!r} is "
                    f"{show_cell(opts[bad_i[0]])}; expected a whole number >= 2 or empty "
                    f"(bad for items {preview(item_labels[bad_i])})"
                )
            opts = nums.astype(np.int64)

        observed = ~np.isnan(values)
        empty_llm = ~observed.any(axis=1)
        empty_item = ~observed.any(axis=0)
        if empty_llm.any() or empty_item.any():
            parts = []
            if empty_llm.any():
                parts.append(f"llms {preview(llm_labels[empty_llm])}")
            if empty_item.any():
                parts.append(f"items {preview(item_labels[empty_item])}")
            msg = f"{where}: no observed response for " + " and ".join(parts)
            if on_empty == "raise":
                raise ResponsesError(msg + "; remove them or pass on_empty='drop'")
            keep_l, keep_i = ~empty_llm, ~empty_item
            if not keep_l.any() or not keep_i.any():
                raise ResponsesError(f"{where}: the response matrix has no observed cell")
            # said once, as a warning (the CLI prints it as one line); not logged as well.
            # "subset": the llms answered a subset of a benchmark, so unasked items are
            # expected and dropped without a word; an llm with no answer is still said
            if on_empty != "subset":
                warnings.warn(msg + "; dropped them", DroppedDataWarning, stacklevel=2)
            elif empty_llm.any():
                warnings.warn(
                    f"{where}: no observed response for llms {preview(llm_labels[empty_llm])}; "
                    "dropped them",
                    DroppedDataWarning,
                    stacklevel=2,
                )
            values = values[np.ix_(keep_l, keep_i)]
            llm_labels, item_labels, sub = llm_labels[keep_l], item_labels[keep_i], sub[keep_i]
            if conf is not None:
                conf = conf[np.ix_(keep_l, keep_i)]
            if opts is not None:
                opts = opts[keep_i]

        coords: dict[str, Any] = {
            "llm": ("llm", llm_labels),
            "item": ("item", item_labels),
            "subtask": ("item", sub),
        }
        if opts is not None:
            coords["n_options"] = ("item", opts)
        data_vars: dict[str, Any] = {"correct": (("llm", "item"), values)}
        if conf is not None:
            data_vars["confidence"] = (("llm", "item"), conf)
        ds = xr.Dataset(data_vars, coords=coords, attrs={"benchmark": benchmark})
        return cls(ds)

    @classmethod
    def from_wide(
        cls,
        frame: pd.DataFrame,
        *,
        items: pd.DataFrame | None = None,
        confidence: pd.DataFrame | None = None,
        benchmark: str = "benchmark",
        on_empty: EmptyPolicy = "drop",
        where: str = "responses",
    ) -> Responses:
        """Build from a wide frame: column ``llm``, then one column per item id.

        Cells use the spellings of the module docstring. ``items`` is an optional
        frame with columns ``item, subtask[, n_options]`` covering exactly the
        matrix's item columns. ``confidence`` has the same layout as ``frame``
        (column ``llm``, then item columns); its llms must be llms of the matrix
        (each once) and its item columns items of the matrix; cells it lacks are
        unknown.
        """
        if frame.shape[1] == 0 or str(frame.columns[0]) != "llm":
            first = frame.columns[0] if frame.shape[1] else None
            raise ResponsesError(
                f"{where}: the first column must be 'llm' (got {first!r}); "
                "wide format is llm,<item id>,<item id>,..."
            )
        blank = [k + 2 for k, c in enumerate(frame.columns[1:]) if is_missing(c)]
        if blank:
            raise ResponsesError(
                f"{where}: blank item id heading column(s) {preview(blank)} (counting from 1); "
                "every column after 'llm' needs an item id"
            )
        item_cols = [str(c) for c in frame.columns[1:]]
        check_unique(item_cols, "item ids", where, ResponsesError)
        if frame.shape[0] == 0 or not item_cols:
            raise ResponsesError(f"{where}: the response matrix is empty (no llms or no items)")
        llms = _as_labels(frame.iloc[:, 0].to_numpy(dtype=object), "llm", where)
        block = frame.iloc[:, 1:]
        values, invalid = parse_cells(block, "binary")
        if invalid.any():
            raw = block.to_numpy(dtype=object)
            raise _bad_cells(values, llms, item_cols, "binary", where, "value", invalid, raw)
        subtask, n_options = _item_metadata(items, item_cols, where)
        conf = None
        if confidence is not None:
            conf = _confidence_block(confidence, llms, item_cols, where)
        return cls.from_arrays(
            values,
            llms,
            item_cols,
            subtask=subtask,
            confidence=conf,
            n_options=n_options,
            benchmark=benchmark,
            on_empty=on_empty,
            where=where,
        )

    @classmethod
    def from_long(
        cls,
        frame: pd.DataFrame,
        *,
        benchmark: str = "benchmark",
        on_empty: EmptyPolicy = "drop",
        where: str = "responses",
        row_names: Sequence[str] | None = None,
    ) -> Responses:
        """Build from a long table: ``llm, item, correct[, subtask, confidence, n_options]``.

        Cells use the spellings of the module docstring (the same as the wide
        format). Rows repeating an (llm, item) pair with the same values are kept
        once; rows that disagree are an error. Pairs without a row are missing.
        ``row_names`` names each row in messages (default ``row 1``, ``row 2``, ...;
        the CSV reader passes the file's line numbers).
        """
        known = ["llm", "item", "correct", "subtask", "confidence", "n_options"]
        names = [str(c) for c in frame.columns]
        check_unique([c for c in names if c in known], "columns", where, ResponsesError)
        absent = [c for c in known[:3] if c not in names]
        if absent:
            raise ResponsesError(
                f"{where}: long table lacks column(s) {absent}; expected "
                "llm,item,correct[,subtask,confidence,n_options]"
            )
        if frame.shape[0] == 0:
            raise ResponsesError(f"{where}: the response table is empty")
        df = frame.set_axis(names, axis=1)[[c for c in known if c in names]]

        def row(i: int) -> str:
            return row_names[i] if row_names is not None else f"row {i + 1}"

        for col in ("llm", "item"):
            labels = df[col]
            blank = labels.isna().to_numpy() | (
                labels.astype(str).str.strip().str.lower().isin(MISSING_SPELLINGS).to_numpy()
            )
            if blank.any():
                i = int(np.nonzero(blank)[0][0])
                raise ResponsesError(
                    f"{where}: {row(i)}: blank {col} ({show_cell(labels.iat[i])}); every row "
                    "needs an llm and an item"
                )
        df = df.assign(llm=df["llm"].astype(str), item=df["item"].astype(str))
        value_cols = ["correct"] + (["confidence"] if "confidence" in df.columns else [])
        parsed: dict[str, np.ndarray] = {}
        for col in value_cols:
            kind = "binary" if col == "correct" else "unit"
            parsed[col], invalid = parse_cells(df[col], kind)
            if invalid.any():
                bad = np.nonzero(invalid)[0]
                i = int(bad[0])
                more = f" ({len(bad)} such rows in all)" if len(bad) > 1 else ""
                raise ResponsesError(
                    f"{where}: {row(i)}: {col} for llm {df['llm'].iat[i]!r}, item "
                    f"{df['item'].iat[i]!r} is {show_cell(df[col].iat[i])}; expected "
                    f"{EXPECTED[kind]}{more}; fix that row"
                )
        df = df.assign(**parsed)
        _check_conflicts(df, ["llm", "item"], value_cols, where, "results")
        df = df.drop_duplicates(["llm", "item"])

        item_meta = [c for c in ("subtask", "n_options") if c in df.columns]
        item_order = pd.unique(df["item"])
        if item_meta:
            meta = df[["item", *item_meta]].drop_duplicates()
            _check_conflicts(meta, ["item"], item_meta, where, "item metadata")
            meta = meta.drop_duplicates("item").set_index("item").reindex(item_order)
        llm_order = pd.unique(df["llm"])
        wide = df.pivot(index="llm", columns="item", values="correct").reindex(
            index=llm_order, columns=item_order
        )
        conf = None
        if "confidence" in df.columns:
            conf = (
                df.pivot(index="llm", columns="item", values="confidence")
                .reindex(index=llm_order, columns=item_order)
                .to_numpy()
            )
        return cls.from_arrays(
            wide.to_numpy(dtype=np.float64),
            llm_order,
            item_order,
            subtask=meta["subtask"].to_numpy() if "subtask" in item_meta else None,
            confidence=conf,
            n_options=meta["n_options"].to_numpy() if "n_options" in item_meta else None,
            benchmark=benchmark,
            on_empty=on_empty,
            where=where,
        )

    # ------------------------------------------------------------ accessors
    @property
    def llms(self) -> np.ndarray:
        return self.data["llm"].to_numpy()

    @property
    def items(self) -> np.ndarray:
        return self.data["item"].to_numpy()

    @property
    def item_subtask(self) -> np.ndarray:
        """Each item's subtask label, in item order."""
        return self.data["subtask"].to_numpy()

    @property
    def subtasks(self) -> np.ndarray:
        """The distinct subtask labels, in order of first appearance."""
        return pd.unique(self.item_subtask)

    @property
    def subtask_codes(self) -> np.ndarray:
        """Each item's subtask as an integer index into :attr:`subtasks`."""
        codes, _ = pd.factorize(self.item_subtask)
        return codes

    @property
    def values(self) -> np.ndarray:
        """The llm x item matrix of 1.0 / 0.0 / NaN (a view: do not modify)."""
        return self.data["correct"].to_numpy()

    @property
    def observed(self) -> np.ndarray:
        """Boolean llm x item mask of observed cells."""
        return ~np.isnan(self.values)

    @property
    def confidence(self) -> np.ndarray | None:
        return self.data["confidence"].to_numpy() if "confidence" in self.data else None

    @property
    def n_options(self) -> np.ndarray | None:
        return self.data["n_options"].to_numpy() if "n_options" in self.data.coords else None

    @property
    def benchmark(self) -> str:
        return str(self.data.attrs.get("benchmark", "benchmark"))

    @property
    def n_llms(self) -> int:
        return int(self.data.sizes["llm"])

    @property
    def n_items(self) -> int:
        return int(self.data.sizes["item"])

    @property
    def n_subtasks(self) -> int:
        return len(self.subtasks)

    @property
    def n_missing(self) -> int:
        return int(np.isnan(self.values).sum())

    @property
    def is_complete(self) -> bool:
        return self.n_missing == 0

    def fingerprint(self) -> str:
        """SHA-256 of the response values, llm and item ids, subtasks and confidences.

        Why: saved results (protocol grids, model-choice candidates) name the data they
        were computed on, so a rerun on other data refuses them or recomputes.
        """
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.values).tobytes())
        for labels in (self.llms, self.items, self.item_subtask):
            h.update("\x1f".join(map(str, labels)).encode("utf-8"))
        if self.confidence is not None:
            h.update(np.ascontiguousarray(self.confidence).tobytes())
        return h.hexdigest()

    def accuracy(self) -> pd.Series:
        """Each llm's accuracy over its observed items."""
        return pd.Series(
            np.nanmean(self.values, axis=1), index=pd.Index(self.llms, name="llm"), name="accuracy"
        )

    def item_proportion_correct(self) -> pd.Series:
        """Each item's proportion of llms that got it right (observed cells only)."""
        return pd.Series(
            np.nanmean(self.values, axis=0),
            index=pd.Index(self.items, name="item"),
            name="p_correct",
        )

    @property
    def mean_accuracy(self) -> float:
        """The mean over llms of each llm's accuracy on its observed items."""
        return float(self.accuracy().mean())

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary (what ``bayes-microbench info --json`` prints)."""
        acc = self.accuracy()
        counts = pd.Series(self.item_subtask).value_counts(sort=False)
        return {
            "benchmark": self.benchmark,
            "n_llms": self.n_llms,
            "n_items": self.n_items,
            "n_subtasks": self.n_subtasks,
            "n_cells": self.n_llms * self.n_items,
            "n_missing": self.n_missing,
            "mean_accuracy": round(float(acc.mean()), 6),
            "min_accuracy": round(float(acc.min()), 6),
            "max_accuracy": round(float(acc.max()), 6),
            "has_confidence": self.confidence is not None,
            "has_n_options": self.n_options is not None,
            "subtasks": {str(k): int(v) for k, v in counts.items()},
        }

    # ------------------------------------------------------------ subsets
    def select(
        self, llms: Sequence[str] | None = None, items: Sequence[str] | None = None
    ) -> Responses:
        """The responses of the named llms on the named items (labels must exist)."""
        sel: dict[str, Any] = {}
        if llms is not None:
            sel["llm"] = self._labels_in(list(llms), self.llms, "llms")
        if items is not None:
            sel["item"] = self._labels_in(list(items), self.items, "item ids")
        return Responses(self.data.sel(sel))

    def isel(self, llm: Any = None, item: Any = None) -> Responses:
        """Positional subset (integer arrays, slices or boolean masks)."""
        sel = {k: v for k, v in (("llm", llm), ("item", item)) if v is not None}
        return Responses(self.data.isel(sel))

    @staticmethod
    def _labels_in(wanted: list[str], known: np.ndarray, what: str) -> list[str]:
        check_unique(wanted, what, "selection", ResponsesError)
        missing = sorted(set(wanted) - set(known.tolist()))
        if missing:
            raise ResponsesError(
                f"{what} not in responses: {preview(missing)} (responses have {len(known)} {what}: "
                f"{preview(known.tolist(), 2)})"
            )
        return wanted

    # ------------------------------------------------------------ export
    def to_wide(self) -> pd.DataFrame:
        """Wide frame: column ``llm`` then one nullable Int8 column per item."""
        block = pd.DataFrame(self.values, columns=self.items).astype("Int8")
        block.insert(0, "llm", self.llms)
        return block

    def items_frame(self) -> pd.DataFrame:
        """``item, subtask[, n_options]`` in matrix order."""
        frame = pd.DataFrame({"item": self.items, "subtask": self.item_subtask})
        if self.n_options is not None:
            frame["n_options"] = pd.array(
                np.where(self.n_options > 0, self.n_options, pd.NA), dtype="Int64"
            )
        return frame

    def to_long(self, *, dropna: bool = True) -> pd.DataFrame:
        """Long frame ``llm, item, subtask, correct[, confidence, n_options]``."""
        n_l, n_i = self.values.shape
        frame = pd.DataFrame(
            {
                "llm": np.repeat(self.llms, n_i),
                "item": np.tile(self.items, n_l),
                "subtask": np.tile(self.item_subtask, n_l),
                "correct": self.values.reshape(-1),
            }
        )
        if self.confidence is not None:
            frame["confidence"] = self.confidence.reshape(-1)
        if self.n_options is not None:
            frame["n_options"] = np.tile(self.n_options, n_l)
        if dropna:
            frame = frame[~np.isnan(frame["correct"].to_numpy())].reset_index(drop=True)
        frame["correct"] = frame["correct"].astype("Int8")
        return frame

    def __repr__(self) -> str:
        return (
            f"Responses({self.benchmark!r}: {self.n_llms} llms x {self.n_items} items, "
            f"{self.n_subtasks} subtask(s), {self.n_missing} missing, "
            f"mean accuracy {self.mean_accuracy:.3f})"
        )


# ---------------------------------------------------------------- helpers
def _confidence_block(
    confidence: pd.DataFrame, llms: np.ndarray, item_cols: list[str], where: str
) -> np.ndarray:
    """The confidences aligned to the matrix's llms and items (NaN where absent)."""
    here = f"{where} (confidences)"
    names = [str(c) for c in confidence.columns]
    if not names or names[0] != "llm":
        raise ResponsesError(f"{here}: the first column must be 'llm', like the matrix's")
    check_unique(names, "columns", here, ResponsesError)
    matrix_items, matrix_llms = set(item_cols), set(llms)
    extra = [c for c in names[1:] if c not in matrix_items]
    if extra:
        raise ResponsesError(f"{here}: item columns not in the matrix {preview(extra)}")
    conf_llms = _as_labels(confidence.iloc[:, 0].to_numpy(dtype=object), "llm", here)
    unknown = [llm for llm in conf_llms if llm not in matrix_llms]
    if unknown:
        raise ResponsesError(
            f"{here}: rows for llms not in the matrix {preview(unknown)}; "
            "give confidences only for the matrix's llms"
        )
    block = (
        confidence.set_axis(names, axis=1)
        .iloc[:, 1:]
        .set_axis(pd.Index(conf_llms), axis=0)
        .reindex(index=llms, columns=item_cols)
    )
    conf, invalid = parse_cells(block, "unit")
    if invalid.any():
        raw = block.to_numpy(dtype=object)
        raise _bad_cells(conf, llms, item_cols, "unit", where, "confidence", invalid, raw)
    return conf


def _item_metadata(
    items: pd.DataFrame | None, item_cols: list[str], where: str
) -> tuple[np.ndarray | None, np.ndarray | None]:
    if items is None:
        return None, None
    if "item" not in items.columns or "subtask" not in items.columns:
        raise ResponsesError(
            f"{where}: items file needs columns item,subtask[,n_options], got {list(items.columns)}"
        )
    ids = _as_labels(items["item"].to_numpy(dtype=object), "item id", f"{where} (items file)")
    matrix_ids, file_ids = set(item_cols), set(ids)
    extra = [i for i in ids if i not in matrix_ids]
    absent = [i for i in item_cols if i not in file_ids]
    if extra or absent:
        parts = []
        if absent:
            parts.append(f"matrix columns missing from the items file {preview(absent)}")
        if extra:
            parts.append(f"items-file ids not in the matrix {preview(extra)}")
        raise ResponsesError(f"{where}: items file does not match the matrix: " + "; ".join(parts))
    meta = items.assign(item=list(ids)).set_index("item").reindex(item_cols)
    n_options = meta["n_options"].to_numpy() if "n_options" in meta.columns else None
    return meta["subtask"].to_numpy(), n_options


def _check_conflicts(
    df: pd.DataFrame, keys: list[str], values: list[str], where: str, what: str
) -> None:
    dup = df[df.duplicated(keys, keep=False)]
    if dup.empty:
        return
    distinct = dup.drop_duplicates([*keys, *values])
    clash = distinct[distinct.duplicated(keys, keep=False)]
    if clash.empty:
        return
    first = clash.iloc[0]
    key_text = ", ".join(f"{k} {first[k]!r}" for k in keys)
    shown = clash[(clash[keys] == first[keys]).all(axis=1)][values].to_dict("records")
    raise ResponsesError(
        f"{where}: conflicting duplicate {what} for {key_text}: {shown}; keep one result per "
        f"{' and '.join(keys)}"
    )
