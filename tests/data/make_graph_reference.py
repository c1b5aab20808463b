"""Record every IRT graph's free variables, log density and gradient norm into a JSON fixture.

Run from the repository root: ``.venv/bin/python tests/data/make_graph_reference.py``. It
builds each (model, parameterization, prior, missing) combination of :data:`CASES` on a
small seeded simulated matrix in float64, evaluates the model's joint log density and its
gradient at a seeded point (the initial point plus seeded noise), and writes
``tests/data/graph_reference.json`` with the commit it ran at.
``tests/test_graph_reference.py`` rebuilds each graph with the current code and compares.

Why: the graph builders were restructured into blocks (docs/decisions/0025); the built
graph must stay the same for every parameterization.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "graph_reference.json"

#: (model, prior, parameterization, missing rate, n_options): every combination the
#: builders accept, dense and gathered, fixed and learned 3PL floors.
CASES: list[tuple[str, str, str, float, int | None]] = [
    *(
        (model, prior, param, missing, None)
        for model in ("1pl", "2pl", "3pl")
        for prior in ("lognormal", "truncated-normal")
        for param in ("decoupled", "non-centered")
        for missing in (0.0, 0.7)
        if not (model == "1pl" and prior == "truncated-normal")
    ),
    *(
        (model, "lognormal", "decoupled-nc", missing, None)
        for model in ("2pl", "3pl")
        for missing in (0.0, 0.3, 0.7)
    ),
    # fixed 3PL floors (1/4 for every item)
    *(
        ("3pl", prior, param, 0.0, 4)
        for prior in ("lognormal", "truncated-normal")
        for param in ("decoupled", "non-centered")
    ),
    ("3pl", "lognormal", "decoupled-nc", 0.0, 4),
    # the multidimensional 2PL
    *(
        ("2pl-md", "lognormal", param, missing, None)
        for param in ("centered", "non-centered")
        for missing in (0.0, 0.7)
    ),
]


def case_key(case: tuple[str, str, str, float, int | None]) -> str:
    """The fixture key of a case: ``model/prior/parameterization/missing/n_options``."""
    model, prior, param, missing, k = case
    return f"{model}/{prior}/{param}/{missing}/{k}"


def responses_for(missing: float, n_options: int | None) -> Any:
    """The seeded simulated matrix every case is built on (14 llms x 16 items, 2 subtasks)."""
    from bayes_microbench import simulate_responses
    from bayes_microbench.responses import Responses

    resp = simulate_responses(
        "gpqa", n_llms=14, n_items=16, model="2pl", n_subtasks=2, missing_rate=missing,
        random_seed=0,
    )  # fmt: skip
    if n_options is None:
        return Responses.from_arrays(
            resp.values, resp.llms, resp.items, subtask=resp.data["subtask"].values
        )
    return Responses.from_arrays(
        resp.values,
        resp.llms,
        resp.items,
        subtask=resp.data["subtask"].values,
        n_options=np.full(len(resp.items), n_options),
    )


def record(case: tuple[str, str, str, float, int | None]) -> dict[str, Any]:
    """Free variables (name -> shape), log density and gradient norm of one case's graph."""
    from bayes_microbench.irt import IRTModel

    model, prior, param, missing, k = case
    config: dict[str, Any] = {}
    if model in ("2pl", "3pl"):
        config["discrimination_prior"] = prior
    fit = IRTModel(responses_for(missing, k), model, config=config)
    pm_model = fit.build_model(parameterization=param, float32=False)
    rng = np.random.default_rng(1)
    start = pm_model.initial_point()
    # the noise in name order, so that the order the blocks create variables in does not matter
    point = {
        name: start[name] + 0.3 * rng.normal(size=np.shape(start[name])) for name in sorted(start)
    }
    # one function for both (one compilation): the graph's value, not its C speed
    f = pm_model.compile_fn([pm_model.logp(), pm_model.dlogp()], point_fn=True, mode="FAST_COMPILE")
    logp, grad = f(point)
    return {
        "free": {v.name: list(np.shape(start[v.name])) for v in pm_model.value_vars},
        "potentials": sorted(p.name for p in pm_model.potentials),
        "logp": float(logp),
        "grad_norm": float(np.linalg.norm(grad)),
        "dense": bool(fit.data.dense),
    }


def main() -> int:
    """Write :data:`FIXTURE` for every case; return the exit status."""
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=HERE
    ).stdout.strip()
    out = {"commit": commit, "cases": {case_key(c): record(c) for c in CASES}}
    FIXTURE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(CASES)} graphs to {FIXTURE} at {commit[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
