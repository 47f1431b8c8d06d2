"""PNG plots of a batch (matplotlib's Agg canvas; no pyplot state, so safe off the main thread).

Per strategy: a histogram of the step-reward sums, a scatter of step-reward sum vs final return
with Pearson's r and Spearman's rho in the title, and the ECDF of the indicator sums.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from rollout_dataset.batch import stats

if TYPE_CHECKING:  # matplotlib is imported on first use: importing the batch package stays cheap
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_files", "histogram", "scatter", "ecdf_plot", "write_plots"]

log = logging.getLogger(__name__)


def plot_files(strategy: str) -> dict[str, str]:
    """The file names of one strategy's plots, by kind (`hist`, `scatter`, `ecdf`)."""
    return {
        "hist": f"hist_step_reward_{strategy}.png",
        "scatter": f"scatter_step_reward_vs_final_{strategy}.png",
        "ecdf": f"ecdf_indicator_{strategy}.png",
    }


def _figure(width: float, height: float) -> "Figure":
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def _save(fig: "Figure", path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.subplots_adjust(left=0.12, right=0.96, bottom=0.13, top=0.84)
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=100)
    return path


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _plot(path: Path, size: tuple[float, float], draw: Callable[["Axes"], object] | None, *, title: str,
          xlabel: str, ylabel: str) -> Path:
    """One plot on one axes: `draw` on it (None: "no data" in the middle), the labels, saved as PNG."""
    fig = _figure(*size)
    ax = fig.add_subplot(111)
    if draw is not None:
        draw(ax)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return _save(fig, path)


def histogram(values: Sequence[Any], path: Path, *, title: str, xlabel: str) -> Path:
    """Write a histogram PNG.

    Args:
        values: numbers (None/NaN dropped).
        path: the PNG to write.
        title: plot title.
        xlabel: x-axis label.

    Returns:
        `path`.
    """
    data = stats.clean(values)
    bins = min(30, max(5, int(data.size**0.5) + 1))
    return _plot(path, (6, 4), (lambda ax: ax.hist(data, bins=bins, color="#4C72B0", edgecolor="white"))
                 if data.size else None, title=title, xlabel=xlabel, ylabel="rollouts")


def scatter(x: Sequence[Any], y: Sequence[Any], path: Path, *, title: str, xlabel: str, ylabel: str) -> Path:
    """Write a scatter PNG whose title carries Pearson's r and Spearman's rho.

    Args:
        x: numbers (pairs with a missing side are dropped).
        y: numbers, same length.
        path: the PNG to write.
        title: plot title (the correlations are appended).
        xlabel: x-axis label.
        ylabel: y-axis label.

    Returns:
        `path`.
    """
    r = stats.pearson(x, y)
    rho = stats.spearman(x, y)
    xs, ys = stats.paired(x, y)
    return _plot(path, (6, 4.5), (lambda ax: ax.scatter(xs, ys, alpha=0.6, color="#DD8452", edgecolor="none"))
                 if xs.size else None, title=f"{title}\nPearson r = {_fmt(r)}, Spearman rho = {_fmt(rho)}, n = {xs.size}",
                 xlabel=xlabel, ylabel=ylabel)


def ecdf_plot(values: Sequence[Any], path: Path, *, title: str, xlabel: str) -> Path:
    """Write an ECDF (step) PNG: the fraction of rollouts at or below each value.

    Args:
        values: numbers (None/NaN dropped).
        path, title, xlabel: as for `histogram`.

    Returns:
        `path`.
    """
    xs, ps = stats.ecdf(values)

    def draw(ax: "Axes") -> None:
        ax.step([xs[0], *xs], [0.0, *ps], where="post", color="#55A868")
        ax.set_ylim(0, 1.02)

    return _plot(path, (6, 4), draw if xs.size else None, title=title, xlabel=xlabel,
                 ylabel="fraction of rollouts <= x")


def write_plots(runs: Mapping[str, Sequence[Mapping[str, Any]]], plots_dir: Path) -> dict[str, dict[str, Path]]:
    """Write every plot of a batch.

    Args:
        runs: strategy -> its run records (`step_reward_sum`, `final_return`, `step_indicator_sum`).
        plots_dir: the `plots/` folder.

    Returns:
        strategy -> kind -> path of the PNG written.
    """
    written: dict[str, dict[str, Path]] = {}
    for strategy, records in runs.items():
        names = plot_files(strategy)
        step = [r.get("step_reward_sum") for r in records]
        final = [r.get("final_return") for r in records]
        indicator = [r.get("step_indicator_sum") for r in records]
        written[strategy] = {
            "hist": histogram(
                step, plots_dir / names["hist"], title=f"Step reward sum ({strategy})", xlabel="step_reward_sum"
            ),
            "scatter": scatter(
                step,
                final,
                plots_dir / names["scatter"],
                title=f"Step reward vs final return ({strategy})",
                xlabel="step_reward_sum",
                ylabel="final_return",
            ),
            "ecdf": ecdf_plot(
                indicator, plots_dir / names["ecdf"], title=f"ECDF of indicator sum ({strategy})", xlabel="step_indicator_sum"
            ),
        }
        log.debug("wrote plots for %s into %s", strategy, plots_dir)
    return written
