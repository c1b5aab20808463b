"""Regenerate ``tests/fixtures/harness/`` from real runs of lm-evaluation-harness and inspect-ai.

The fixtures are what the harnesses themselves write, run offline with their fake models
(lm-eval ``--model dummy``, inspect-ai ``mockllm/model``) on tiny datasets this script writes;
nothing is edited after the run except that runs are copied under fixed folder names.

How to run, from the repository root (installs need PyPI once; the runs need no network)::

    python3.11 -m venv /tmp/lmeval-venv            # torch's CPU wheel here is for 3.11
    /tmp/lmeval-venv/bin/pip install torch==2.13.0 lm-eval==0.4.13 inspect-ai==0.3.285
    BMB_HARNESS_VENV=/tmp/lmeval-venv .venv/bin/python scripts/make_harness_fixtures.py

``BMB_HARNESS_VENV`` may list several environments separated by ``:`` (each harness is
taken from the first that has it). ``--out DIR`` writes elsewhere (default
``tests/fixtures/harness``, replaced whole). ``tests/test_importers_real.py`` imports the
committed fixtures in the default suite, and, with ``-m harness``, reruns these harnesses
through :func:`run_lm_eval` and :func:`run_inspect`.

Layout written (``<ts>`` is the run's timestamp)::

    lm_eval/out/fake__model-a/{results,samples_<task>}_<ts>.json[l]   tasks mini_mc (4 options,
        acc/acc_norm), mini_gen (exact_match), mini_mc2 (several correct options: acc is the
        probability mass on the true ones), mini_pairs (mcc and f1, logged as [gold, pred])
    lm_eval/json_output/my_eval_<ts>.json + samples_mini_mc_<ts>.jsonl   two models run with
        --output_path my_eval.json into one folder
    inspect/choice.eval         mini_choice, multiple choice, choice() scorer (zstd members)
    inspect/match_epochs.eval   mini_match, match() scorer, two epochs
    inspect/partial.json        mini_partial, a scorer giving C / P / I, JSON log format
    inspect/unscored.eval       mini_choice run with score=False
    inspect/header_only.eval    mini_choice run with log_samples=False
    inspect/errored.eval        mini_broken, whose solver raises: status 'error'
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "harness"
ENV_VAR = "BMB_HARNESS_VENV"
LM_EVAL_VERSION = "0.4.13"
INSPECT_VERSION = "0.3.285"
# lm-eval's dummy model ignores its model_args, but the run records them: the llm name.
MODEL_A = "fake/model-a"
MODEL_B = "fake/model-b"

# ------------------------------------------------------------------ datasets
MC_DOCS = [
    {"question": f"Q{i}?", "choices": ["alpha", "beta", "gamma", "delta"], "answer": i % 4}
    for i in range(6)
]
GEN_DOCS = [
    {"question": f"Say something {i}", "answer": "lol" if i % 2 == 0 else "no"} for i in range(4)
]
MC2_DOCS = [
    {"question": f"T{i}?", "choices": ["t1", "t2", "f1", "f2"], "labels": [1, 1, 0, 0]}
    for i in range(4)
]
PAIR_DOCS = [{"sentence": f"Sentence {i}.", "label": i % 2} for i in range(6)]

TASK_YAML = {
    "mini_mc": """\
task: mini_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/mc.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
  - metric: acc_norm
""",
    "mini_gen": """\
task: mini_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/gen.jsonl
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
metric_list:
  - metric: exact_match
""",
    "mini_mc2": """\
task: mini_mc2
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/mc2.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: 0
process_results: !function utils.process_mc2
metric_list:
  - metric: acc
""",
    "mini_pairs": """\
task: mini_pairs
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/pairs.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{sentence}}}} Acceptable?"
doc_to_choice: ["no", "yes"]
doc_to_target: label
metric_list:
  - metric: mcc
    aggregation: !function utils.corpus_agreement
  - metric: f1
    aggregation: !function utils.corpus_agreement
""",
}

# truthfulqa_mc2's scoring: the probability mass on the true options (target 0 is nominal).
# mcc / f1 get a plain aggregate: lm-eval's own ones bootstrap their standard error with
# scikit-learn for minutes; the per-item [gold, pred] pairs it logs are the same.
UTILS_PY = """\
import numpy as np


def corpus_agreement(items):
    return float(np.mean([gold == pred for gold, pred in items]))


def process_mc2(doc, results):
    lls = np.array([ll for ll, _ in results])
    labels = np.array(doc["labels"])
    p = np.exp(lls - lls.max())
    return {"acc": float(p[labels == 1].sum() / p.sum())}
"""

INSPECT_TASKS = """\
from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import (
    CORRECT, INCORRECT, PARTIAL, Score, Target, accuracy, choice, match, scorer,
)
from inspect_ai.solver import Generate, TaskState, generate, multiple_choice, solver


@task
def mini_choice():
    samples = [
        Sample(id=f"q{i}", input=f"Question {i}?", choices=["red", "green", "blue"],
               target="ABC"[i % 3])
        for i in range(4)
    ]
    return Task(dataset=MemoryDataset(samples), solver=multiple_choice(), scorer=choice())


@task
def mini_multi():
    samples = [
        Sample(id=f"m{i}", input=f"Question {i}? Pick every right one.",
               choices=["red", "green", "blue", "pink"],
               target=["A", "C"] if i % 2 == 0 else ["B"])
        for i in range(4)
    ]
    return Task(dataset=MemoryDataset(samples), solver=multiple_choice(multiple_correct=True),
                scorer=choice())


@task
def mini_match():
    samples = [
        Sample(id=i, input=f"Say something {i}", target="A")
        for i in range(1, 5)
    ]
    return Task(dataset=MemoryDataset(samples), solver=generate(), scorer=match())


@scorer(metrics=[accuracy()])
def thirds():
    async def score(state: TaskState, target: Target) -> Score:
        return Score(value=[CORRECT, PARTIAL, INCORRECT][int(state.sample_id) % 3])

    return score


@task
def mini_partial():
    samples = [Sample(id=i, input=f"Item {i}", target="x") for i in range(1, 4)]
    return Task(dataset=MemoryDataset(samples), solver=generate(), scorer=thirds())


@solver
def broken():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        raise RuntimeError("the solver failed on purpose")

    return solve


@task
def mini_broken():
    return Task(dataset=MemoryDataset([Sample(id=1, input="x", target="x")]), solver=broken(),
                scorer=match())
"""

# Runs one inspect task in the inspect environment: mockllm/model answers "ANSWER: A" to
# questions whose number is even, else "mockllm says B". Outputs carry their token usage,
# because mockllm otherwise counts tokens with tiktoken, which downloads its encoding.
INSPECT_DRIVER = """\
import json, re, sys
from inspect_ai import eval as inspect_eval
from inspect_ai.model import ModelOutput, ModelUsage, get_model

spec = json.loads(sys.argv[1])


def answer(messages, tools, tool_choice, config):
    text = " ".join(m.text for m in messages)
    number = int((re.findall(r"\\d+", text) or ["0"])[0])
    content = "ANSWER: A" if number % 2 == 0 else "mockllm says B"
    out = ModelOutput.from_content(model="mockllm/model", content=content)
    out.usage = ModelUsage(input_tokens=len(text.split()), output_tokens=3, total_tokens=3)
    return out


model = get_model("mockllm/model", custom_outputs=answer)
logs = inspect_eval(
    f"{spec['tasks_file']}@{spec['task']}", model=model, log_dir=spec["log_dir"],
    display="none", **spec.get("options", {}),
)
print(json.dumps([log.location for log in logs]))
"""


# ------------------------------------------------------------------ environments
def harness_python(module: str, venvs: str | None = None) -> Path | None:
    """The Python of the first environment in ``BMB_HARNESS_VENV`` that can import ``module``.

    Parameters
    ----------
    module
        ``"lm_eval"`` or ``"inspect_ai"``.
    venvs
        ``:``-separated environment folders; default: the ``BMB_HARNESS_VENV`` variable.

    Returns
    -------
    pathlib.Path or None
        None when no listed environment has it, so that a test can skip with the reason.
    """
    listed = os.environ.get(ENV_VAR, "") if venvs is None else venvs
    for folder in filter(None, listed.split(os.pathsep)):
        python = Path(folder) / "bin" / "python"
        if not python.is_file():
            continue
        probe = subprocess.run(
            [str(python), "-c", f"import {module}"], capture_output=True, check=False
        )
        if probe.returncode == 0:
            return python
    return None


def _offline_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        INSPECT_LOG_LEVEL="warning",
        INSPECT_DISPLAY="none",
    )
    return env


def _check(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{tail}")


# ------------------------------------------------------------------ lm-eval
def write_lm_eval_tasks(folder: Path) -> Path:
    """Write the tiny datasets and task YAMLs into ``folder`` (an ``--include_path``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, docs in (("mc", MC_DOCS), ("gen", GEN_DOCS), ("mc2", MC2_DOCS), ("pairs", PAIR_DOCS)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    for task, text in TASK_YAML.items():
        (folder / f"{task}.yaml").write_text(text.format(data=folder))
    (folder / "utils.py").write_text(UTILS_PY)
    return folder


def run_lm_eval(
    python: Path,
    tasks_dir: Path,
    output_path: Path,
    tasks: Sequence[str],
    *,
    model: str = MODEL_A,
    seed: int = 0,
    samples: dict[str, list[int]] | None = None,
) -> None:
    """Run ``lm_eval --model dummy`` on ``tasks`` with ``--log_samples`` into ``output_path``.

    ``samples`` maps a task to the doc ids to evaluate (lm-eval's ``--samples``).
    """
    cmd = [
        str(python), "-m", "lm_eval", "--model", "dummy",
        "--model_args", f"pretrained={model}", "--tasks", ",".join(tasks),
        "--include_path", str(tasks_dir), "--output_path", str(output_path),
        "--log_samples", "--seed", str(seed),
    ]  # fmt: skip
    if samples is not None:
        cmd += ["--samples", json.dumps(samples)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=_offline_env(), check=False, timeout=600
    )
    _check(proc, "lm_eval")


# ------------------------------------------------------------------ inspect
def write_inspect_tasks(folder: Path) -> Path:
    """Write the inspect task file and its driver into ``folder``; returns the task file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "inspect_driver.py").write_text(INSPECT_DRIVER)
    tasks_file = folder / "mini_tasks.py"
    tasks_file.write_text(INSPECT_TASKS)
    return tasks_file


def run_inspect(
    python: Path, tasks_file: Path, log_dir: Path, task: str, **options: object
) -> Path:
    """Run one inspect task with ``mockllm/model`` and return the log file it wrote.

    ``options`` go to ``inspect_ai.eval`` (``epochs``, ``sample_id``, ``log_format``,
    ``score``, ``log_samples``, ...).
    """
    spec = {
        "tasks_file": str(tasks_file),
        "task": task,
        "log_dir": str(log_dir),
        "options": options,
    }
    proc = subprocess.run(
        [str(python), str(tasks_file.parent / "inspect_driver.py"), json.dumps(spec)],
        capture_output=True, text=True, env=_offline_env(), check=False, timeout=600,
        cwd=tasks_file.parent,
    )  # fmt: skip
    _check(proc, f"inspect eval {task}")
    locations = json.loads(proc.stdout.strip().splitlines()[-1])
    return Path(locations[0].removeprefix("file://"))


# ------------------------------------------------------------------ all fixtures
def make_fixtures(out: Path, lm_python: Path | None, inspect_python: Path | None) -> None:
    """Run the harnesses and copy what they wrote under ``out`` (replaced whole)."""
    with tempfile.TemporaryDirectory(prefix="bmb-harness-") as tmp:
        work = Path(tmp)
        staged = work / "fixtures"
        if lm_python is not None:
            tasks_dir = write_lm_eval_tasks(work / "lm_tasks")
            run_lm_eval(
                lm_python, tasks_dir, staged / "lm_eval" / "out", list(TASK_YAML), model=MODEL_A
            )
            json_out = staged / "lm_eval" / "json_output" / "my_eval.json"
            run_lm_eval(lm_python, tasks_dir, json_out, ["mini_mc"], model=MODEL_A, seed=0)
            run_lm_eval(lm_python, tasks_dir, json_out, ["mini_mc"], model=MODEL_B, seed=7)
        if inspect_python is not None:
            tasks_file = write_inspect_tasks(work / "inspect_tasks")
            logs = work / "inspect_logs"
            target = staged / "inspect"
            target.mkdir(parents=True)
            runs: list[tuple[str, str, dict[str, object]]] = [
                ("choice.eval", "mini_choice", {}),
                ("multi.eval", "mini_multi", {}),
                ("match_epochs.eval", "mini_match", {"epochs": 2}),
                ("partial.json", "mini_partial", {"log_format": "json"}),
                ("unscored.eval", "mini_choice", {"score": False}),
                ("header_only.eval", "mini_choice", {"log_samples": False}),
                ("errored.eval", "mini_broken", {}),
            ]
            for name, task, options in runs:
                written = run_inspect(inspect_python, tasks_file, logs, task, **options)
                shutil.copyfile(written, target / name)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(staged, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--venv", default=None, help=f"environment folder(s), ':'-separated (default ${ENV_VAR})"
    )
    args = parser.parse_args(argv)
    lm_python = harness_python("lm_eval", args.venv)
    inspect_python = harness_python("inspect_ai", args.venv)
    if lm_python is None or inspect_python is None:
        missing = [n for n, p in (("lm_eval", lm_python), ("inspect_ai", inspect_python)) if not p]
        print(
            f"make_harness_fixtures: no environment in --venv / ${ENV_VAR} has {missing}; "
            f"install lm-eval=={LM_EVAL_VERSION} and inspect-ai=={INSPECT_VERSION} (see the "
            "top of this script)",
            file=sys.stderr,
        )
        return 2
    make_fixtures(args.out, lm_python, inspect_python)
    for path in sorted(args.out.rglob("*")):
        if path.is_file():
            print(
                f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}  "
                f"{path.stat().st_size} bytes"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
