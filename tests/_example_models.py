"""The scripted models each example notebook runs against: the root model's
steps and the sub-model's answers. tests/test_examples.py runs every example
with them, and the docs build (docs/_ext/rlm_examples.py) executes the
examples with them too, through :data:`RESPONDERS`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from _examples import by_step, quickstart_responder, scripted
from _helpers import repl

from rlm_kernel.testing.server import Reply, prompt_text

NEEDLE_ROOT = by_step(
    repl('print(f"{len(context):,} characters")\nprint(context[:300])', "A look at the haystack first."),
    repl(r'''
import re
hits = [m.start() for m in re.finditer(r"special magic number", context)]
print(len(hits), "hits")
for at in hits:
    print(at, repr(context[max(0, at - 100):at + 120]))
''', "Searching is cheaper than reading: look for the phrase."),
    repl(r'''
window = context[max(0, hits[0] - 1000):hits[0] + 1000]
number = llm_query("What is the special magic number in this passage? Reply with the 7-digit number only.\n\n" + window).strip()
print(number)
''', "Check the window around the hit with a sub-call."),
    "FINAL_VAR(number)",
)


def needle_sub(prompt: str) -> str:
    found = re.search(r"special magic numbers? for \S+ is: (\d{7})", prompt)
    return found.group(1) if found else "no number here"


RECORDS_ROOT = by_step(
    repl('lines = context.splitlines()\nprint(lines[0])\nprint(len(lines) - 1, "records")\nprint("\\n".join(lines[1:4]))',
         "The records first: their format and how many there are."),
    repl(r'''
import re
verses = [re.search(r"Instance: (.*)$", line).group(1) for line in lines[1:]]
labels = []
for start in range(0, len(verses), 50):
    batch = verses[start:start + 50]
    labels += llm_query_batched([
        "Which part of the Bible is this verse from: law, history, wisdom, prophets, gospels or letters? "
        f"Reply with the label only.\nVerse: {verse}" for verse in batch])
    print(f"labelled {len(labels)} of {len(verses)}")
''', "Each verse needs a label only a model can give: label them in batches."),
    repl('from collections import Counter\n\ncounts = Counter(label.strip().lower() for label in labels)\n'
         'print(counts)\ngospels = counts["gospels"]', "Counting is plain Python."),
    "FINAL_VAR(gospels)",
)


def records_sub(prompt: str) -> str:
    from rlm_kernel.bench.suites.records import labelled_texts

    return labelled_texts().get(prompt.rsplit("Verse: ", 1)[-1].strip(), "unsure")


def _rate_limit_file(body: dict[str, Any]) -> str:
    """Step 3 reads step 2's output: the file that defines RateLimitError."""
    found = re.search(r"^(\S+\.py) \[.*\('RateLimitError',", prompt_text(body), re.M)
    path = found.group(1) if found else "nowhere.py"
    return repl(f'''
path = {path!r}
source = context[path]
start = source.index("class RateLimitError(")
explanation = llm_query("What is this class for, and what does its constructor take? Two sentences.\\n\\n"
                        + source[start:start + 2500])
print(explanation)
''', f"RateLimitError in {path} is the one; read its definition.")


CODE_BASE_ROOT = by_step(
    repl('print(len(context), "files")\nprint(list(context)[:8])', "A dict of files: list some paths."),
    repl(r'''
import re
hits = {path: re.findall(r"^class (\w*RateLimit\w*)\((.*?)\):", source, re.M) for path, source in context.items()}
for path, found in hits.items():
    if found:
        print(path, found)
''', "Grep for the classes about rate limits."),
    _rate_limit_file,
    repl('answer["content"] = f"litellm raises RateLimitError, defined in {path}. {explanation}"\nanswer["ready"] = True',
         "That answers it."),
)


def code_base_sub(prompt: str) -> str:
    block = prompt.split("def __init__(", 1)[-1].split("):", 1)[0]
    names = [line.strip().split(":")[0].split("=")[0].strip(" ,") for line in block.splitlines()]
    names = [n for n in names if n and n != "self"]
    return f"It is the exception for every rate limit (HTTP 429). Its constructor takes {', '.join(names)}."


LOCAL_ROOT = by_step(
    repl('lines = [line for line in context.splitlines() if "namespace" in line.lower()]\nprint(lines)',
         "Find the line first."),
    repl('explanation = llm_query("In one sentence, what does this line of the Zen of Python advise? " + lines[0])\n'
         'reply = f"\\"{lines[0]}\\" {explanation}"\nprint(reply)', "Then have it explained."),
    "FINAL_VAR(reply)",
)


# The run recorded in human_in_the_loop.ipynb, and the sub-model that got review 3 wrong.
TAKEOVER_RUN = by_step(
    repl('print(len(context), "reviews")\nfor i, review in enumerate(context):\n    print(i, review)',
         "Eight short reviews: read them all."),
    repl('prompts = [f"Does this review complain about delivery (late, damaged or lost)? Answer yes or no.\\n'
         'Review: {r}" for r in context]\nverdicts = llm_query_batched(prompts)\n'
         'for i, verdict in enumerate(verdicts):\n    print(i, verdict)', "Ask a sub-model about each review."),
    repl('complaints = sum(v.strip().lower().startswith("yes") for v in verdicts)\nprint(complaints)',
         "Count the yes answers."),
    "FINAL_VAR(complaints)",
)


def takeover_sub(prompt: str) -> str:
    review = prompt.rsplit("Review: ", 1)[-1].lower()
    return "yes" if any(word in review for word in ("shipping", "courier", "parcel", "package")) else "no"


# The person's lookup_order is the root model's only way to the orders' dates.
TOOLS_ROOT = by_step(
    repl(r'''
import re
orders = {number: re.search(r"[A-Z]-\d+", ticket).group() for number, ticket in enumerate(context, 1)}
print(orders)
''', "Each ticket names an order: find them."),
    repl('''
records = {number: lookup_order(order) for number, order in orders.items()}
late = [number for number, r in records.items() if r["shipped"] and r["shipped"] > r["promised"]]
print(late)
''', "The dates are in the person's lookup_order."),
    "FINAL_VAR(late)",
)

# The follow-up: told about the first run, it reuses `records` and `late` instead of looking the orders up again.
FOLLOW_UP_ROOT = by_step(
    repl('''
from datetime import date
days = {n: (date.fromisoformat(records[n]["shipped"]) - date.fromisoformat(records[n]["promised"])).days
        for n in late}
summary = ", ".join(f"ticket {n}: {d} days late" for n, d in days.items())
print(summary)
''', "The earlier run left `records` and `late`: the dates are there already."),
    "FINAL_VAR(summary)",
)


def tools_root(body: dict[str, Any]) -> Any:
    first = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if "Query: How many days late" not in first:
        return TOOLS_ROOT(body)
    if "Variables it left: `orders` (dict, 5 items), `records` (dict, 5 items), `late` (list, 2 items)" not in first:
        return "FINAL(the follow-up was not told what the first run left)"
    return FOLLOW_UP_ROOT(body)


def _saw_an_image(body: dict[str, Any]) -> bool:
    content = body["messages"][-1]["content"]
    return isinstance(content, list) and any(p.get("type") == "image_url" for p in content)


VISION_ROOT = by_step(
    repl('''
import matplotlib.pyplot as plt
rows = [line.split(",") for line in context.splitlines()[1:]]
months, units = [m for m, _ in rows], [int(u) for _, u in rows]
fig, ax = plt.subplots(figsize=(6, 3))
ax.bar(months, units)
ax.set_title("Units per month")
display(fig)
plt.close(fig)
''', "A chart first."),
    lambda body: repl('''
peak = llm_query("Which month's bar stands out in this chart? Answer with the month's name only.", images=[fig]).strip()
median = sorted(units)[len(units) // 2]
summary = f"{peak} stands out: {units[months.index(peak)]} units, {units[months.index(peak)] - median} above the median month"
print(summary)
''', "One bar is far above the others; a sub-call reads the chart to name it.") if _saw_an_image(body)
    else "FINAL(the chart never reached me)",
    "FINAL_VAR(summary)",
)


# The labelling starts in the background; the root model looks at the reviews meanwhile, then collects it.
BACKGROUND_ROOT = by_step(
    repl('labels = llm_query_batched([f"Does this review complain about delivery (late, damaged or lost)? '
         'Answer yes or no.\\nReview: {r}" for r in context], wait=False)\nprint(labels)',
         "Start the labelling in the background."),
    repl("words = [len(r.split()) for r in context]\nprint(words, labels.progress)", "Meanwhile, look at the reviews."),
    repl("verdicts = labels.result()\nlate = [i for i, v in enumerate(verdicts, 1) if v.strip().lower().startswith('yes')]"
         "\nprint(late)", "Collect the labels."),
    "FINAL_VAR(late)",
)


def background_sub(prompt: str) -> Reply:
    review = prompt.rsplit("Review: ", 1)[-1].lower()
    return Reply(text="yes" if any(w in review for w in ("late", "courier", "soaked")) else "no", delay=1.0)


# The library of PDFs: search every document, find the hit's page, read that page with a sub-call, cite it.
DOCUMENTS_ROOT = by_step(
    repl("for i, d in enumerate(context):\n    print(i, d.source.rsplit('/', 1)[-1], d.kind, len(d.pages), len(d))",
         "Which documents are there?"),
    repl(r'''
import re
hits = [(d, m) for d in context for m in re.finditer(r"whither\s+thou\s+goest", d)]
for d, m in hits:
    print(d.page_at(m.start()).citation)
''', "Search them all; each hit's page."),
    repl('''
doc, match = hits[0]
page = doc.page_at(match.start())
who = llm_query("Who says 'whither thou goest' on this page, and to whom? One sentence.\\n\\n" + page).strip()
answer = f"{who} ({page.citation})"
print(answer)
''', "Read that page with a sub-call."),
    "FINAL_VAR(answer)",
)


def documents_sub(prompt: str) -> str:
    return "Ruth says it to Naomi, her mother-in-law." if re.search(r"whither\s+thou\s+goest", prompt) else "no"


# The Bible as a database: pandas counts, a sub-call reads three verses.
TABLES_ROOT = by_step(
    repl("print({name: (len(table), list(table.columns)) for name, table in context.items()})",
         "The tables and their columns."),
    repl(r'''
bible, books = context["Bible"], context["Books"]
text = bible["Passage1"].fillna("") + " " + bible["Passage2"].fillna("")
hits = bible[text.str.contains(r"\bfaith\b", case=False, regex=True) & (bible["TestamentID"] == 2)]
named = hits.merge(books, on=["TestamentID", "BookID"])
counts = named.groupby("ShortName").size().sort_values(ascending=False)
print(counts.head())
top, n = counts.index[0], int(counts.iloc[0])
''', "Counting is pandas."),
    repl('''
first = named[named["ShortName"] == top]["Passage1"].head(3).tolist()
gist = llm_query("In one sentence, what do these verses say about faith?\\n" + "\\n".join(first)).strip()
summary = f"{top}: {n} verses. {gist}"
print(summary)
''', "A sub-call reads the first three."),
    "FINAL_VAR(summary)",
)


# -- the tests ------------------------------------------------------------------------


# Each example's scripted models, as one responder (made fresh each time).
RESPONDERS: dict[str, Callable[[], Any]] = {
    "quickstart.ipynb": quickstart_responder,
    "needle_in_a_haystack.ipynb": lambda: scripted(NEEDLE_ROOT, needle_sub),
    "aggregation_over_records.ipynb": lambda: scripted(RECORDS_ROOT, records_sub),
    "code_base_question.ipynb": lambda: scripted(CODE_BASE_ROOT, code_base_sub),
    "local_model.ipynb": lambda: scripted(LOCAL_ROOT, lambda prompt: "Keep names in separate namespaces, and use more of them."),
    "tools_and_follow_ups.ipynb": lambda: scripted(tools_root, lambda prompt: "unused"),
    "plots_and_images.ipynb": lambda: scripted(VISION_ROOT, lambda prompt: "Jul"),
    "background_subcalls.ipynb": lambda: scripted(BACKGROUND_ROOT, background_sub),
    "documents_as_context.ipynb": lambda: scripted(DOCUMENTS_ROOT, documents_sub),
    "tables_as_context.ipynb": lambda: scripted(TABLES_ROOT, lambda prompt: "They call faith the way the just live."),
    "human_in_the_loop.ipynb": lambda: scripted(lambda body: "FINAL_VAR(complaints)", lambda prompt: "a fresh call"),
}
