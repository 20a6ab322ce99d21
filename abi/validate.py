"""Runtime validation of input buffers against an ABI: a pure function, every problem reported at once.

Two forms of input are accepted:

* per-input arrays, ``{name: ndarray}``, bound by name (never by position): each array's dtype, shape, byte
  size, contiguity and element alignment are checked, float inputs are checked for NaN/inf (optional), no two
  arrays may share memory, and no name may be missing or unknown;
* a packed buffer (any bytes-like object) holding every input at its ABI offset (``validate_packed`` takes one
  per buffer name when an ABI uses several): the buffer's byte size, each input's offset in bounds and aligned,
  no overlapping inputs, and float inputs finite.

Nothing is copied except what the finiteness check reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from abi.errors import AbiError, AbiIssue, issue
from abi.layout import layout_issues
from abi.records import Abi, TensorSpec, is_float, numpy_dtype


def validate(data: Mapping[str, Any] | Any, abi: Abi, *, reject_nonfinite: bool = True,
             allow_flat: bool = False) -> None:
    """Raise AbiError listing every problem of ``data`` (per-input arrays or one packed buffer) against ``abi``.

    ``allow_flat`` accepts a 1-D array holding exactly the input's elements (openpilot keeps flat buffers);
    the byte size is checked either way.
    """
    if isinstance(data, Mapping):
        errs = _validate_arrays(data, abi, reject_nonfinite, allow_flat)
    else:
        names = sorted(abi.buffer_sizes())
        if len(names) != 1:
            raise AbiError([issue("<abi>", "buffers", "exactly one shared buffer for a single packed buffer "
                                  "(use validate_packed)", ", ".join(names) or "none")])
        errs = _validate_packed({names[0]: data}, abi, reject_nonfinite)
    if errs:
        raise AbiError(errs)


def validate_packed(buffers: Mapping[str, Any], abi: Abi, *, reject_nonfinite: bool = True) -> None:
    """Raise AbiError listing every problem of the packed ``buffers`` (buffer name -> bytes-like)."""
    errs = _validate_packed(buffers, abi, reject_nonfinite)
    if errs:
        raise AbiError(errs)


def _validate_arrays(arrays: Mapping[str, Any], abi: Abi, reject_nonfinite: bool, allow_flat: bool
                     ) -> list[AbiIssue]:
    errs: list[AbiIssue] = []
    expected = set(abi.input_names())
    for name in sorted(set(arrays) - expected):
        errs.append(issue(str(name), "name", "one of the ABI's inputs (" + ", ".join(abi.input_names()) + ")",
                          "an unknown input"))
    spans: list[tuple[int, int, str]] = []
    for spec in abi.inputs:
        if spec.name not in arrays:
            errs.append(issue(spec.name, "presence", "an array", "missing"))
            continue
        arr = arrays[spec.name]
        if not isinstance(arr, np.ndarray):
            errs.append(issue(spec.name, "type", "numpy.ndarray", type(arr).__name__))
            continue
        errs += _check_array(spec, arr, reject_nonfinite, allow_flat)
        if arr.flags.c_contiguous and arr.nbytes:
            start = arr.__array_interface__["data"][0]
            spans.append((start, start + arr.nbytes, spec.name))
    spans.sort()
    for (_, a_end, a_name), (b_start, _, b_name) in zip(spans, spans[1:], strict=False):
        if b_start < a_end:
            errs.append(issue(b_name, "overlap", "memory of its own", f"memory shared with {a_name}"))
    return errs


def _check_array(spec: TensorSpec, arr: np.ndarray, reject_nonfinite: bool, allow_flat: bool) -> list[AbiIssue]:
    errs = []
    want = numpy_dtype(spec.dtype)
    if arr.dtype != want:
        actual = str(arr.dtype)
        if want == np.uint8 and arr.dtype.kind == "f" and arr.size and np.nanmax(np.abs(arr)) <= 1.0:
            actual += " (values within [0, 1]: frames normalised already?)"
        errs.append(issue(spec.name, "dtype", spec.dtype, actual))
    flat_ok = allow_flat and arr.ndim == 1 and arr.size == int(np.prod(spec.shape))
    if arr.shape != spec.shape and not flat_ok:
        errs.append(issue(spec.name, "shape", spec.shape, arr.shape))
    if arr.nbytes != spec.byte_size:
        errs.append(issue(spec.name, "byte_size", spec.byte_size, arr.nbytes))
    if not arr.flags.c_contiguous:
        errs.append(issue(spec.name, "contiguity", "C-contiguous", f"strides {arr.strides}"))
    if not arr.flags.aligned:
        errs.append(issue(spec.name, "alignment", f"aligned to {arr.dtype.itemsize} bytes",
                          f"address {arr.__array_interface__['data'][0]}"))
    if reject_nonfinite and arr.dtype == want and is_float(spec.dtype):
        bad = _nonfinite(arr)
        if bad:
            errs.append(issue(spec.name, "values", "finite", bad))
    if spec.camera is not None and arr.dtype == want and want.kind in "iu":
        lo, hi = spec.camera.value_range
        if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
            errs.append(issue(spec.name, "value_range", f"[{lo}, {hi}]", f"[{int(arr.min())}, {int(arr.max())}]"))
    return errs


def _validate_packed(buffers: Mapping[str, Any], abi: Abi, reject_nonfinite: bool) -> list[AbiIssue]:
    errs = layout_issues(abi)
    sizes = abi.buffer_sizes()
    views: dict[str, memoryview] = {}
    for name in sorted(set(buffers) - set(sizes)):
        errs.append(issue(name, "buffer", "one of " + ", ".join(sorted(sizes)), "an unknown buffer"))
    for name, size in sizes.items():
        if name not in buffers:
            errs.append(issue(name, "presence", "a packed buffer", "missing"))
            continue
        try:
            view = memoryview(buffers[name])
        except TypeError:
            errs.append(issue(name, "type", "a bytes-like buffer", type(buffers[name]).__name__))
            continue
        if not view.contiguous:
            errs.append(issue(name, "contiguity", "a contiguous buffer", f"strides {view.strides}"))
            continue
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        if view.nbytes != size:
            errs.append(issue(name, "byte_size", size, view.nbytes))
        views[name] = view
    for spec in abi.inputs:
        view = views.get(spec.buffer)
        if view is None:
            continue
        if spec.end > view.nbytes:
            errs.append(issue(spec.name, "offset", f"in bounds: {spec.offset} + {spec.byte_size} <= {view.nbytes}",
                              f"ends at {spec.end}"))
            continue
        if reject_nonfinite and is_float(spec.dtype):
            want = numpy_dtype(spec.dtype)
            arr = np.frombuffer(view, dtype=want, count=spec.byte_size // want.itemsize, offset=spec.offset)
            bad = _nonfinite(arr)
            if bad:
                errs.append(issue(spec.name, "values", "finite", bad))
    return errs


def _nonfinite(arr: np.ndarray) -> str:
    """'' when every value is finite, else a count of NaN/inf and the first bad flat index."""
    finite = np.isfinite(arr)
    if finite.all():
        return ""
    flat = finite.reshape(-1)
    nan = int(np.isnan(arr).sum())
    inf = int(flat.size - flat.sum()) - nan
    return f"{nan} NaN and {inf} inf (first at flat index {int(np.argmin(flat))})"
