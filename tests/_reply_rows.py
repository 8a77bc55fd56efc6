"""The reply protocol's table of rows (tests/test_reply_protocol.py reads it
row by row; tests/test_reply_protocol_cli.py runs a subset through the CLI)
and the scripted root model that plays a row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from _helpers import ROOT

from rlm_kernel.testing.server import Reply, prompt_text

GOES_ON = "(the run goes on)"  # the step gives no answer
NEXT = "FINAL(__next__)"  # the scripted reply after a step that gave none


@dataclass(frozen=True)
class Row:
    id: str
    reply: str | None  # None: a null content (thinking only)
    blocks: tuple[str, ...] = ()  # the closed code blocks parse_reply finds
    runs: tuple[str, ...] | None = None  # the code that runs (None: every block)
    answer: Any = GOES_ON
    told: tuple[str, ...] = ()  # in what the model is told after the step
    not_told: tuple[str, ...] = ()
    before: tuple[str, ...] = ()  # code run in steps before this one
    reasoning: str | None = None
    official: str = ""
    differs: str = ""

    @property
    def reason(self) -> str:
        return "continues" if self.answer == GOES_ON else "final"


def fence(code: str, lang: str = "repl") -> str:
    return f"```{lang}\n{code}\n```"


R = Row
ROWS = [
    # -- code blocks: the official tests (C1-C5) and probes ----------------------------------
    R("single-block", "Here's some code:\n```repl\nx = 1 + 2\nprint(x)\n```\nDone.", ("x = 1 + 2\nprint(x)",),
      told=("3",), official="C1"),
    R("two-blocks", "First block:\n```repl\na = 1\n```\nSecond block:\n```repl\nb = a + 1\nprint(b)\n```\nEnd.",
      ("a = 1", "b = a + 1\nprint(b)"), told=("ran with no output", "2"), official="C2"),
    R("no-blocks", "Just plain text without any code blocks.", told=("no ```repl code block",), official="C3"),
    R("python-fence-runs", "Python block:\n```python\nx = 1\n```\nREPL block:\n```repl\ny = x + 1\nprint(y)\n```\n",
      ("x = 1", "y = x + 1\nprint(y)"), told=("2",), official="C4",
      differs="```python runs too: the paper and our prompt accept it, and models write it"),
    R("multiline-block", fence("def factorial(n):\n    if n <= 1:\n        return 1\n    return n * factorial(n - 1)\n\n"
                               "result = factorial(5)\nprint(result)"),
      ("def factorial(n):\n    if n <= 1:\n        return 1\n    return n * factorial(n - 1)\n\n"
       "result = factorial(5)\nprint(result)",), told=("120",), official="C5"),
    R("info-after-lang", "```repl x\nprint('ran')\n```", ("print('ran')",), told=("ran",), official="P fences",
      differs="the language is the info string's first word (CommonMark); the official regex needs a bare `repl`"),
    R("upper-case-lang", "```REPL\nprint('upper')\n```", ("print('upper')",), told=("upper",), official="P fences",
      differs="the language tag is case-insensitive"),
    R("py-lang", "```py\nprint('py')\n```", ("print('py')",), told=("py",), official="P fences",
      differs="```py, ```python3 and ```ipython are Python too"),
    R("tilde-fence", "~~~repl\nprint('tilde')\n~~~", ("print('tilde')",), told=("tilde",), official="P fences",
      differs="~~~ fences are Markdown fences too"),
    R("bare-fence-is-not-code", "```\nprint('bare')\n```", told=("no ```repl code block",), not_told=("bare\n",),
      official="P fences"),
    R("indented-fence", "  ```repl\n  x = 1\n  print(x + 1)\n  ```", ("x = 1\nprint(x + 1)",), told=("2",),
      official="P fences", differs="an indented fence is found and its code dedented; the official regex finds none"),
    R("indented-body", "```repl\n    x = 1\n    print(x * 3)\n```", ("x = 1\nprint(x * 3)",), told=("3",),
      official="P fences", differs="a uniformly indented body is dedented (official: IndentationError)"),
    R("unclosed-fence", "Starting.\n```repl\nprint('SHOULD-NOT-RUN')", runs=(),
      told=("never closed",), not_told=("SHOULD-NOT-RUN\n",), official="P fences"),
    R("empty-block-first", "```repl\n```\nprose\n```repl\nprint('second')\n```", ("print('second')",),
      told=("second",), official="P fences",
      differs="an empty block is nothing; the official regex let it swallow the prose and lose the next block"),
    R("blank-lines-trimmed", "```repl\n\nprint('trim')\n\n```", ("print('trim')",), told=("trim",), official="P fences"),
    R("four-backticks", "````repl\nprint('```')\n```\n````", ("print('```')\n```",), told=("SyntaxError",),
      official="P fences"),
    R("python-line-does-not-close", "```repl\nprint('a')\n```python\nprint('b')\n```",
      ("print('a')\n```python\nprint('b')",), told=("SyntaxError",), official="P fences",
      differs="only a bare fence line closes a block (CommonMark); the model sees the error"),
    R("fence-after-prose-on-a-line", "Run this: ```repl\nprint('x')\n``` ok", told=("no ```repl code block",),
      official="P fences", differs="a fence must start its line (CommonMark); the official regex finds one mid-line"),
    R("crlf", "```repl\r\nprint('crlf')\r\n```", ("print('crlf')",), told=("crlf",), official="P fences"),
    # -- FINAL / FINAL_VAR: the official tests (C6-C17) ---------------------------------------
    R("final-after-prose", "The answer is:\nFINAL(42)", answer="42", official="C6"),
    R("final-var", "Check the variable:\nFINAL_VAR(result)", answer=42, before=("result = 42",), official="C7"),
    R("still-working", "Still working on the problem...", told=("no ```repl code block",), official="C9"),
    R("final-multiline", "FINAL(This is a\nmultiline answer)", answer="This is a\nmultiline answer", official="C10"),
    R("final-not-at-line-start", "The result is FINAL(42)", told=("no ```repl code block",), official="C11"),
    R("final-indented", "   FINAL(answer with spaces)", answer="answer with spaces", official="C12"),
    R("final-number", "FINAL(42)", answer="42", official="C13a"),
    R("final-single-quoted", "FINAL('hello world')", answer="hello world", official="C13b",
      differs="outer quotes are removed, as Python reads a string (official keeps them)"),
    R("final-double-quoted", 'FINAL("test")', answer="test", official="C13c", differs="outer quotes removed"),
    R("final-float", "FINAL(123.45)", answer="123.45", official="C13d"),
    R("final-list", "FINAL([1, 2, 3])", answer="[1, 2, 3]", official="C13e"),
    R("final-var-plain", "FINAL_VAR(result)", answer="computed_result", before=("result = 'computed_result'",),
      official="C13f"),
    R("final-var-single-quoted", "FINAL_VAR('my_var')", answer="computed", before=("my_var = 'computed'",),
      official="C13g"),
    R("final-var-double-quoted", 'FINAL_VAR("another_var")', answer="v", before=("another_var = 'v'",),
      official="C13h"),
    R("final-var-of-rebound-answer", "FINAL_VAR(answer)", answer=[1, 2, 3, 4, 5],
      before=("answer = [1, 2, 3, 4, 5]",), official="C13i, C15c"),
    R("final-var-and-final", "FINAL_VAR(result)\nFINAL(direct_answer)", before=("result = 'var_value'",),
      told=("2 different final answers",), official="C14a",
      differs="two different answers are refused and the model told; the official FINAL_VAR silently wins"),
    R("final-word", "FINAL(direct_answer)", answer="direct_answer", official="C14c"),
    R("final-var-int", "FINAL_VAR(x)", answer=42, before=("x = 42",), official="C15a",
      differs="the value itself, not its str(); `rlm-kernel run` prints str()"),
    R("final-var-str", "FINAL_VAR(result)", answer="hello world", before=("result = 'hello world'",),
      official="C15b"),
    R("final-var-nested", "FINAL_VAR(nested)", answer={"key": "value", "num": 123},
      before=("nested = {'key': 'value', 'num': 123}",), official="C15e"),
    R("final-var-read-live", "FINAL_VAR(x)", answer=100, before=("x = 42", "x = 100"), official="C15f"),
    R("final-var-missing", "FINAL_VAR(nonexistent)", told=("no variable named 'nonexistent'",),
      official="C15g, C17", differs="as era D (the run goes on); eras B/C ended with the error text as answer"),
    R("final-nested-call", "FINAL(func(arg1, arg2))", answer="func(arg1, arg2)", official="C16a, PR #75"),
    R("final-tuple-like", "FINAL([1, 2, 3], (4, 5))", answer="[1, 2, 3], (4, 5)", official="C16b"),
    R("final-dict", "FINAL({'key': 'value', 'nested': {'a': 1, 'b': 2}})",
      answer="{'key': 'value', 'nested': {'a': 1, 'b': 2}}", official="C16c"),
    R("final-expression", "FINAL(calculate(10, 20) + process(data))", answer="calculate(10, 20) + process(data)",
      official="C16d"),
    # -- FINAL's extent: prose after the call is never part of the answer ----------------------
    R("remark-after-final", "FINAL(42) is the answer.", answer="42", official="P-C",
      differs="official eras C/D take no answer at all here, eras A/B the same as ours"),
    R("full-stop-after-final", "FINAL(42).", answer="42", official="P-C"),
    R("parenthesis-on-a-later-line", "FINAL(42)\nThanks (really)", answer="42", official="P-C, PR #95",
      differs="official era C/D answer `42)\\nThanks (really`"),
    R("approx-and-details", "Here:\nFINAL(The answer is 42 (approx))\nLet me know if you need more (details).",
      answer="The answer is 42 (approx)", official="P-C"),
    R("quoted-parenthesis", 'FINAL(He said ")" loudly)', answer='He said ")" loudly', official="P-C"),
    R("apostrophes", "FINAL(It's 5 o'clock (UTC)) - that's all", answer="It's 5 o'clock (UTC)"),
    R("inch-mark", 'FINAL(a 5" screen (approx)) and a remark (aside)', answer='a 5" screen (approx)'),
    R("quoted-with-remark", "FINAL(\"done (really)\") or so I think (hmm)", answer="done (really)"),
    R("closing-paren-alone", "FINAL(a\n)\nmore", answer="a", official="P-C"),
    R("spaced", "   FINAL(  spaced  )   ", answer="spaced", official="P-C"),
    R("tab-before-final", "\tFINAL(x)", answer="x", official="P-C"),
    R("crlf-after-final", "FINAL(42)\r\nbye", answer="42", official="P-C"),
    R("empty-final", "FINAL()", answer="", official="P-D10"),
    R("unclosed-final", "FINAL(line one\nline two", told=("no closing parenthesis",), official="P-C"),
    R("final-var-then-lines", "FINAL_VAR(result)\nThat's all (for now).", answer="r", before=("result = 'r'",)),
    R("final-var-then-remark", "FINAL_VAR(result) and more text", answer="r", before=("result = 'r'",),
      official="P FINAL_VAR"),
    R("final-var-spaced", "FINAL_VAR(  result  )", answer="r", before=("result = 'r'",), official="P FINAL_VAR"),
    R("final-var-over-lines", "FINAL_VAR(\nresult\n)", answer="r", before=("result = 'r'",), official="P FINAL_VAR"),
    R("final-var-expression", "FINAL_VAR(f(x))", told=("takes the name of a variable",), official="P FINAL_VAR",
      differs="official looks up a variable named `f(x` and fails silently"),
    R("final-var-sum", "FINAL_VAR(x + 1)", before=("x = 1",), told=("takes the name of a variable",),
      official="P FINAL_VAR"),
    R("bold-final", "**FINAL(42)**", told=("no ```repl code block",), official="P-C"),
    R("space-before-parenthesis", "FINAL (42)", told=("no ```repl code block",), official="P-C"),
    R("lower-case-final", "final(42)", told=("no ```repl code block",), official="P-C"),
    R("cot-mention", "I will then do FINAL(x) once I know more.", told=("no ```repl code block",),
      official="PR #7, PR #41"),
    # -- two FINALs, FINAL with code: the harness says what it did ------------------------------
    R("two-finals", "FINAL(a)\nFINAL(b)", told=("2 different final answers", "FINAL(a)", "FINAL(b)"),
      official="P-C", differs="refused and told; official eras A/B take `a`, C/D `a)\\nFINAL(b`"),
    R("same-final-twice", "FINAL(a)\n\nSo again:\nFINAL(a)", answer="a"),
    R("final-then-final-var", "FINAL(direct)\nFINAL_VAR(result)", before=("result = 'r'",),
      told=("2 different final answers",), official="P FINAL_VAR", differs="official FINAL_VAR wins"),
    R("final-after-code", "```repl\nx = 1\n```\nFINAL(55)", ("x = 1",), told=("FINAL(55) was not taken",
      "had not seen its output"), official="PR #115",
      differs="a FINAL with text beside code is refused: the model had not seen the code's output (PR #127)"),
    R("hallucinated-output", "```repl\ny = 2\nprint(y)\n```\nOutput:\n```\n3\n```\nFINAL(hallucinated)",
      ("y = 2\nprint(y)",), told=("2", "FINAL(hallucinated) was not taken"), not_told=("3\n",),
      official="PR #127, P-D9", differs="official eras B-D answer `hallucinated`"),
    R("final-before-code", "FINAL(42)\n```repl\nprint('checking')\n```", ("print('checking')",),
      told=("checking", "FINAL(42) was not taken")),
    R("final-var-after-code", "```repl\nmy_answer = 'computed'\n```\nFINAL_VAR(my_answer)", ("my_answer = 'computed'",),
      answer="computed", official="P-D8"),
    R("final-var-after-failing-code", "```repl\nresult = 1 / 0\n```\nFINAL_VAR(result)", ("result = 1 / 0",),
      before=("result = 'stale'",), told=("ZeroDivisionError", "FINAL_VAR(result) was not taken", "raised an error"),
      not_told=("stale",)),
    R("final-var-after-unclosed-code", "FINAL_VAR(result)\n```repl\nresult = 'new'", before=("result = 'stale'",),
      runs=(), told=("never closed", "did not run")),
    R("code-final-beats-prose", "```repl\nFINAL('from code')\n```\nFINAL(from prose)", ("FINAL('from code')",),
      answer="from code"),
    R("blocks-after-code-final", "```repl\nFINAL('early')\n```\n```repl\nprint('late')\n```",
      ("FINAL('early')", "print('late')"), runs=("FINAL('early')",), answer="early",
      differs="blocks after an answer are not run (official runs every block)"),
    R("final-is-a-variable-name", "FINAL(total)", before=("total = 7",),
      told=("`total` is also one of your variables", "FINAL_VAR(total)")),
    R("final-quoted-variable-name", 'FINAL("total")', before=("total = 7",), answer="total"),
    # -- FINAL / FINAL_VAR in code (REPL functions) --------------------------------------------
    R("final-in-code", "I will now finalise.\n```repl\nFINAL(final_answer)\n```", ("FINAL(final_answer)",),
      answer="real", before=("final_answer = 'real'",), official="PR #115, P-D7",
      differs="official era D answered the literal `final_answer`"),
    R("final-of-rebound-answer-in-code", fence("FINAL(answer)"), ("FINAL(answer)",), answer=55,
      before=("answer = 55",), official="PR #115"),
    R("final-var-call-existing", fence("FINAL_VAR('answer')"), ("FINAL_VAR('answer')",), answer=42,
      before=("answer = 42",), official="C52"),
    R("final-var-call-missing", fence("FINAL_VAR('nonexistent')"), ("FINAL_VAR('nonexistent')",),
      told=("AnswerError", "no variable named 'nonexistent'"), not_told=("rlm_kernel",), official="C53, C64"),
    R("final-var-restored", fence("FINAL_VAR('value')"), ("FINAL_VAR('value')",), answer=42,
      before=("value = 42\nFINAL_VAR = lambda x: 'overwritten'",), official="C54"),
    R("final-var-call-str", fence("FINAL_VAR(\"answer\")"), ("FINAL_VAR(\"answer\")",), answer="forty-two",
      before=("answer = 'forty-two'",), official="C63"),
    R("final-var-call-value", fence("FINAL_VAR(123)"), ("FINAL_VAR(123)",), answer=123, official="C65"),
    R("final-var-call-same-cell", fence("x = 'hello'\nFINAL_VAR('x')"), ("x = 'hello'\nFINAL_VAR('x')",),
      answer="hello", official="P-D2"),
    R("final-var-call-of-a-word", fence("x = 'hello'\nFINAL_VAR(x)"), ("x = 'hello'\nFINAL_VAR(x)",),
      told=("no variable named 'hello'", "FINAL(value)"), official="P-D1",
      differs="the call gets 'hello', which could be a name or the answer: refused with a hint, not guessed"),
    R("context-restored", fence("print(context)"), ("print(context)",), told=("the context text",),
      before=("context = 'hijacked'",), not_told=("hijacked",), official="C55"),
    R("llm-query-restored", fence("print(llm_query('test'))"), ("print(llm_query('test'))",), told=("echo: test",),
      before=("llm_query = lambda x: 'hijacked'",), official="C56"),
    R("empty-value-is-an-answer", "FINAL_VAR(result)", answer="", before=("result = ''",), official="P-D5",
      differs="an empty value is the model's answer (official era D took none)"),
    R("error-looking-value", "FINAL_VAR(result)", answer="Error: Variable 'q' not found in FINAL_VAR",
      before=("result = \"Error: Variable 'q' not found in FINAL_VAR\"",), official="P-D6",
      differs="no guessing from the value's text"),
    # -- the answer dict -------------------------------------------------------------------------
    R("dict-ready", fence('answer["content"] = "the result"\nanswer["ready"] = True'),
      ('answer["content"] = "the result"\nanswer["ready"] = True',), answer="the result", official="C18, C58"),
    R("dict-not-ready", fence('answer["content"] = "wip"'), ('answer["content"] = "wip"',), told=("no output",),
      official="C19, C59, C68, C79"),
    R("dict-rebound-ready", fence('answer = {"content": "rebound", "ready": True}'),
      ('answer = {"content": "rebound", "ready": True}',), answer="rebound", official="C20, C60, C82"),
    R("dict-list-content", fence('answer["content"] = [1, 2, 3]\nanswer["ready"] = True'),
      ('answer["content"] = [1, 2, 3]\nanswer["ready"] = True',), answer=[1, 2, 3], official="C21",
      differs="the content itself, not its str()"),
    R("dict-rewrapped", fence('answer["content"] = "done"; answer["ready"] = True'),
      ('answer["content"] = "done"; answer["ready"] = True',), answer="done",
      before=('answer = {"content": "intermediate", "ready": False}',), official="C61"),
    R("dict-int-content", fence('answer["content"] = 123\nanswer["ready"] = True'),
      ('answer["content"] = 123\nanswer["ready"] = True',), answer=123, official="C69, C81"),
    R("dict-empty-content", fence('answer["ready"] = True'), ('answer["ready"] = True',), answer="", official="C80"),
    R("dict-ready-first", fence('answer["ready"] = True\nanswer["content"] = "x"'),
      ('answer["ready"] = True\nanswer["content"] = "x"',), answer="x", official="P-E1",
      differs="the dict is read when the cell ends (as the official Docker REPL); its local REPL answers ''"),
    R("dict-update", fence('answer.update({"content": "x", "ready": True})'),
      ('answer.update({"content": "x", "ready": True})',), answer="x", official="P-E2",
      differs="read when the cell ends, so update() counts (official local REPL: no answer)"),
    R("dict-ready-then-error", fence('answer["content"] = "x"\nanswer["ready"] = True\n1/0'),
      ('answer["content"] = "x"\nanswer["ready"] = True\n1/0',), answer="x", official="P-E4"),
    R("dict-ready-zero", fence('answer["content"] = "x"; answer["ready"] = 0'),
      ('answer["content"] = "x"; answer["ready"] = 0',), told=("no output",), official="P-E7"),
    R("dict-ready-withdrawn", fence('answer["content"] = "a"; answer["ready"] = True; answer["ready"] = False'),
      ('answer["content"] = "a"; answer["ready"] = True; answer["ready"] = False',), told=("no output",),
      official="P-E17", differs="read when the cell ends: withdrawn (official local REPL answers 'a')"),
    R("dict-after-answer-skips-blocks", fence('answer["content"] = "a"; answer["ready"] = True') + "\n"
      + fence("print('late')"), ('answer["content"] = "a"; answer["ready"] = True', "print('late')"),
      runs=('answer["content"] = "a"; answer["ready"] = True',), answer="a", official="note 22",
      differs="later blocks do not run once an answer is given"),
    # -- the answer variable belongs to the model once it rebinds it ----------------------------
    R("rebind-to-text", fence('answer = "just text"'), ('answer = "just text"',),
      told=("rebound `answer` (it is now a str)", "answer dict is off"), official="P-E10",
      differs="the model's value stays (official resets it to the empty dict)"),
    R("rebound-text-kept", "FINAL_VAR(answer)", answer="just text", before=('answer = "just text"',),
      official="P-E10"),
    R("rebind-to-subcall", fence("answer = llm_query('capital of France?')\nprint(answer)"),
      ("answer = llm_query('capital of France?')\nprint(answer)",),
      told=("echo: capital of France?", "rebound `answer`"), official="note 25"),
    R("rebound-subcall-kept", fence("FINAL(answer)"), ("FINAL(answer)",), answer="echo: capital of France?",
      before=("answer = llm_query('capital of France?')",)),
    R("loop-variable-answer", fence("for i, answer in enumerate(['a', 'b']):\n    pass\nprint(answer)"),
      ("for i, answer in enumerate(['a', 'b']):\n    pass\nprint(answer)",), told=("b", "rebound `answer`"),
      official="note 25"),
    R("delete-answer", fence("del answer"), ("del answer",), told=("deleted `answer`",), official="P-E12",
      differs="not put back (official: `del` has no effect)"),
    R("answer-int-then-prose-final", "FINAL(answer)", before=("answer = 55",),
      told=("`answer` is also one of your variables", "FINAL_VAR(answer)")),
    R("untouched-dict-final-var", "FINAL_VAR(answer)", told=("still the answer dict",)),
    R("untouched-dict-final-in-code", fence("FINAL(answer)"), ("FINAL(answer)",), told=("still the answer dict",),
      not_told=("rlm_kernel",)),
    R("dict-again-after-rebind", fence("answer = {'content': 'back', 'ready': True}"),
      ("answer = {'content': 'back', 'ready': True}",), answer="back", before=("answer = 55",)),
    # -- only code counts as code ----------------------------------------------------------------
    R("final-in-text-fence", "Example:\n```text\nFINAL(no)\n```", told=("is an example, not an answer",)),
    R("final-var-in-output-fence", "```output\nFINAL_VAR(x)\n```", before=("x = 1",), told=("is an example",)),
    R("final-in-markdown-fence", "```markdown\nFINAL(42)\n```", told=("```markdown block is an example",)),
    R("final-as-inline-code", "When done I write `FINAL(42)`.", told=("no ```repl code block",)),
    R("inline-code-at-line-start", "`FINAL(42)`", told=("no ```repl code block",)),
    R("list-item-fence", "1. Look at it:\n   ```repl\n   n = len(context)\n   print(n)\n   ```\n2. Then decide.",
      ("n = len(context)\nprint(n)",), told=("16",)),
    R("nested-list-fence", "- Plan\n  - Measure:\n\n        ```python\n        if True:\n            print('deep')\n"
      "        ```\n", ("if True:\n    print('deep')",), told=("deep",)),
    R("invented-output-block", "```repl\nprint(6 * 7)\n```\nOutput:\n```\n41\n```", ("print(6 * 7)",),
      told=("42",), not_told=("41",)),
    # -- thinking never runs ---------------------------------------------------------------------
    R("think-tag-code", "<think>\n```repl\nprint('THOUGHT')\n```\n</think>\n```repl\nprint('real')\n```",
      ("print('real')",), told=("real",), not_told=("THOUGHT",), official="P fences",
      differs="code inside <think> never runs (the official library runs it)"),
    R("think-tag-final", "<think>FINAL(wrong)</think>\nFINAL(right)", answer="right"),
    R("think-leading-whitespace", "  \n<think>\n```repl\nprint('THOUGHT')\n```\n</think>\n```repl\nprint('ok')\n```",
      ("print('ok')",), told=("ok",), not_told=("THOUGHT",)),
    R("thinking-tag", "<thinking>\nFINAL(wrong)\n</thinking>\nFINAL(right)", answer="right"),
    R("bare-close", "Let me think.\n```repl\nprint('THOUGHT')\n```\n</think>\n\n```repl\nprint('good')\n```",
      ("print('good')",), told=("good",), not_told=("THOUGHT",)),
    R("bare-close-final", "FINAL(wrong)\n</think>\nFINAL(right)", answer="right"),
    R("bare-close-mid-line", "so it is 5.</think>\n\nFINAL(5)", answer="5"),
    R("unclosed-think", "<think>\nI will run\n```repl\nprint('THOUGHT')\n```", told=("never closed",),
      not_told=("THOUGHT",)),
    R("mid-reply-think", "Step one.\n<think>\n```repl\nprint('THOUGHT')\n```\n</think>\n```repl\nprint(1)\n```",
      ("print(1)",), told=("1",), not_told=("THOUGHT",)),
    R("close-tag-in-code", fence("parts = 'a</think>b'.split('</think>')\nprint(parts)"),
      ("parts = 'a</think>b'.split('</think>')\nprint(parts)",), told=("['a', 'b']",)),
    R("reasoning-only-code", None, reasoning="I should run\n```repl\nprint('THOUGHT')\n```\nFINAL(wrong)",
      told=("only in your thinking",), not_told=("THOUGHT",)),
    R("reasoning-and-content", "```repl\nprint('content')\n```", ("print('content')",),
      reasoning="```repl\nprint('THOUGHT')\n```", told=("content",), not_told=("THOUGHT",)),
    R("reasoning-final-ignored", "```repl\nprint('checking')\n```", ("print('checking')",),
      reasoning="FINAL(wrong)", told=("checking",)),
    R("reasoning-then-final", "FINAL(right)", reasoning="FINAL(wrong)\n```repl\nboom()\n```", answer="right"),
    R("reasoning-field-turns-bare-close-off", "shown\n</think>\nFINAL(y)", reasoning="thought", answer="y"),
    # -- wrappers -----------------------------------------------------------------------------------
    R("glm-box", "<|begin_of_box|>FINAL(42)<|end_of_box|>", answer="42", official="PR #7",
      differs="the box tokens are removed before parsing (PR #7 was not merged)"),
    R("glm-box-lines", "The answer:\n<|begin_of_box|>\nFINAL_VAR(result)\n<|end_of_box|>", answer="r",
      before=("result = 'r'",)),
    # -- end-to-end fixtures of the official tests ---------------------------------------------
    R("official-basic", "FINAL(42)", answer="42", official="C85"),
    R("official-multi-step", "FINAL(4)", answer="4",
      before=("x = 1 + 1\nprint(x)", "y = x * 2\nprint(y)"), official="C86"),
    R("official-final-helper", fence("answer['content'] = '42'\nanswer['ready'] = True"),
      ("answer['content'] = '42'\nanswer['ready'] = True",), answer="42", official="C85 (era E)"),
]
BY_ID = {row.id: row for row in ROWS}
assert len(BY_ID) == len(ROWS), "row ids must be unique"


# -- running a row ---------------------------------------------------------------------------------


def row_model(row: Row) -> str:
    """The root model a row runs with: a name of its own, so that each row meets
    a model this process has not seen, as a run from the CLI does (whether a
    model's code may run before its reply ends is learnt per process and model:
    engine/steps/reply_stream.py)."""
    return f"{ROOT}-{row.id}"


class Responder:
    """One scripted server for every row: the query names the row; the
    number of the root model's replies so far says which step it is on."""

    def __call__(self, body: dict[str, Any]) -> Any:
        if not body.get("model", "").startswith(ROOT.split("/", 1)[1]):
            return f"echo: {prompt_text(body)}"
        row = BY_ID[row_id(body)]
        step = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if step < len(row.before):
            return fence(row.before[step])
        if step == len(row.before):
            return Reply(text=row.reply, reasoning=row.reasoning)
        return NEXT


def row_id(body: dict[str, Any]) -> str:
    first = body["messages"][1]["content"]
    return first.split("Query: row ", 1)[1].split("\n", 1)[0].strip()
