"""Scripted root models that solve the long-context suites with real code.

Each solver reads the question out of the root request, and answers with
one ```repl block that works the answer out of ``context`` (regexes, ast,
llm_query_batched for the labels) and ends with ``answer["ready"] = True``,
which both our loop and the official rlms library accept. ``wrong=True``
spoils the answer in a known way, so the scorers can be seen to bite.
The sub-model answers label prompts by a rule: the true label of the verse.
"""

from __future__ import annotations

import re
from typing import Any

from rlm_kernel.bench.suites.records import labelled_texts
from rlm_kernel.bench.suites.systems import BASE_INSTRUCTIONS as BASE_MARK
from rlm_kernel.testing.server import Reply, all_text, prompt_text

ROOT_MODEL = "root-model"
SUB_MODEL = "sub-model"

_FINISH = """
if WRONG:
    result = spoil(result)
answer["content"] = result if isinstance(result, str) else str(result)
answer["ready"] = True
"""

SNIAH = r'''
import re
key = re.search(r"special magic number for (\S+) mentioned", QUESTION).group(1)
result = re.search(r"magic numbers for " + re.escape(key) + r" is: (\d{7})", context).group(1)
def spoil(value):
    return value[:-1] + str((int(value[-1]) + 1) % 10)
'''

MULTIHOP = r'''
import re
match = re.search(r"Who was the (.+?) of ([A-Z][a-z]+ [A-Z][a-z]+)\?", QUESTION)
relations = list(reversed(match.group(1).split(" of the ")))
person = match.group(2)
path = []
for relation in relations:
    pattern = r"the " + relation + r" of " + re.escape(person) + r" was ([A-Z][a-z]+ [A-Z][a-z]+)\."
    person = re.search(pattern, context).group(1)
    path.append(person)
result = person
def spoil(value):
    return path[-2]  # one hop short
'''

OOLONG_COMMON = r'''
import datetime as dt
import re
from collections import Counter
LABELS = ["law", "history", "wisdom", "prophets", "gospels", "letters"]
rows = re.findall(r"^Date: (.+?) \|\| User: (\d+) \|\| Instance: (.*)$", context, re.M)
texts = sorted({t for _, _, t in rows})
replies = llm_query_batched(["Which label fits this verse? Reply with the label only.\nText: " + t for t in texts])
label_of = {t: r.strip() for t, r in zip(texts, replies)}
records = [(dt.datetime.strptime(d, "%b %d, %Y").date(), int(u), label_of[t]) for d, u, t in rows]
ask = QUESTION.split("\n\n")[-1]
def day(text):
    return dt.datetime.strptime(text, "%b %d, %Y").date()
'''

OOLONG = OOLONG_COMMON + r'''
counts = Counter(label for _, _, label in records)
if m := re.search(r"instances from user (\d+) should be labelled '(\w+)'", ask):
    result = sum(1 for _, u, l in records if u == int(m.group(1)) and l == m.group(2))
elif m := re.search(r"instances dated after (.+?) should be labelled '(\w+)'", ask):
    result = sum(1 for d, _, l in records if d > day(m.group(1)) and l == m.group(2))
elif m := re.search(r"How many instances should be labelled '(\w+)'", ask):
    result = counts[m.group(1)]
elif m := re.search(r"Which label is the (most|least) common", ask):
    ranked = sorted(LABELS, key=lambda l: counts[l], reverse=m.group(1) == "most")
    result = ranked[0]
else:
    a, b = re.findall(r"label '(\w+)'", ask)[:2]
    result = ("more common than" if counts[a] > counts[b] else "less common than" if counts[a] < counts[b]
              else "same frequency as")
def spoil(value):
    if isinstance(value, int):
        return value + 1
    if value in LABELS:
        return LABELS[(LABELS.index(value) + 1) % len(LABELS)]
    return "same frequency as" if value != "same frequency as" else "more common than"
'''

OOLONG_PAIRS = OOLONG_COMMON + r'''
import itertools
users = sorted({u for _, u, _ in records})
after = None
if m := re.search(r"dated after (\w+ \d+, \d+)", ask):
    after = day(m.group(1))
profile = {u: Counter() for u in users}
for d, u, l in records:
    if after is None or d > after:
        profile[u][l] += 1
labels = re.findall(r"labelled '(\w+)'", ask)
a = labels[0]
b = labels[1] if len(labels) > 1 else None
if "or '" in ask:
    holds = lambda x, y: x[a] + x[b] > 0 and y[a] + y[b] > 0
elif "and at least one labelled" in ask:
    holds = lambda x, y: min(x[a], x[b], y[a], y[b]) > 0
elif "neither user" in ask:
    holds = lambda x, y: x[a] == 0 and y[a] == 0
elif "more instances labelled" in ask:
    holds = lambda x, y: x[a] > x[b] and y[a] > y[b]
elif "exactly one of the two" in ask:
    holds = lambda x, y: (x[a] > 0) != (y[a] > 0)
else:
    holds = lambda x, y: x[a] > 0 and y[a] > 0
pairs = [(x, y) for x, y in itertools.combinations(users, 2) if holds(profile[x], profile[y])]
result = "\n".join(f"({x}, {y})" for x, y in pairs)
def spoil(value):
    return "\n".join(value.splitlines()[:-1]) + "\n(1, 2)"  # one pair lost, one made up
'''

CODEQA = r'''
import ast
import re
parts = re.split(r"^# ==== file: (.+?) ====\n", context, flags=re.M)
files = dict(zip(parts[1::2], parts[2::2]))
options = dict(re.findall(r"^([ABCD])\) (.*)$", QUESTION, re.M))
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
def top_functions(tree):
    for top in tree.body:
        if isinstance(top, FUNCS):
            yield top.name, top
        elif isinstance(top, ast.ClassDef):
            for m in top.body:
                if isinstance(m, FUNCS):
                    yield f"{top.name}.{m.name}", m
def called(node):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            yield getattr(sub.func, "id", None) or getattr(sub.func, "attr", None)
result = None
if m := re.search(r"Which file defines the function `(\w+)`", QUESTION):
    for letter, path in options.items():
        if any(isinstance(n, FUNCS) and n.name == m.group(1) for n in ast.walk(ast.parse(files[path]))):
            result = letter
elif m := re.search(r"Which of these functions calls `(\w+)`", QUESTION):
    for letter, option in options.items():
        qualname, path = re.match(r"(\S+) \(in (.+)\)$", option).groups()
        node = dict(top_functions(ast.parse(files[path])))[qualname]
        if m.group(1) in set(called(node)):
            result = letter
else:
    path, param, qualname = re.search(r"In `(.+?)`, what is the default value of the parameter `(\w+)` of `(.+?)`",
                                      QUESTION).groups()
    node = dict(top_functions(ast.parse(files[path])))[qualname]
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    value = repr(defaults[param].value)
    result = next(letter for letter, option in options.items() if option == value)
def spoil(value):
    return "ABCD"[("ABCD".index(value) + 1) % 4]
'''

SOLVERS = {"sniah": SNIAH, "oolong": OOLONG, "oolong-pairs": OOLONG_PAIRS, "multihop": MULTIHOP, "codeqa": CODEQA}

_QUESTION_PATTERNS = {
    "sniah": r"What is the special magic number for \S+ mentioned in the provided text\?",
    "multihop": r"Who was the .+? of [A-Z][a-z]+ [A-Z][a-z]+\?",
    "oolong": r"Each instance is a verse .+?\n\n[^\n]+",
    "oolong-pairs": r"Each instance is a verse .+?\n\nList all pairs[^\n]+",
    "codeqa": r"(?:Which file defines|Which of these functions calls|In `)[^\n]*\n(?:[ABCD]\) [^\n]*\n){4}",
}


def question_in(suite: str, text: str) -> str:
    """The task's question as it appears in a root request (ours or rlms)."""
    matches = re.findall(_QUESTION_PATTERNS[suite], text, re.S)
    assert matches, f"no {suite} question in the root request"
    return matches[-1]


def solver_code(suite: str, question: str, wrong: bool = False) -> str:
    return f"QUESTION = {question!r}\nWRONG = {wrong!r}\n" + SOLVERS[suite] + _FINISH


def base_answer(suite: str, text: str) -> str:
    """What a perfect reader answers in one call, for ``--compare base``: the
    needle if it is in the (cut) context it was shown, else a guess."""
    assert suite == "sniah", "the base model is scripted for sniah only"
    key = re.search(r"special magic number for (\S+) mentioned", text).group(1)
    found = re.search(r"magic numbers for " + re.escape(key) + r" is: (\d{7})", text)
    return found.group(1) if found else "1234567"


class SolverResponder:
    """The scripted server's responder: root requests get the solver's code
    (or, for a base-model request, a direct answer), sub-calls get the true
    label of the verse in the prompt."""

    def __init__(self, suite: str, wrong: bool = False) -> None:
        self.suite = suite
        self.wrong = wrong
        self.base_requests = 0
        self.sub_requests = 0

    def __call__(self, body: dict[str, Any]) -> Reply | str:
        if body.get("model") == ROOT_MODEL:
            text = all_text(body)
            if BASE_MARK in text:
                self.base_requests += 1
                return base_answer(self.suite, text)
            code = solver_code(self.suite, question_in(self.suite, text), self.wrong)
            return f"I will work it out in code.\n```repl\n{code}\n```"
        if body.get("model") == SUB_MODEL:
            self.sub_requests += 1
            prompt = prompt_text(body)
            verse = prompt.split("Text: ", 1)[1].strip()
            return labelled_texts().get(verse, "unknown")
        return Reply(text=f"unknown model {body.get('model')!r}", status=404)
