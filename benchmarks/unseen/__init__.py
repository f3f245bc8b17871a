"""Two small code bases for the run-or-skip evaluation, unlike examples/config_service.

``exprcalc``: a tokenizer, parser and evaluator of arithmetic expressions with
variables; ``series``: numeric kernels over series of floats (smoothing,
histograms, dot products). Each is one module whose five code updates are
textual patches (:data:`PATCHES`), loaded as separate modules so that old and
new code run in one process, their passes alternating, or written out as a
checkout with its pytest suite of inputs (:func:`checkout`), to be profiled in
a process of its own as a user's code is.
"""

from __future__ import annotations

import importlib.util
import pickle
import random
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
CODE_BASES = ("exprcalc", "series")
# update -> what it does; the same five kinds of change for both code bases
UPDATES = {
    "bottleneck": "adds statements: extra work on every input",
    "confined": "a slowdown of about 10% confined to one kind of input",
    "same_statements": "slower with the same statements executed",
    "refactor": "restructured code, the same work",
    "speedup": "less work on every input",
}

# A patch replaces the text from its first marker up to (not including) its second, or
# just the first marker when the second is None.
Patch = tuple[str, str | None, str]
PATCHES: dict[str, dict[str, list[Patch]]] = {
    "exprcalc": {
        # every token is checked against the operator table with a Python loop
        "bottleneck": [
            (
                "        tokens.append(token)\n",
                None,
                "        for known in OPERATORS:\n"
                "            if token == known:\n"
                "                break\n"
                "        tokens.append(token)\n",
            )
        ],
        # identifiers are normalised again (variable-heavy inputs only)
        "confined": [
            (
                "    return values[name]\n",
                None,
                "    name = name.strip().lower().upper().lower()\n    return values[name]\n",
            )
        ],
        # the digit test scans a tuple instead of hashing into a set: the same lines run
        "same_statements": [("DIGITS = frozenset(", None, "DIGITS = tuple(")],
        "refactor": [
            (
                "    for index in range(len(tokens)):\n        token = tokens[index]\n",
                None,
                "    for token in tokens:\n",
            )
        ],
        # tokens found by one regular expression instead of a loop over characters
        "speedup": [
            (
                "def tokenize(text):\n",
                "def postfix(",
                "def tokenize(text):\n    return TOKEN.findall(text)\n\n\n",
            )
        ],
    },
    "series": {
        # every input is first checked for NaN values
        "bottleneck": [
            (
                "    kind, data = argument\n",
                None,
                "    kind, data = argument\n"
                '    for value in data if kind != "dot" else data[0]:\n'
                "        if value != value:\n"
                '            raise ValueError("NaN in the input")\n',
            )
        ],
        # the bin position is computed through an extra float product (histograms only)
        "confined": [
            (
                "    position = int((value - low) / width)\n",
                None,
                "    position = int((value - low) / width * 1.0 + 0.0)\n",
            )
        ],
        # the dot product multiplies through method calls: the same statements run
        "same_statements": [
            (
                "        total += left[index] * right[index]\n",
                None,
                "        total += left[index].__mul__(right[index])\n",
            )
        ],
        "refactor": [
            (
                "        total += left[index] * right[index]\n",
                None,
                "        total = total + left[index] * right[index]\n",
            )
        ],
        # the histogram bins inline, the dot product in C
        "speedup": [
            (
                "        counts[bin_of(value, low, width, bins)] += 1\n",
                None,
                "        position = int((value - low) / width)\n"
                "        counts[position if position < bins else bins - 1] += 1\n",
            ),
            (
                "    total = 0.0\n    order = range(len(left))\n",
                "def run(",
                "    return sum(map(operator.mul, left, right))\n\n\n",
            ),
        ],
    },
}


def source(code_base: str, update: str | None = None) -> str:
    """The code base's source, with the update's patch applied (None: the old code)."""
    text = (HERE / f"{code_base}.py").read_text(encoding="utf-8")
    for start, end, replacement in PATCHES[code_base][update] if update else []:
        if text.count(start) != 1:
            raise ValueError(f"{code_base} {update}: the patch does not apply: {start!r}")
        begin = text.index(start)
        finish = text.index(end, begin) if end is not None else begin + len(start)
        text = text[:begin] + replacement + text[finish:]
    return text


def load(code_base: str, update: str | None = None) -> ModuleType:
    """The code base's module, with the update's patch applied (None: the old code)."""
    name = f"unseen_{code_base}_{update or 'baseline'}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    code = compile(source(code_base, update), f"{code_base}.py ({update or 'baseline'})", "exec")
    exec(code, module.__dict__)
    return module


Inputs = dict[str, tuple[str, object, float]]  # input id -> (kind, argument, size)


def inputs(code_base: str, per_kind: int = 20, seed: int = 1, scale: float = 1.0) -> Inputs:
    """Generated inputs of three kinds, sizes spread over a decade (times ``scale``)."""
    rng = random.Random(seed)
    module = load(code_base)
    made: Inputs = {}
    for kind in module.KINDS:
        for number in range(per_kind):
            size = max(2, int(10 ** rng.uniform(0, 1) * module.SMALLEST[kind] * scale))
            made[f"{kind}-{number:03d}"] = (kind, module.make_input(kind, size, rng), size)
    return made


def call(module: ModuleType, argument: object) -> Callable[[], object]:
    return lambda: module.run(argument)


# The suite of a checkout: one test, parametrized by input id; the size is reported once
# per input by a fixture, outside the profiled calls.
SUITE = """\
import pickle
from pathlib import Path

import pytest

from {code_base} import run

INPUTS = pickle.loads((Path(__file__).parent / "inputs.pickle").read_bytes())


@pytest.fixture(autouse=True)
def input_size(request, record_property):
    record_property("input_size", INPUTS[request.node.callspec.id][2])


@pytest.mark.parametrize(
    "argument", [pytest.param(argument, id=name) for name, (_, argument, _) in INPUTS.items()]
)
def test_input(argument):
    run(argument)
"""
SUITE_DIRECTORY = "tests"


def checkout(directory: Path, code_base: str, update: str | None, made: Inputs) -> Path:
    """Write the code base (with the update's patch) into ``directory`` as a project with
    its pytest suite of the inputs ``made``, as a user's checkout would hold them."""
    tests = directory / SUITE_DIRECTORY
    tests.mkdir(parents=True)
    (directory / f"{code_base}.py").write_text(source(code_base, update), encoding="utf-8")
    # the suite uses no hypothesis: its plugin would add a second to every process start
    (directory / "pytest.ini").write_text(
        f"[pytest]\ntestpaths = {SUITE_DIRECTORY}\naddopts = -p no:hypothesispytest\n"
    )
    (tests / "test_inputs.py").write_text(SUITE.format(code_base=code_base), encoding="utf-8")
    (tests / "inputs.pickle").write_bytes(pickle.dumps(made))
    return directory


def node_id(input_id: str) -> str:
    """The pytest node id of an input in a checkout's suite."""
    return f"{SUITE_DIRECTORY}/test_inputs.py::test_input[{input_id}]"
