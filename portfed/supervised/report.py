"""The outputs of a benchmark: our number beside the paper's per cell, curves over rounds.

``table.csv`` / ``table.md``: one line per (row, algorithm) with the config's summary number (mean ±
standard deviation over seeds; accuracy in %, regression error as MSE), the paper's number, the
spread over parties (paper 002's fairness measure) and the fraction of improved participants where
tracked.  Under the table: every row's data description (the substitutions) and the config's notes.
``curves_<row>.png``: mean personal test metric over rounds per algorithm (mean over seeds);
``attention_<row>_<algorithm>.png``: FedAMP / HeurFedAMP's message weights ξ on the first seed's final
party models (paper 004 Fig. 3; eq. 5/7 and eq. 8 with the run's knobs), diagonal left blank.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from portfed._io import atomic_save, atomic_write_text
from portfed.supervised.config import SupervisedConfig
from portfed.supervised.runner import Cell, slug

COLUMNS = ("row", "algorithm", "ours", "ours_std_seeds", "paper", "party_std", "paper_party_std", "improved",
           "chosen", "seeds", "note")


def _scale(cell: Cell) -> float:
    return 100.0 if cell.traces and cell.traces[0].higher_is_better else 1.0


def cell_rows(config: SupervisedConfig, cells: list[Cell]) -> list[dict[str, object]]:
    """The table's lines as dicts (numbers rounded for reading, NaN where there is none)."""
    rows = {row.label: row for row in config.rows}
    lines = []
    for cell in cells:
        row = rows[cell.row]
        line: dict[str, object] = {"row": cell.row, "algorithm": cell.algorithm, "paper": row.paper.get(cell.algorithm),
                                   "paper_party_std": row.paper_std.get(cell.algorithm), "seeds": len(cell.traces),
                                   "chosen": cell.chosen or "", "note": cell.skipped}
        if cell.traces:
            scale = _scale(cell)
            summaries = [t.summary() for t in cell.traces]
            values = np.array([s[config.summary] for s in summaries]) * scale
            line |= {"ours": round(float(values.mean()), 2), "ours_std_seeds": round(float(values.std()), 2),
                     "party_std": round(float(np.mean([s["final_std"] for s in summaries]) * scale), 2),
                     "improved": round(float(np.mean([s["improved"] for s in summaries])), 3)}
        lines.append({key: line.get(key) for key in COLUMNS})
    return lines


def _fmt(value: object) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    return str(value)


def markdown(config: SupervisedConfig, lines: list[dict[str, object]], descriptions: dict[str, str],
             elapsed: float | None = None) -> str:
    """The Markdown table with its header (what the number is) and footer (substitutions, notes)."""
    metric = {"final": "after the last round", "best": "best mean over rounds (BMTA)",
              "selected": "at the round with the best validation mean"}[config.summary]
    out = [f"### {config.title}", "", f"Source: {config.source}. Personal test metric (accuracy % or MSE), "
           f"mean over parties {metric}; ours = mean ± std over {len(config.seeds)} seed(s).", "",
           "| row | algorithm | ours | paper | party std (ours / paper) | improved | chosen on validation | note |",
           "|---|---|---|---|---|---|---|---|"]
    for line in lines:
        ours = "–" if line["ours"] is None else f"{line['ours']} ± {line['ours_std_seeds']}"
        spread = f"{_fmt(line['party_std'])} / {_fmt(line['paper_party_std'])}"
        out.append(f"| {line['row']} | {line['algorithm']} | {ours} | {_fmt(line['paper'])} | {spread} | "
                   f"{_fmt(line['improved'])} | {_fmt(line['chosen'] or None)} | {line['note']} |")
    out += ["", "Data actually used:"] + [f"- {row}: {text}" for row, text in descriptions.items()]
    out += [f"- note: {note}" for note in config.notes]
    if elapsed is not None:
        out.append(f"- run time: {elapsed:.1f} s")
    return "\n".join(out) + "\n"


def write_table(config: SupervisedConfig, cells: list[Cell], descriptions: dict[str, str], out: Path,
                elapsed: float | None = None) -> str:
    """Write ``table.csv`` and ``table.md`` under ``out``; returns the Markdown."""
    lines = cell_rows(config, cells)
    out.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    atomic_write_text(out / "table.csv", buffer.getvalue())
    text = markdown(config, lines, descriptions, elapsed)
    atomic_write_text(out / "table.md", text)
    return text


def _save(fig, path: Path) -> Path:
    """Write ``fig`` as a PNG to exactly ``path`` (atomically) and close it."""
    import matplotlib.pyplot as plt

    atomic_save(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return path


def plot_curves(cells: list[Cell], out: Path) -> list[Path]:
    """One PNG per row: the mean-over-seeds personal test curve of every algorithm that ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for row in dict.fromkeys(cell.row for cell in cells):
        ran = [c for c in cells if c.row == row and c.traces]
        if not ran:  # every algorithm of the row is a paper-only baseline: nothing to draw
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        for cell in ran:
            curves = np.array([t.mean_curve("test") for t in cell.traces]) * _scale(cell)
            ax.plot(cell.traces[0].rounds, curves.mean(axis=0), label=cell.algorithm)
        higher = ran[0].traces[0].higher_is_better
        ax.set_xlabel("round")
        ax.set_ylabel("mean personal test accuracy (%)" if higher else "mean personal test MSE")
        ax.set_title(row)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        paths.append(_save(fig, out / f"curves_{slug(row)}.png"))
    return paths


def plot_attention(cells: list[Cell], out: Path) -> list[Path]:
    """The ξ heat map of every FedAMP / HeurFedAMP cell (first seed, final models; ``RunTrace.message_weights``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for cell in cells:
        if not cell.traces or cell.traces[0].message_weights is None:
            continue
        xi = cell.traces[0].message_weights
        shown = xi.copy()
        np.fill_diagonal(shown, np.nan)  # the self-weights would swamp the colour scale of the blocks
        fig, ax = plt.subplots(figsize=(5, 4.4))
        image = ax.imshow(shown, cmap="viridis")
        fig.colorbar(image, ax=ax)
        ax.set_title(f"{cell.algorithm} ξ_ij, j ≠ i (mean ξ_ii = {np.diag(xi).mean():.3f}) — {cell.row}", fontsize=8)
        ax.set_xlabel("party j")
        ax.set_ylabel("party i")
        fig.tight_layout()
        paths.append(_save(fig, out / f"attention_{slug(cell.row)}_{slug(cell.algorithm)}.png"))
    return paths
