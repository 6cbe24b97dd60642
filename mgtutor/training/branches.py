"""Read a worker script for what breaks a job's sequence of collectives, without running it.

Every worker of a data-parallel job must make the same collectives in the same order: the
all-reduce of each step, the reductions of an evaluation, the reads of a save. A branch on the
worker's index (``if is_chief:``, ``if worker == 1: continue``) that holds one, or skips past
one, makes the workers' sequences part: a hang, or collectives silently paired with the wrong
ones (lesson 15). `read_script` finds such branches with Python's own parser: which names hold
the worker's index (assigned from ``task_id``, ``is_chief``, ``worker_index()`` ...), and which
calls are collectives (``strategy.run``, ``fit``, ``evaluate``, ``save`` ..., and the functions
of the script, or of the modules beside it, that make them). Values that went through a
collective (gathered, reduced) are the same on every worker and hold no index any more.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Where a worker's place in the job comes from: names, attributes and calls.
RANK_SOURCES = frozenset({
    "task_id", "task_index", "worker_index", "is_chief", "replica_id_in_sync_group", "TF_CONFIG",
    "rank", "local_rank", "RANK", "LOCAL_RANK", "process_index", "input_pipeline_id",
})  # fmt: skip
# Methods that every worker must call together under a multi-worker strategy.
COLLECTIVE_METHODS = frozenset({
    "run", "reduce", "gather", "all_reduce", "all_gather", "batch_reduce_to", "merge_call",
    "fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "apply_gradients", "apply",
    "save", "save_weights", "write", "barrier", "broadcast", "experimental_distribute_dataset",
    "distribute_datasets_from_function", "experimental_distribute_values_from_function",
})  # fmt: skip
# Receivers whose methods of those names are not collectives (np.save, json.dump, a file's write).
PLAIN_RECEIVERS = frozenset({
    "np", "numpy", "json", "pickle", "os", "shutil", "plt", "fig", "figure", "Path", "pathlib", "file",
    "handle", "f", "out", "sys", "stdout", "stderr", "logging", "logger", "log", "csv", "writer", "pd",
})  # fmt: skip
JUMPS = (ast.Continue, ast.Break, ast.Return)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class Branch:
    """A branch on the worker's index that parts the workers' collectives."""

    line: int  # the ``if``, ``while`` or ``for`` that depends on the worker
    test: str  # its condition (or the loop's range), as written
    what: str  # what parts: "calls `evaluate` (line 31)", "skips the rest of the loop (`continue`, line 22)"
    collective_line: int  # a collective the branch holds or skips past


def _call_name(call: ast.Call) -> tuple[str | None, str | None]:
    """(receiver, name) of a call: ``strategy.run(...)`` -> ("strategy", "run"); ``f(...)`` -> (None, "f")."""
    func = call.func
    if isinstance(func, ast.Attribute):
        receiver = func.value
        while isinstance(receiver, ast.Attribute):
            receiver = receiver.value
        return (receiver.id if isinstance(receiver, ast.Name) else None), func.attr
    if isinstance(func, ast.Name):
        return None, func.id
    return None, None


class _Facts:
    """What one reading of the script learnt: collective functions, and names holding the worker's index."""

    def __init__(self, collective_functions: set[str]) -> None:
        self.collective_functions = set(collective_functions)
        self.ranked: set[str] = set()

    def is_collective(self, call: ast.Call) -> bool:
        receiver, name = _call_name(call)
        if name is None:
            return False
        if isinstance(call.func, ast.Attribute):
            return name in COLLECTIVE_METHODS and receiver not in PLAIN_RECEIVERS
        return name in self.collective_functions

    def collectives_in(self, nodes: list[ast.AST]) -> list[ast.Call]:
        found = []
        for node in nodes:
            found += [n for n in ast.walk(node) if isinstance(n, ast.Call) and self.is_collective(n)]
        return sorted(found, key=lambda n: n.lineno)

    def ranked_expression(self, node: ast.AST) -> bool:
        """Whether `node` depends on the worker's index (a collective's result does not)."""
        if isinstance(node, ast.Call) and self.is_collective(node):
            return False
        if isinstance(node, ast.Name) and (node.id in self.ranked or node.id in RANK_SOURCES):
            return True
        if isinstance(node, ast.Attribute) and node.attr in RANK_SOURCES:
            return True
        if isinstance(node, ast.Constant) and node.value in RANK_SOURCES:
            return True  # os.environ["RANK"], os.environ.get("TF_CONFIG")
        return any(self.ranked_expression(child) for child in ast.iter_child_nodes(node))

    def learn_assignment(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        if value is None:
            return
        for target in targets:
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                for element, part in zip(target.elts, value.elts, strict=False):
                    self._mark(element, part)
            else:
                self._mark(target, value)
            if isinstance(value, ast.Call) and value.func is not None:
                _, name = _call_name(value)
                if name in self.collective_functions:  # a factory of steps: what it returns makes collectives
                    self.collective_functions |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}

    def _mark(self, target: ast.AST, value: ast.AST) -> None:
        names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        if self.ranked_expression(value):
            self.ranked |= names
        else:
            self.ranked -= names


def _functions_with_collectives(trees: list[ast.Module]) -> set[str]:
    """Names of the functions (in `trees`) whose bodies make a collective, directly or through another."""
    defined = {
        node.name: node
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    found: set[str] = set()
    while True:
        facts = _Facts(found)
        more = {n for n, node in defined.items() if n not in found and facts.collectives_in(node.body)}
        if not more:
            return found
        found |= more


def _neighbour_modules(tree: ast.Module, folder: Path) -> list[ast.Module]:
    """The modules the script imports from its own folder (``from drill_steps import ...``), parsed."""
    trees = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            path = folder / (node.module.replace(".", "/") + ".py")
            if path.is_file():
                try:
                    trees.append(ast.parse(path.read_text(encoding="utf-8"), str(path)))
                except SyntaxError:
                    continue
    return trees


def _jumps(nodes: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The continue/break/return statements in `nodes`, not inside a nested loop or function."""
    for node in nodes:
        if isinstance(node, JUMPS):
            yield node
        elif not isinstance(node, (ast.For, ast.While, *SCOPES)):
            for field in ("body", "orelse", "handlers", "finalbody"):
                yield from _jumps([n for n in getattr(node, field, []) if isinstance(n, ast.stmt)])


def _source(node: ast.AST, text: str) -> str:
    return (ast.get_source_segment(text, node) or "").splitlines()[0] if node else ""


def _branches(body: list[ast.stmt], facts: _Facts, text: str, loop: ast.AST | None) -> Iterator[Branch]:
    """Walk statements in order, learning assignments, and yield the branches that part collectives."""
    for node in body:
        for assignment in (n for n in ast.walk(node) if isinstance(n, ast.NamedExpr)):
            facts.learn_assignment(assignment)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            facts.learn_assignment(node)
        if isinstance(node, ast.If | ast.While) and facts.ranked_expression(node.test):
            yield from _parted(node, facts, text, loop)
        if isinstance(node, ast.For) and facts.ranked_expression(node.iter):
            held = facts.collectives_in(node.body)
            if held:
                what = (
                    f"runs a number of times that depends on the worker, and calls "
                    f"`{_call_name(held[0])[1]}` (line {held[0].lineno}) each time"
                )
                yield Branch(node.lineno, _source(node.iter, text), what, held[0].lineno)
        # A function's body is read where it is defined, as its own scope: no loop around it.
        scope = None if isinstance(node, SCOPES) else loop
        inner_loop = node if isinstance(node, ast.For | ast.While) else scope
        for field in ("body", "orelse", "handlers", "finalbody"):
            children = [n for n in getattr(node, field, []) if isinstance(n, ast.stmt)]
            if children:
                yield from _branches(children, facts, text, inner_loop)


def _parted(node: ast.If | ast.While, facts: _Facts, text: str, loop: ast.AST | None) -> Iterator[Branch]:
    test = _source(node.test, text)
    held = facts.collectives_in(node.body) or facts.collectives_in(node.orelse)
    if held:
        call = held[0]
        yield Branch(node.lineno, test, f"calls `{_call_name(call)[1]}` (line {call.lineno}), a collective, "
                     "on only the workers that take this branch", call.lineno)  # fmt: skip
        return
    jumps = list(_jumps(node.body)) + list(_jumps(node.orelse))
    if jumps and loop is not None:
        skipped = facts.collectives_in(loop.body)
        if skipped:
            jump = jumps[0]
            word = type(jump).__name__.lower()
            what = (
                f"skips the rest of the loop on only some workers (`{word}`, line {jump.lineno}), past "
                f"`{_call_name(skipped[-1])[1]}` (line {skipped[-1].lineno})"
            )
            yield Branch(node.lineno, test, what, skipped[-1].lineno)


def read_script(path: str | Path) -> list[Branch]:
    """The branches of the script at `path` that part its workers' collectives, in line order.

    Raises ``SyntaxError`` (with the file and line) if the script is not valid Python.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    facts = _Facts(_functions_with_collectives([tree, *_neighbour_modules(tree, path.parent)]))
    found = {(b.line, b.what): b for b in _branches(tree.body, facts, text, None)}
    return sorted(found.values(), key=lambda b: b.line)


def uses(path: str | Path, names: set[str]) -> dict[str, int]:
    """Which of `names` the script calls (as functions or methods), each with its first line."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), str(path))
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            _, name = _call_name(node)
            if name in names and (name not in found or node.lineno < found[name]):
                found[name] = node.lineno
    return found
