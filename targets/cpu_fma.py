"""Whether the CPU target should tile with 16-lane float32 vectors (AVX-512) on this machine: probed from its
multiply-add throughput, not read off the CPU's name.

Cores differ here: some have full-width 512-bit units (AMD Zen 5, Intel server parts with two FMA ports), where a
16-lane FMA does twice the work of an 8-lane one in the same time; some run it as two halves on 256-bit units (AMD
Zen 4, Intel parts with one 512-bit port), where it takes twice as long and does the work of two 8-lane FMAs in one
instruction; on some older parts a 512-bit op costs more than its two halves (the core clocks down while it runs
them). 16-lane tiles (``WIDE_VECTOR_OPTS``, targets/cpu.py) pay on the first two kinds: on halved units they still
issue half the instructions and have 32 registers' room for larger tiles (measured against 8-lane tiles with
``DRIVEPACK_CPU_WIDE_VECTORS``, benchmarks/bench_zoo.py). They do not pay on the third.

The probe: one C function per width, a loop of ``ACCUMULATORS`` independent multiply-add chains (enough to fill
every FMA port past its latency; each starts from its own value, or the compiler merges them into one chain and the
loop times one FMA's latency, the same at both widths), each timed ``ROUNDS`` times in alternation, the fastest of
each kept. Wide pays when 16 lanes take less than ``WIDE_PAYS_BELOW`` times as long as 8 (about 1 on full-width
units, 2 on halves, more where 512-bit ops slow the core). The probe is generated here (never package text),
compiled like a kernel (cached by its source hash) and run once per machine: its answer is cached on disk by a
digest of the CPU's model and flags and of the probe's source, so a package's kernels do not change between
processes of the same machine with a noisy probe, and a changed probe measures again.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

import cffi

from targets.cpu_runtime import compile_shared
from targets.kernel_cache import cache_dir

ACCUMULATORS = 12
ITERATIONS = 50_000
ROUNDS = 7
WIDE_PAYS_BELOW = 2.5
HALVED_FROM = 1.5  # between full-width units' 1 and halved ones' 2
WIDE_ENV = "DRIVEPACK_CPU_WIDE_VECTORS"  # "1" / "0": decided by the caller instead of the probe

_CHAINS = "\n".join(f"    a{i} = a{i} * m + x;" for i in range(ACCUMULATORS))
_SUM = " + ".join(f"a{i}" for i in range(ACCUMULATORS))
PROBE_SOURCE = "#define _GNU_SOURCE\n#include <time.h>\n" + "\n".join(f"""
typedef float dp_probe{n} __attribute__((vector_size({4 * n})));
double dp_fma{n}(long iterations, float seed) {{
  dp_probe{n} x = (dp_probe{n}){{0}} + seed, m = (dp_probe{n}){{0}} + 0.999f;
  dp_probe{n} {", ".join(f"a{i} = x + {i}.0f" for i in range(ACCUMULATORS))};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long k = 0; k < iterations; k++) {{
{_CHAINS}
  }}
  clock_gettime(CLOCK_MONOTONIC, &t1);
  dp_probe{n} s = {_SUM};
  volatile float sink = s[0];
  (void)sink;
  return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}}""" for n in (8, 16))
PROBE_DIGEST = hashlib.sha256(PROBE_SOURCE.encode()).hexdigest()[:12]  # part of the record's name
PROBE_CDEF = "double dp_fma8(long iterations, float seed);\ndouble dp_fma16(long iterations, float seed);"


def machine_digest() -> str:
    """A digest of what identifies this CPU to the probe: /proc/cpuinfo's model name and flags lines."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    keep = sorted({ln for ln in lines if ln.startswith(("model name", "flags", "vendor_id", "cpu family", "model\t"))})
    return hashlib.sha256("\n".join(keep).encode()).hexdigest()[:20]


def probe_ratio() -> float:
    """Seconds of the 16-lane loop over those of the 8-lane one, each the fastest of ``ROUNDS`` runs."""
    ffi = cffi.FFI()
    ffi.cdef(PROBE_CDEF)
    lib = ffi.dlopen(str(compile_shared(PROBE_SOURCE)))
    best = {8: float("inf"), 16: float("inf")}
    for _ in range(ROUNDS):
        best[8] = min(best[8], lib.dp_fma8(ITERATIONS, 1.0))
        best[16] = min(best[16], lib.dp_fma16(ITERATIONS, 1.0))
    return best[16] / best[8]


@cache
def wide_fma_ratio() -> float:
    """This machine's ``probe_ratio``, from its on-disk record when there is one (probed and recorded otherwise)."""
    record = cache_dir() / f"cpu-fma-{machine_digest()}-{PROBE_DIGEST}.json"
    try:
        return float(json.loads(record.read_text())["ratio"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    ratio = probe_ratio()
    tmp = record.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"wide": ratio < WIDE_PAYS_BELOW, "ratio": ratio}))
        os.replace(tmp, record)
    except OSError:
        pass  # a read-only cache: the next process probes again
    return ratio


@cache
def wide_vectors_pay(vector_width: int) -> bool:
    """Whether the CPU target should tile with 16-lane vectors on this machine (``vector_width``: its widest
    float32 vector): ``$DRIVEPACK_CPU_WIDE_VECTORS`` if set, never without 16-lane vectors, else the probe's
    answer."""
    forced = os.environ.get(WIDE_ENV)
    if forced is not None:
        return forced.strip() == "1"
    return vector_width >= 16 and wide_fma_ratio() < WIDE_PAYS_BELOW


def halved_wide_fma(vector_width: int) -> bool:
    """Whether this machine runs 16-lane FMAs on halved units (``HALVED_FROM``): its multiply-add rate a core is
    that of 8-lane units, half a full-width core's, so work that trades multiply-adds for memory traffic (Winograd's
    transforms) pays sooner here. False without 16-lane vectors (not probed)."""
    return vector_width >= 16 and wide_fma_ratio() >= HALVED_FROM
