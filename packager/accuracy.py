"""Per-slice accuracy of a target's outputs against the reference outputs: the manifest's ``accuracy`` and verify's.

openpilot models return one flat vector sliced by name (``output_slices``): one row per named slice of each
output (an output without slices gets one row for the whole of it), over every golden set together:
``max_abs_err`` = max |got - ref|; ``max_rel_err`` = max |got - ref| / |ref| over the elements whose |ref|
exceeds the output's atol (below it the absolute error is what the tolerance judges); ``outside``: elements
beyond ``atol + rtol * |ref|`` (a NaN on one side only counts as outside); ``ok``: none outside. Errors are
finite numbers (NaN differences are counted in ``outside``, not in the maxima), so the report is plain JSON.
Runtime side: numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def slice_rows(outputs: Sequence[tuple[str, Sequence[tuple[str, int, int]]]],
               tolerances: Mapping[str, tuple[float, float]], got: Sequence[Mapping[str, np.ndarray]],
               ref: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, Any]]:
    """The rows of the module docstring. ``outputs``: (output name, its slices as (name, start, stop));
    ``tolerances``: output name -> (rtol, atol); ``got`` / ``ref``: the outputs of each golden set."""
    rows = []
    for name, slices in outputs:
        rtol, atol = tolerances[name]
        g = np.concatenate([np.asarray(s[name], dtype=np.float64).reshape(1, -1) for s in got])
        r = np.concatenate([np.asarray(s[name], dtype=np.float64).reshape(1, -1) for s in ref])
        parts = [(sname, start, stop) for sname, start, stop in slices] or [(None, 0, g.shape[1])]
        for sname, start, stop in parts:
            rows.append({"output": name, "slice": sname, "start": start, "stop": stop,
                         **_errors(g[:, start:stop], r[:, start:stop], rtol, atol)})
    return rows


def _errors(g: np.ndarray, r: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        diff = np.abs(g - r)
        both_nan = np.isnan(g) & np.isnan(r)
        same = (g == r) | both_nan  # equal infinities too: their difference is NaN
        outside = ~same & ~(diff <= atol + rtol * np.abs(r))
        finite = np.isfinite(diff) & ~same
        big = finite & (np.abs(r) > atol)
        # a reference just above a tiny atol can overflow the ratio: clip, so the report stays finite JSON
        rel = np.minimum(diff[big] / np.abs(r[big]), np.finfo(np.float64).max)
    n_out = int(outside.sum())
    return {"max_abs_err": float(diff[finite].max()) if finite.any() else 0.0,
            "max_rel_err": float(rel.max()) if rel.size else 0.0, "outside": n_out, "ok": n_out == 0}


def accuracy_lines(rows: Sequence[Mapping[str, Any]], against: str) -> list[str]:
    """The report as text: a header naming the reference, then one line per row."""
    out = [f"accuracy per slice vs {against}: max abs err, max rel err, elements outside tolerance:"]
    for row in rows:
        label = f"{row['output']}[{row['slice']} {row['start']}:{row['stop']}]" if row["slice"] is not None \
            else f"{row['output']}[{row['start']}:{row['stop']}]"
        out.append(f"  {label:36s} {row['max_abs_err']:10.3g} {row['max_rel_err']:10.3g} {row['outside']:6d}  "
                   f"{'ok' if row['ok'] else 'OUTSIDE'}")
    return out
