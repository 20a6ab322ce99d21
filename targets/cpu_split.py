"""Which parallel dispatches of a CPU replay run on the calling thread alone: measured, not guessed.

A dispatch split over the thread pool (targets/cpu_pool.py) pays for the split: the workers must see the region,
each thread reads the part of its input the other core wrote, and the last chunk decides when the region ends. For
a kernel of a few microseconds (a squeeze-and-excitation's pool and products, a padded copy's border, most of a
small model's kernels) that costs more than the second core saves: such kernels ran several times slower split
than on the caller alone. How much is machine- and kernel-dependent (core count, caches, the VM's wake-up cost),
so the replay measures it (targets/replay_cpu.py ``CPUReplay``): on its first call at a thread count it times
every dispatch both ways, in order, then ``ROUNDS - 1`` more times those that could run inline (``candidates``: a
convolution taking twice as long inline is not timed again, so a large model's first call does not last several
calls), and ``split_choice`` picks those that run inline; the whole call with that choice must then beat every
dispatch split (``keep_choice``), else nothing runs inline.
``$DRIVEPACK_CPU_SPLIT_PROBE=0`` turns the measurement off (every parallel dispatch split, as before).

The choice is kept in the kernel cache (targets/kernel_cache.py), keyed by the replay's driver source (its kernels
and dispatches), the thread count and the machine (``split_key``): a later capture of the same model on the same
machine, or a later process replaying its package, takes it instead of measuring again. A stored choice is a line
of ``0`` and ``1``, one per dispatch; any other content is ignored and measured over.

What holds: the choice changes only which threads run a dispatch's chunks, never what a chunk computes, so results
are the same bit for bit either way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from jit.common.helpers import usable_cores
from targets.cpu_runtime import host_isa
from targets.kernel_cache import cache_dir, framed_digest, publish

PROBE_ENV = "DRIVEPACK_CPU_SPLIT_PROBE"  # "0": no measurement, every parallel dispatch split
ROUNDS = 3  # timings of each dispatch each way; the fastest counts (a preempted run only ever adds time)
# a dispatch runs inline only when that is faster by this share: noise in a few-microsecond timing must not flip it
INLINE_MARGIN = 0.1
# timed again after the first round where inline took less than this many times its split time: a first timing
# preempted only ever adds time, so a dispatch past this is not one a second look would pick
CANDIDATE_SLACK = 1.5


def probe_wanted() -> bool:
    return os.environ.get(PROBE_ENV, "1").strip() != "0"


def candidates(split_s: Sequence[float], inline_s: Sequence[float], parallel: Sequence[bool]) -> list[int]:
    """The parallel dispatches whose inline time is within ``CANDIDATE_SLACK`` of their split time: those worth
    timing again."""
    pairs = enumerate(zip(split_s, inline_s, parallel, strict=True))
    return [i for i, (split, inline, par) in pairs if par and inline < split * CANDIDATE_SLACK]


def split_choice(split_s: Sequence[float], inline_s: Sequence[float], parallel: Sequence[bool]) -> list[bool]:
    """Per dispatch: run it inline (True) where it is parallel and its fastest inline time beats its fastest split
    time by ``INLINE_MARGIN``."""
    return [p and i < s * (1 - INLINE_MARGIN) for s, i, p in zip(split_s, inline_s, parallel, strict=True)]


def keep_choice(all_split_s: float, chosen_s: float) -> bool:
    """Whether the whole call with the chosen dispatches inline (its fastest time) beats every dispatch split: each
    dispatch was timed after neighbours that ran its own way, and a consumer may read its producer's output from
    the other core's cache, so the choice is checked as a whole."""
    return chosen_s < all_split_s


def split_key(driver_source: str, threads: int) -> str:
    """The cache key of a choice: a replay's driver source at a thread count on this machine (its instruction sets
    and usable cores: another machine's timings say nothing about this one's)."""
    return framed_digest([driver_source, str(threads), host_isa(), str(usable_cores())], seed="cpu split choice")


def stored_choice(key: str, n_dispatches: int) -> list[bool] | None:
    """The choice stored under ``key``, or None where there is none or it is not ``n_dispatches`` of 0 and 1."""
    try:
        text = (cache_dir() / f"{key}.split").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if len(text) != n_dispatches or set(text) - {"0", "1"}:
        return None
    return [c == "1" for c in text]


def store_choice(key: str, choice: Sequence[bool]) -> None:
    """Keep ``choice`` under ``key``; a cache that cannot be written only means measuring again next time."""
    try:
        publish(cache_dir() / f"{key}.split", "".join("1" if c else "0" for c in choice))
    except OSError:
        pass
