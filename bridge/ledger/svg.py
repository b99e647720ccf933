"""Inline SVG charts for the HTML report: horizontal bars, a timeline and time series, no plotting library.

The report must be one self-contained file that opens anywhere (no scripts, no network), so charts are
plain SVG text. Every label is escaped; sizes are in CSS pixels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f")
ROW = 18
LABEL_WIDTH = 220
CHART_WIDTH = 520


@dataclass(frozen=True)
class Bar:
    """One bar: its row label, series name and value."""

    label: str
    series: str
    value: float


def _fmt(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def bars(data: Sequence[Bar], title: str, unit: str = "") -> str:
    """Grouped horizontal bars: one group per label, one colour per series, value printed at the end."""
    if not data:
        return f'<p class="empty">{escape(title)}: no data</p>'
    series = list(dict.fromkeys(bar.series for bar in data))
    labels = list(dict.fromkeys(bar.label for bar in data))
    top = max(bar.value for bar in data) or 1.0
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    height = 30 + len(labels) * (len(series) * ROW + 10) + 24
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{LABEL_WIDTH + CHART_WIDTH + 220}" '
        f'height="{height}" aria-label="{escape(title)}">',
        f'<text x="0" y="16" font-weight="bold">{escape(title)}</text>',
    ]
    y = 30
    values = {(bar.label, bar.series): bar.value for bar in data}
    for label in labels:
        out.append(f'<text x="0" y="{y + 13}" font-size="12">{escape(label)}</text>')
        for name in series:
            value = values.get((label, name))
            if value is not None:
                width = max(1.0, CHART_WIDTH * value / top) if value > 0 else 0.0
                out.append(
                    f'<rect x="{LABEL_WIDTH}" y="{y}" width="{width:.1f}" height="{ROW - 3}" '
                    f'fill="{colours[name]}"><title>{escape(label)} {escape(name)}: {_fmt(value)}{unit}'
                    "</title></rect>"
                )
                out.append(
                    f'<text x="{LABEL_WIDTH + width + 4:.1f}" y="{y + 12}" font-size="11">'
                    f"{escape(name)} {_fmt(value)}{escape(unit)}</text>"
                )
            y += ROW
        y += 10
    legend_x = 0
    for name in series:
        out.append(f'<rect x="{legend_x}" y="{y}" width="10" height="10" fill="{colours[name]}"/>')
        out.append(f'<text x="{legend_x + 14}" y="{y + 9}" font-size="11">{escape(name)}</text>')
        legend_x += 16 + 7 * len(name) + 12
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class Span:
    """One stretch of a timeline row."""

    row: str
    start: float
    end: float
    state: str


TIMELINE_COLOURS = {
    "primary": "#4e79a7",
    "secondary": "#f28e2b",
    "primary, backlog": "#e15759",
    "secondary, backlog": "#b07aa1",
}


def timeline(spans: Sequence[Span], title: str) -> str:
    """One row per entity, coloured by state, on a shared time axis (seconds from the first event)."""
    if not spans:
        return f'<p class="empty">{escape(title)}: no data</p>'
    rows = list(dict.fromkeys(span.row for span in spans))
    t0 = min(span.start for span in spans)
    t1 = max(span.end for span in spans)
    scale = CHART_WIDTH / max(t1 - t0, 1e-9)
    height = 30 + len(rows) * (ROW + 6) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{LABEL_WIDTH + CHART_WIDTH + 20}" '
        f'height="{height}" aria-label="{escape(title)}">',
        f'<text x="0" y="16" font-weight="bold">{escape(title)}</text>',
    ]
    for index, row in enumerate(rows):
        y = 30 + index * (ROW + 6)
        out.append(f'<text x="0" y="{y + 13}" font-size="12">{escape(row)}</text>')
        for span in (s for s in spans if s.row == row):
            x = LABEL_WIDTH + (span.start - t0) * scale
            width = max(1.0, (span.end - span.start) * scale)
            colour = TIMELINE_COLOURS.get(span.state, "#999999")
            out.append(
                f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{ROW}" fill="{colour}">'
                f"<title>{escape(row)}: {escape(span.state)} for {span.end - span.start:.1f} s</title></rect>"
            )
    axis_y = 30 + len(rows) * (ROW + 6) + 4
    out.append(
        f'<text x="{LABEL_WIDTH}" y="{axis_y + 10}" font-size="11">0 s</text>'
        f'<text x="{LABEL_WIDTH + CHART_WIDTH - 60}" y="{axis_y + 10}" font-size="11">{t1 - t0:,.1f} s</text>'
    )
    legend_x = 0
    for state, colour in TIMELINE_COLOURS.items():
        out.append(f'<rect x="{legend_x}" y="{axis_y + 18}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{legend_x + 14}" y="{axis_y + 27}" font-size="11">{escape(state)}</text>')
        legend_x += 16 + 7 * len(state) + 12
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class Line:
    """One line of a time-series chart: a value per bucket, None where there is none (the line breaks)."""

    name: str
    values: Sequence[float | None]


@dataclass(frozen=True)
class Shade:
    """A band behind a time-series chart: ``kind`` (``outage`` / ``failover``), label, start and end."""

    kind: str
    label: str
    start: float
    end: float


SERIES_WIDTH = 760
SERIES_HEIGHT = 150
_PLOT = (56, 24, SERIES_WIDTH - 12, SERIES_HEIGHT - 28)  # left, top, right, bottom
BAND_COLOURS = {"outage": "#e15759", "failover": "#4e79a7"}


def series_chart(
    title: str, times: Sequence[float], step: float, lines: Sequence[Line], shades: Sequence[Shade]
) -> str:
    """A line chart over time with shaded bands behind it. Each line and band carries its data
    (``data-values``: ``time:value`` pairs; ``data-start``/``data-end``: epoch seconds) so a reader or a
    test finds what is drawn where without measuring pixels."""
    left, top, right, bottom = _PLOT
    t0, t1 = (times[0], times[-1] + step) if times else (0.0, 1.0)
    span = max(t1 - t0, 1e-9)
    values = [v for line in lines for v in line.values if v is not None]
    peak = max(values, default=0.0) or 1.0

    def x(at: float) -> float:
        return left + (right - left) * (min(max(at, t0), t1) - t0) / span

    def y(value: float) -> float:
        return bottom - (bottom - top) * value / peak

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" class="series" width="{SERIES_WIDTH}" '
        f'height="{SERIES_HEIGHT}" aria-label="{escape(title)}" data-start="{t0:.3f}" data-end="{t1:.3f}">',
        f'<text x="0" y="14" font-weight="bold" font-size="13">{escape(title)}</text>',
    ]
    for shade in shades:
        x0, x1 = x(shade.start), x(shade.end)
        out.append(
            f'<rect class="band {escape(shade.kind)}" x="{x0:.1f}" y="{top}" width="{max(1.0, x1 - x0):.1f}" '
            f'height="{bottom - top}" fill="{BAND_COLOURS.get(shade.kind, "#999999")}" fill-opacity="0.16" '
            f'data-label="{escape(shade.label)}" data-start="{shade.start:.3f}" data-end="{shade.end:.3f}">'
            f"<title>{escape(shade.label)}: {shade.end - shade.start:,.0f} s</title></rect>"
        )
    for fraction in (0.0, 0.5, 1.0):
        gy = y(peak * fraction)
        out.append(f'<line x1="{left}" y1="{gy:.1f}" x2="{right}" y2="{gy:.1f}" stroke="#ddd"/>')
        out.append(
            f'<text x="{left - 6}" y="{gy + 4:.1f}" font-size="10" text-anchor="end">'
            f"{_fmt(peak * fraction)}</text>"
        )
    for index in range(5):
        at = t0 + span * index / 4
        anchor = "start" if index == 0 else "end" if index == 4 else "middle"
        out.append(
            f'<text x="{x(at):.1f}" y="{bottom + 14}" font-size="10" text-anchor="{anchor}">'
            f"{_clock(at)}</text>"
        )
    for index, line in enumerate(lines):
        colour = PALETTE[index % len(PALETTE)]
        out += _line_marks(line, colour, times, step, lambda at, v: (x(at), y(v)))
        lx = right - (len(lines) - index) * 90  # the legend at the right, clear of the title
        out.append(f'<rect x="{lx}" y="{top - 14}" width="10" height="3" fill="{colour}"/>')
        out.append(f'<text x="{lx + 14}" y="{top - 10}" font-size="10">{escape(line.name)}</text>')
    out.append("</svg>")
    return "".join(out)


def _line_marks(
    line: Line,
    colour: str,
    times: Sequence[float],
    step: float,
    place: Callable[[float, float], tuple[float, float]],
) -> list[str]:
    """One line's marks: a polyline per stretch without gaps, a dot for a value between two gaps (a
    polyline of one point has no length and draws nothing); each carries the line's ``data-values``."""
    pairs = [(at + step / 2, v) for at, v in zip(times, line.values, strict=True) if v is not None]
    data = " ".join(f"{at:.3f}:{v:.6f}" for at, v in pairs)
    name, marks = escape(line.name), []
    for run in _runs(times, line.values, step):
        if len(run) == 1:
            cx, cy = place(*run[0])
            marks.append(
                f'<circle class="dot" data-series="{name}" data-values="{data}" cx="{cx:.1f}" '
                f'cy="{cy:.1f}" r="2.5" fill="{colour}"/>'
            )
            continue
        points = " ".join("{:.1f},{:.1f}".format(*place(at, v)) for at, v in run)
        marks.append(
            f'<polyline class="line" data-series="{name}" data-values="{data}" '
            f'points="{points}" fill="none" stroke="{colour}" stroke-width="1.6"/>'
        )
    return marks


def _runs(
    times: Sequence[float], values: Sequence[float | None], step: float
) -> list[list[tuple[float, float]]]:
    """The stretches of consecutive values a polyline joins (a missing value breaks the line)."""
    runs: list[list[tuple[float, float]]] = [[]]
    for at, value in zip(times, values, strict=True):
        if value is None:
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((at + step / 2, value))
    return [run for run in runs if run]


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S")
