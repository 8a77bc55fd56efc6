"""CodeQA: multiple-choice questions about a real Python source tree (an
installed package; by default the exactly pinned ``litellm``), generated from
its definitions and call sites: which file defines a function, which function
calls another, what a parameter's default is. Exact match on the letter."""

from __future__ import annotations

import ast
import functools
import importlib.util
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import CHARS_PER_TOKEN, SuiteError, Task, task_rng

NAME = "codeqa"
DEFAULT_LENGTHS = (8_000, 32_000, 128_000, 512_000, 1_000_000)
DEFAULT_PACKAGE = "litellm"
KINDS = ("defines", "calls", "default")
LETTERS = "ABCD"
_MAX_FILE_CHARS = 120_000


def file_header(path: str) -> str:
    return f"# ==== file: {path} ===="


@functools.lru_cache(maxsize=4)
def source_files(package: str) -> tuple[tuple[str, str], ...]:
    """(path relative to the package's parent, text) of every .py file, sorted."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SuiteError(f"The codeqa suite needs the installed Python package {package!r}; name another "
                         "with --codeqa-package.")
    root = Path(next(iter(spec.submodule_search_locations)))
    out = []
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if 200 <= len(text) <= _MAX_FILE_CHARS and "# ==== file:" not in text:
            out.append((path.relative_to(root.parent).as_posix(), text))
    if not out:
        raise SuiteError(f"The package {package!r} has no Python source files to ask about.")
    return tuple(out)


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return " " + metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


@dataclass
class _Index:
    """What the questions are drawn from: top-level functions and methods."""

    functions: list[tuple[str, str, list[tuple[str, str]]]] = field(default_factory=list)  # (path, qualname, defaults)
    defined_in: dict[str, set[str]] = field(default_factory=dict)  # simple name -> paths (nested defs too)
    callers: dict[str, set[tuple[str, str]]] = field(default_factory=dict)  # callee -> {(path, qualname)}


_Summary = tuple[frozenset[str], tuple[tuple[str, tuple[tuple[str, str], ...], frozenset[str]], ...]]


@functools.lru_cache(maxsize=4096)
def _summary(path: str, text: str) -> _Summary:
    """(every function name defined, (qualname, literal defaults, callees) of
    each top-level function and method) of one file; cached, since tasks of
    one length share many files. One walk of the tree."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return frozenset(), ()
    defined: set[str] = set()
    functions = []

    def walk(node: ast.AST, qualname: str | None) -> None:
        callees = set()
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defined.add(sub.name)
            elif qualname and isinstance(sub, ast.Call):
                callee = getattr(sub.func, "id", None) or getattr(sub.func, "attr", None)
                if callee:
                    callees.add(callee)
        if qualname:
            functions.append((qualname, tuple(_literal_defaults(node)), frozenset(callees)))

    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
            walk(top, top.name)
        elif isinstance(top, ast.ClassDef):
            for member in top.body:
                is_function = isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef))
                walk(member, f"{top.name}.{member.name}" if is_function else None)
        else:
            walk(top, None)
    return frozenset(defined), tuple(functions)


def _index(files: list[tuple[str, str]]) -> _Index:
    index = _Index()
    for path, text in files:
        defined, functions = _summary(path, text)
        for name in defined:
            index.defined_in.setdefault(name, set()).add(path)
        for qualname, defaults, callees in functions:
            index.functions.append((path, qualname, list(defaults)))
            for callee in callees:
                index.callers.setdefault(callee, set()).add((path, qualname))
    return index


def _options(rng: random.Random, right: str, wrong: list[str]) -> tuple[list[str], str] | None:
    wrong = sorted(set(wrong) - {right})
    if len(wrong) < 3:
        return None
    options = [right, *rng.sample(wrong, 3)]
    rng.shuffle(options)
    return options, LETTERS[options.index(right)]


def _defines(rng: random.Random, index: _Index, text: str) -> tuple[str, list[str], str] | None:
    paths = sorted({p for p, _, _ in index.functions})
    written = Counter(re.findall(r"\bdef (\w+)\(", text))  # one pass: the text may be 4 MB
    names = sorted(n for n, where in index.defined_in.items()
                   if len(where) == 1 and not n.startswith("__") and written[n] == 1)
    if not names:
        return None
    name = rng.choice(names)
    made = _options(rng, next(iter(index.defined_in[name])), paths)
    return None if made is None else (f"Which file defines the function `{name}`?", *made)


def _calls(rng: random.Random, index: _Index, text: str) -> tuple[str, list[str], str] | None:
    candidates = sorted(c for c, who in index.callers.items()
                        if len(who) == 1 and c in index.defined_in and not c.startswith("__"))
    if not candidates:
        return None
    callee = rng.choice(candidates)
    (caller,) = index.callers[callee]
    label = lambda item: f"{item[1]} (in {item[0]})"  # noqa: E731
    others = [label((p, q)) for p, q, _ in index.functions if (p, q) != caller]
    made = _options(rng, label(caller), others)
    return None if made is None else (f"Which of these functions calls `{callee}`?", *made)


def _literal_defaults(node: ast.AST) -> list[tuple[str, str]]:
    args = node.args  # type: ignore[attr-defined]
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    return [(a.arg, repr(d.value)) for a, d in pairs
            if isinstance(d, ast.Constant) and len(repr(d.value)) <= 40]


def _default(rng: random.Random, index: _Index, text: str) -> tuple[str, list[str], str] | None:
    seen: dict[tuple[str, str], int] = {}
    for path, qualname, _ in index.functions:
        seen[(path, qualname)] = seen.get((path, qualname), 0) + 1
    candidates = [(p, q, param, value) for p, q, defaults in index.functions if seen[(p, q)] == 1
                  for param, value in defaults]
    if not candidates:
        return None
    path, qualname, param, value = rng.choice(candidates)
    pool = sorted({v for _, _, _, v in candidates} | {"None", "True", "False", "0", "1", "''"})
    made = _options(rng, value, pool)
    question = f"In `{path}`, what is the default value of the parameter `{param}` of `{qualname}`?"
    return None if made is None else (question, *made)


_MAKERS = {"defines": _defines, "calls": _calls, "default": _default}


def _select(rng: random.Random, files: tuple[tuple[str, str], ...], chars: int) -> list[tuple[str, str]]:
    order = list(files)
    rng.shuffle(order)
    chosen, total = [], 0
    for path, text in order:
        size = len(text) + len(file_header(path)) + 2
        if total + size <= chars:
            chosen.append((path, text))
            total += size
        if chars - total < 300:
            break
    return chosen


def generate(length: int, n: int, seed: int = 0, package: str = DEFAULT_PACKAGE) -> list[Task]:
    files = source_files(package)
    version = _version(package)
    tasks = []
    for index_ in range(n):
        rng = task_rng(f"{NAME}:{package}", seed, length, index_)
        first = KINDS[(index_ + seed) % len(KINDS)]
        kinds = [first, *(k for k in KINDS if k != first)]
        made = None
        for _attempt in range(20):
            chosen = _select(rng, files, length * CHARS_PER_TOKEN - 300)
            body = "\n\n".join(f"{file_header(p)}\n{t}" for p, t in chosen)
            index = _index(chosen)
            for kind in kinds:
                made = _MAKERS[kind](rng, index, body)
                if made:
                    break
            if made:
                break
        if made is None:
            raise SuiteError(f"Could not make a codeqa question at {length} tokens from {package!r}; "
                             "use a longer length or another --codeqa-package.")
        question, options, gold = made
        header = (f"The source of {len(chosen)} Python files of the package `{package}`{version}. "
                  "Each file starts with a line `# ==== file: PATH ====`.")
        lettered = "\n".join(f"{letter}) {option}" for letter, option in zip(LETTERS, options, strict=True))
        tasks.append(Task(
            suite=NAME, length=length, index=index_, context=f"{header}\n\n{body}",
            question=f"{question}\n{lettered}\nAnswer with the letter (A, B, C or D) only.",
            gold=gold, metric="choice",
            meta={"kind": kind, "package": package, "files": len(chosen), "options": options},
        ))
    return tasks
