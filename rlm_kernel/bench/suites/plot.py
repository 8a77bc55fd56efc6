"""Score and cost against context length, one line per system (like Figure 1
of the Recursive Language Models paper), saved as PNG with matplotlib's Agg
backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import SuiteError
from .systems import TITLES

_STYLES = {
    "ours": {"marker": "o", "linestyle": "-", "linewidth": 3, "markersize": 9, "alpha": 0.8},
    "base": {"marker": "s", "linestyle": ":", "linewidth": 1.8, "markersize": 6, "zorder": 3},
    "rlms": {"marker": "^", "linestyle": "--", "linewidth": 1.8, "markersize": 6, "zorder": 3},
}


def save_plot(results: dict[str, Any], path: str | Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        raise SuiteError("Saving a plot needs matplotlib; install it with: pip install 'rlm-kernel[bench]'") from None
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise SuiteError(f"The plot is saved as PNG; give a path ending in .png, not {str(path)!r}.")
    path.parent.mkdir(parents=True, exist_ok=True)
    lengths = [entry["length"] for entry in results["lengths"]]
    names = results["config"]["systems"]
    with_cost = all(entry["systems"][name]["cost_usd"] is not None
                    for entry in results["lengths"] for name in names)
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in names:
        series = [entry["systems"][name] for entry in results["lengths"]]
        # distinct markers and dashes: equal scores (all 1.0, say) must not hide a line
        style = {"label": TITLES.get(name, name), **_STYLES.get(name, {"marker": "o"})}
        left.plot(lengths, [s["score"] for s in series], **style)
        right.plot(lengths, [s["cost_usd"] if with_cost else s["tokens"] for s in series], **style)
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xticks(lengths, [entry["label"] for entry in results["lengths"]])
        axis.minorticks_off()
        axis.set_xlabel("context length (tokens, estimated as characters / 4)")
        axis.grid(True, alpha=0.3)
    left.set_ylim(-0.02, 1.02)
    left.set_ylabel("score (mean per task)")
    left.set_title(f"{results['suite']}: score")
    right.set_ylabel("cost per task (USD)" if with_cost else "tokens per task (cost unknown)")
    right.set_title(f"{results['suite']}: {'cost' if with_cost else 'tokens'}")
    if not with_cost:
        right.set_yscale("log")
    figure.suptitle(f"{results['config']['model']}, {results['config']['n']} task(s) per length")
    figure.legend(*left.get_legend_handles_labels(), loc="lower center", ncol=len(names), frameon=False)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
