"""``karpy simulate --report out.html``: one self-contained HTML file with plots and tables.

The file must open anywhere, offline, and be sent by mail: so every plot is
a PNG embedded as a ``data:`` URI, the style sheet is inline, and nothing in
the page refers to another file or to the network. ``--report-dir`` also
writes each plot as a PNG of its own, for slides.

Plots are drawn with matplotlib's object API (``Figure``, no ``pyplot``
global state, no display needed). It is an optional dependency (the
``report`` extra): the controller's image does not need it, and
``karpy simulate --report`` says how to get it when it is missing.

The plots, per run (several runs, as a comparison gives, share the axes of
each plot so they read side by side):

- nodes by instance type and capacity type, stacked (the 11 offerings with
  the most node-hours by name, the rest as "other", so the legend stays
  readable);
- price per hour of the nodes;
- pending pods;
- any further panels the run carries (e.g. replicas and demand).

Every axis is labelled with its unit; time is in hours when the run lasts
more than two hours, else in minutes.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from karpy.sim.timeseries import RunSeries, Series, step_series

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Offerings drawn one by one in the nodes plot; the rest are summed as "other".
MAX_OFFERINGS_SHOWN = 11
_WIDTH_INCHES = 10.0
_HEIGHT_INCHES = 3.6
_DPI = 100


class ReportUnavailableError(RuntimeError):
    """The plotting library is not installed."""


@dataclass(frozen=True, slots=True)
class Plot:
    """One rendered plot: its title, a file-name slug and the PNG bytes."""

    title: str
    slug: str
    png: bytes


def _figure() -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as missing:  # pragma: no cover - depends on the installation
        raise ReportUnavailableError(
            "reports need matplotlib: install karpy with the report extra (pip install 'karpy[report]')"
        ) from missing
    return Figure(figsize=(_WIDTH_INCHES, _HEIGHT_INCHES), dpi=_DPI, layout="constrained")


def _integer_ticks(axes: Axes) -> None:
    from matplotlib.ticker import MaxNLocator

    axes.yaxis.set_major_locator(MaxNLocator(integer=True))


def _time_scale(end: float) -> tuple[float, str]:
    return (3600.0, "hours") if end > 2 * 3600.0 else (60.0, "minutes")


def _steps(series: Series, end: float, scale: float) -> tuple[list[float], list[float]]:
    """Points for ``Axes.step(where="post")``, the last value held to ``end``."""
    times = [moment / scale for moment in series.times] + [end / scale]
    values = [*series.values, series.values[-1] if series.values else 0.0]
    return times, values


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _node_hours(series: Series, end: float) -> float:
    return series.mean(end) * (end - series.times[0]) if series.times else 0.0


def _shown_offerings(run: RunSeries) -> list[Series]:
    """The offerings with the most node-hours (by name), and the rest summed as "other"."""
    ranked = sorted(run.nodes_by_offering, key=lambda s: (-_node_hours(s, run.end), s.label))
    shown = sorted(ranked[:MAX_OFFERINGS_SHOWN], key=lambda s: s.label)
    rest = ranked[MAX_OFFERINGS_SHOWN:]
    if rest:
        changes = [
            (moment, value - (series.values[index - 1] if index else 0.0))
            for series in rest
            for index, (moment, value) in enumerate(zip(series.times, series.values, strict=True))
        ]
        shown.append(step_series(f"other ({len(rest)} offerings)", changes))
    return shown


def _value_at(series: Series, moment: float) -> float:
    value = 0.0
    for when, level in zip(series.times, series.values, strict=True):
        if when > moment:
            break
        value = level
    return value


def _stacked(axes: Axes, layers: Sequence[Series], end: float, scale: float) -> None:
    moments = sorted({moment for series in layers for moment in series.times} | {end})
    base = [0.0] * len(moments)
    xs = [moment / scale for moment in moments]
    for series in layers:
        top = [low + _value_at(series, moment) for low, moment in zip(base, moments, strict=True)]
        axes.fill_between(xs, base, top, step="post", label=series.label, linewidth=0)
        base = top


def _lines(
    title: str,
    ylabel: str,
    runs: Sequence[RunSeries],
    pick: str,
    end: float,
    scale: float,
    unit: str,
    *,
    integer: bool = False,
) -> Figure:
    figure = _figure()
    axes = figure.add_subplot()
    for run in runs:
        series: Series = getattr(run, pick)
        xs, ys = _steps(series, end, scale)
        axes.step(xs, ys, where="post", label=run.name if len(runs) > 1 else series.label)
    axes.set_title(title)
    axes.set_xlabel(f"time ({unit})")
    axes.set_ylabel(ylabel)
    if integer:
        _integer_ticks(axes)
    axes.set_xlim(0, end / scale)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    if len(runs) > 1:
        axes.legend(loc="upper right")
    return figure


def plots(runs: Sequence[RunSeries]) -> list[Plot]:
    """Every plot of the report, rendered."""
    end = max(run.end for run in runs) or 1.0
    scale, unit = _time_scale(end)
    rendered: list[Plot] = []
    for run in runs:
        figure = _figure()
        axes = figure.add_subplot()
        layers = _shown_offerings(run)
        if layers:
            _stacked(axes, layers, end, scale)
            axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
        title = "Nodes by instance type and capacity type" + (f": {run.name}" if len(runs) > 1 else "")
        axes.set_title(title)
        axes.set_xlabel(f"time ({unit})")
        axes.set_ylabel("nodes")
        _integer_ticks(axes)
        axes.set_xlim(0, end / scale)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        slug = "nodes" + (f"-{_slug(run.name)}" if len(runs) > 1 else "")
        rendered.append(Plot(title, slug, _png(figure)))
    rendered.append(
        Plot(
            "Price of the nodes",
            "price",
            _png(_lines("Price of the nodes", "US$ per hour", runs, "price_per_hour", end, scale, unit)),
        )
    )
    rendered.append(
        Plot(
            "Pending pods",
            "pending",
            _png(_lines("Pending pods", "pods", runs, "pending_pods", end, scale, unit, integer=True)),
        )
    )
    titles = [title for run in runs for title, _ in run.panels]
    for title in dict.fromkeys(titles):
        figure = _figure()
        axes = figure.add_subplot()
        for run in runs:
            for panel_title, series_list in run.panels:
                if panel_title != title:
                    continue
                for series in series_list:
                    xs, ys = _steps(series, end, scale)
                    label = f"{run.name}: {series.label}" if len(runs) > 1 else series.label
                    axes.step(xs, ys, where="post", label=label)
        axes.set_title(title)
        axes.set_xlabel(f"time ({unit})")
        if title.endswith(")"):
            axes.set_ylabel(title[title.rfind("(") + 1 : -1])  # the panel's unit
        axes.set_xlim(0, end / scale)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
        rendered.append(Plot(title, _slug(title), _png(figure)))
    return rendered


def _slug(text: str) -> str:
    cleaned = "".join(c if c.isalnum() else "-" for c in text.lower())
    return "-".join(part for part in cleaned.split("-") if part)


def figures_table(runs: Sequence[RunSeries]) -> list[list[str]]:
    """The summary table: a header row (figure, then each run's name), then one row per figure."""
    names = list(dict.fromkeys(key for run in runs for key in run.figures))
    rows = [["", *(run.name for run in runs)]]
    rows.extend([name, *(run.figures.get(name, "-") for run in runs)] for name in names)
    return rows


def text_table(rows: Sequence[Sequence[str]]) -> str:
    """``rows`` (a header first) as aligned text columns, for the terminal."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; }
"""


def render_html(title: str, runs: Sequence[RunSeries], rendered: Sequence[Plot]) -> str:
    """The whole page: title, summary table, then each plot as an embedded PNG."""
    rows = figures_table(runs)
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in rows[0])
    body = "".join(
        f"<tr><th>{html.escape(row[0])}</th>"
        + "".join(f"<td>{html.escape(cell)}</td>" for cell in row[1:])
        + "</tr>"
        for row in rows[1:]
    )
    images = "".join(
        f"<h2>{html.escape(plot.title)}</h2>"
        f'<img alt="{html.escape(plot.title)}" '
        f'src="data:image/png;base64,{base64.b64encode(plot.png).decode("ascii")}">'
        for plot in rendered
    )
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        f"{images}</body></html>\n"
    )


def write_report(
    title: str, runs: Sequence[RunSeries], html_path: Path | None, png_dir: Path | None
) -> list[Path]:
    """Write the HTML file and/or one PNG per plot; the paths written."""
    rendered = plots(runs)
    written: list[Path] = []
    if html_path is not None:
        html_path.write_text(render_html(title, runs, rendered), encoding="utf-8")
        written.append(html_path)
    if png_dir is not None:
        png_dir.mkdir(parents=True, exist_ok=True)
        for plot in rendered:
            path = png_dir / f"{plot.slug}.png"
            path.write_bytes(plot.png)
            written.append(path)
    return written
