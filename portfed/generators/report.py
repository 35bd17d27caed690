"""The stylized-facts report: fit every generator on one universe, compare synthetic years with real ones.

Protocol: the training part is the panel without its last ``days`` days.  Each generator is fitted on
it and samples ``paths`` synthetic paths of ``days`` days (path ``p`` of generator ``g`` seeded with
``default_rng([seed, g, p])``).  Rows of the table:

- ``real (train windows)``: the training log returns cut into non-overlapping windows of ``days``;
- ``real (held-out)``: the held-out last ``days`` days (a real year the generators never saw);
- one row per generator: its synthetic paths, each one window.

Every row's metrics are :func:`~portfed.generators.stylized.stylized_facts` against the training
log returns as reference.  Outputs in ``out_dir`` (all written atomically): ``stylized_facts.csv``,
``stylized_facts.md``, ``curves.csv`` (ACF of r, of |r| and leverage per lag), ``paths.png``,
``acf.png``, ``histograms.png``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from portfed._io import atomic_save, atomic_write_text  # noqa: E402
from portfed.data.errors import DataError  # noqa: E402
from portfed.data.panel import PricePanel  # noqa: E402
from portfed.generators.base import log_returns  # noqa: E402
from portfed.generators.registry import make_generator  # noqa: E402
from portfed.generators.stylized import StylizedFacts, split_windows, stylized_facts  # noqa: E402
from portfed.validation import check_int  # noqa: E402

REAL_TRAIN = "real (train windows)"
REAL_HELDOUT = "real (held-out)"


@dataclass(frozen=True)
class GeneratorReport:
    """The report's results: the summary ``table`` (rows: data sources) and the per-source facts."""

    table: pd.DataFrame
    facts: dict[str, StylizedFacts]
    paths: dict[str, list[PricePanel]]


def generators_report(
    panel: PricePanel,
    generators: Sequence[str],
    out_dir: str | Path | None = None,
    days: int = 252,
    paths: int = 20,
    seed: int = 0,
    on_step: Callable[[str], None] | None = None,
) -> GeneratorReport:
    """Fit ``generators`` on ``panel`` minus its last ``days`` days and compare their stylized facts.

    ``on_step(label)`` is called after each fitted-and-sampled generator (for a progress bar).  With
    ``out_dir`` the table and figures are written there.
    """
    check_int(paths, "paths", minimum=1, error=DataError)
    check_int(days, "days", minimum=1, error=DataError)
    if len(panel) < 2 * days + 2:
        raise DataError(f"panel {panel.name!r} has {len(panel)} days; the report needs at least 2·days + 2")
    train = panel.iloc(slice(0, len(panel) - days)).select_features(["close"])
    reference = log_returns(train)
    heldout = log_returns(panel.iloc(slice(len(panel) - days - 1, None)))
    facts = {
        REAL_TRAIN: stylized_facts(split_windows(reference, days), reference),
        REAL_HELDOUT: stylized_facts([heldout], reference),
    }
    samples: dict[str, list[PricePanel]] = {}
    for g_idx, name in enumerate(generators):
        generator = make_generator(name).fit(train)
        samples[name] = [
            generator.sample(days, np.random.default_rng([seed, g_idx, p])) for p in range(paths)
        ]
        facts[name] = stylized_facts([_continued_returns(train, s) for s in samples[name]], reference)
        if on_step is not None:
            on_step(name)
    table = pd.DataFrame({label: f.summary() for label, f in facts.items()}).T
    table.index.name = "source"
    report = GeneratorReport(table, facts, samples)
    if out_dir is not None:
        write_report(report, panel, train, days, Path(out_dir))
    return report


def _continued_returns(train: PricePanel, synthetic: PricePanel) -> np.ndarray:
    """Synthetic log returns including the first one, from the last real close."""
    close = np.concatenate([train.feature("close")[-1:], synthetic.feature("close")], axis=0)
    return np.log(close[1:] / close[:-1])


def write_report(
    report: GeneratorReport, panel: PricePanel, train: PricePanel, days: int, out_dir: Path
) -> None:
    """Write the tables (CSV, Markdown), the per-lag curves and the three figures, atomically."""
    table = report.table
    atomic_save(out_dir / "stylized_facts.csv", lambda p: table.to_csv(p, float_format="%.6g"))
    atomic_write_text(out_dir / "stylized_facts.md", _markdown(table))
    curves = pd.concat(
        {
            label: pd.DataFrame(
                {
                    "acf_r": pd.Series(f.acf_returns, index=range(1, len(f.acf_returns) + 1)),
                    "acf_abs_r": pd.Series(f.acf_abs_returns, index=range(1, len(f.acf_abs_returns) + 1)),
                    "leverage": pd.Series(f.leverage, index=range(1, len(f.leverage) + 1)),
                }
            )
            for label, f in report.facts.items()
        },
        names=["source", "lag"],
    )
    atomic_save(out_dir / "curves.csv", lambda p: curves.to_csv(p, float_format="%.6g"))
    _save_figure(out_dir / "paths.png", _paths_figure(report, panel, train, days))
    _save_figure(out_dir / "acf.png", _acf_figure(report))
    _save_figure(out_dir / "histograms.png", _histogram_figure(report, train))


def _markdown(table: pd.DataFrame) -> str:
    cols = ["source", *table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for label, row in table.iterrows():
        lines.append("| " + " | ".join([str(label), *(f"{v:.4f}" for v in row)]) + " |")
    return "\n".join(lines) + "\n"


def _save_figure(path: Path, fig: plt.Figure) -> None:
    try:
        atomic_save(path, lambda p: fig.savefig(p, format="png", dpi=110, bbox_inches="tight"))
    finally:
        plt.close(fig)


def _paths_figure(report: GeneratorReport, panel: PricePanel, train: PricePanel, days: int) -> plt.Figure:
    names = list(report.paths)
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), squeeze=False, sharey=True)
    ticker = panel.tickers[0]
    real = panel.feature("close")[len(panel) - 2 * days - 1 :, 0]
    base = train.feature("close")[-1, 0]
    x_real = np.arange(-days, days + 1)
    for ax, name in zip(axes[0], names, strict=True):
        for s in report.paths[name][:10]:
            ax.plot(np.arange(0, days + 1), np.r_[base, s.feature("close")[:, 0]] / base, lw=0.7, alpha=0.7)
        ax.plot(x_real, real / base, color="black", lw=1.2, label="real")
        ax.axvline(0, color="grey", ls=":")
        ax.set_title(f"{name}: {ticker}")
        ax.set_xlabel("days from last training close")
    axes[0][0].set_ylabel("close / last training close")
    axes[0][0].legend(loc="upper left")
    fig.tight_layout()
    return fig


def _acf_figure(report: GeneratorReport) -> plt.Figure:
    fig, (ax_r, ax_abs) = plt.subplots(1, 2, figsize=(11, 3.8))
    for label, f in report.facts.items():
        style = {"color": "black", "lw": 2} if label == REAL_TRAIN else {"lw": 1}
        ax_r.plot(range(1, len(f.acf_returns) + 1), f.acf_returns, marker=".", label=label, **style)
        ax_abs.plot(range(1, len(f.acf_abs_returns) + 1), f.acf_abs_returns, label=label, **style)
    ax_r.set_title("ACF of log returns r")
    ax_abs.set_title("ACF of |r| (volatility clustering)")
    for ax in (ax_r, ax_abs):
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xlabel("lag (days)")
    ax_abs.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _histogram_figure(report: GeneratorReport, train: PricePanel) -> plt.Figure:
    names = list(report.paths)
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), squeeze=False, sharey=True)
    real = log_returns(train).ravel()
    bins = np.linspace(np.quantile(real, 0.001), np.quantile(real, 0.999), 60)
    for ax, name in zip(axes[0], names, strict=True):
        synth = np.concatenate([_continued_returns(train, s).ravel() for s in report.paths[name]])
        ax.hist(real, bins=bins, density=True, histtype="step", color="black", label="real (train)")
        ax.hist(synth, bins=bins, density=True, alpha=0.5, label=name)
        ax.set_yscale("log")
        ax.set_title(f"{name}: daily log returns")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
