"""The CPU thread pool every parallel kernel runs on: a small C pool (pthreads, futexes) drivepack owns.

A parallel CPU kernel takes the half-open range ``[dp_lo, dp_hi)`` of its (flattened) outermost parallel loop as its
last two parameters (targets/cstyle/walk.py); whoever launches it (the generated replay driver,
targets/replay_cpu.py, or an eager launch, targets/cpu_runtime.py) calls ``dp_parallel_for(threads, n, chunks, fn,
ctx)`` here, which splits ``[0, n)`` into chunks (``threads * SPLIT`` of them unless ``chunks`` says) and runs
``fn(ctx, lo, hi)`` once per chunk. Each thread taking part (the caller and the pool's workers) owns an equal run of
the chunks and claims its own first, in order, with an atomic counter per run; then it claims what is left of the
others'. So a worker that has not woken up claims nothing and costs nothing, one descheduled in the middle of a
chunk costs that chunk, and the caller waits only until every chunk is finished: no implicit barrier waits for every
thread of a team, and a region never waits a whole time slice for a worker the OS did not schedule. Owning runs
rather than taking chunks first come, first served keeps a thread on the same share of every region, so a kernel
reads what the kernel before it wrote on the same core, from that core's cache.

Waiting is spin-then-sleep: a worker spins at most ``SPIN_NS`` (time-checked with the monotonic clock, with the
CPU's pause instruction between checks: no iteration count tuned to one machine) after its last chunk, then blocks
on a futex; the caller spins as long for the last chunks other threads hold, then blocks too. While a replay holds
the pool (``dp_pool_hold``, targets/replay_cpu.py: one call of a command buffer), its sleeping workers are woken at
the start and, between the call's regions, keep polling with a ``sched_yield`` after each spin instead of sleeping,
for as long as the yields come straight back (a core shared with other processes sends them to sleep as before), and
so does the caller waiting for the last chunks: on a VM the futex wake of a sleeping thread costs more than a small
region's work (the worker comes too late to claim a chunk; the caller wakes long after the last one is done), most
of all after an idle spell, when the host has stopped polling for the idle core. They poll the same way for
``LINGER_NS`` after a hold ends or a region finishes, so that calls made one after another (a benchmark's, a
camera's frames arriving late) find them awake: a worker that slept between every two calls left the caller alone
for most of the next one. A call made while a region runs (a kernel inside a lane, a second thread's replay) runs
inline on its own thread, as do calls for one thread or one element. Workers are started on first need (up to the
largest count asked for) and never end; the library is loaded once per process and never unloaded. A forked child
starts with no workers and starts its own.

A worker descheduled in the middle of a chunk holds the region up until the OS runs it again: on cores shared with
busy processes, a time slice of theirs (milliseconds) in almost every call of a model of many small regions. So when
the caller waits for other threads' chunks longer than ``STALL_RATIO`` times its own part of the region took, and at
least ``STALL_MIN_NS``, the regions that follow run on the caller alone for ``SOLO_FACTOR`` times that wait (at most
``SOLO_MAX_NS``), then share out again: under lasting contention the caller computes alone rather than waiting a
slice per region for a worker, and on a quiet machine a rare stall costs a few alone regions. Where the workers' short
time slices (below) are in effect, a descheduled worker is back within a slice of the busy process's instead, and a
solo spell only halves the process's share of the cores: there the factor is 0 (no spells). Under two busy processes
on two cores, p50 with factor 0 against 16: resnet18_op 28.1 against 34.4 ms, efficientnet_b0 19.5 against 23.0 and
18.5 against 22.7 ms, mobilenet_v3_small 1.88 against 1.98 ms (with the kernel's slices, 16 was the faster).

A worker keeps off the core its caller runs on: the caller notes its core (``sched_getcpu``) when it publishes a
region or a hold, and where it changed sets every worker's affinity to every core the process may use but that one
(the caller does it, not the worker when woken: a worker waiting to run on the caller's core could not run to move
itself while a real-time caller held the core). Left to the OS, a worker woken after an idle spell ran on the
caller's core for the next several calls (the transformer of benchmarks/bench_zoo.py took six calls after a 50 ms
pause to reach its two-thread speed, three this way), as PoCL's unpinned workers did (targets/cl_binding.py). The
caller itself is never pinned, and the workers stay within the cores the process was given (``taskset``);
``DRIVEPACK_CPU_PIN=0`` leaves them alone.

A worker asks the scheduler for a short time slice (``SLICE_NS``, EEVDF's ``sched_attr.sched_runtime``, Linux 6.12
and later; policy and nice kept): a thread with a shorter slice has an earlier virtual deadline, so a worker woken
for a region on a core a busy process holds preempts it at once instead of waiting out its slice, and is
preempted again after its share. It changes when a worker runs, never how much CPU it gets. Under two busy
processes on two cores a worker left with the kernel's slice (a few milliseconds) held the caller up for one in many
regions: p50 of a call 10-50% lower with the short slice (benchmarks/bench_zoo.py's models). The caller's own
thread is the application's and is left alone. ``DRIVEPACK_CPU_SLICE_US=0`` leaves the workers the kernel's slice;
an older kernel ignores the request.

Workers follow the caller's real-time policy: a caller running ``SCHED_FIFO`` or ``SCHED_RR`` (as openpilot's modeld
does) notes its policy and priority when a replay holds the pool (or a region starts outside one), and each worker
takes the same when next woken, and a fair policy with its slice request again once the caller is fair. A fair worker
serving a real-time caller was preempted by every busy process on its core while the caller waited for its chunk:
under two busy processes, with the caller at ``SCHED_FIFO`` and workers started before it went real-time,
efficientnet_b0_op's p50 was 1.21x onnxruntime's against 0.80x with workers that follow (benchmarks/bench_zoo.py
``--realtime``). A real-time worker never polls (it spins ``SPIN_NS``, then sleeps): a poller at a real-time
priority keeps every fair thread off its core, the pool's own workers not yet woken to take the caller's policy among
them (the first region under a real-time caller ran on the caller alone). Where the OS refuses the policy (no
privilege), a worker stays as it is.

The pool is trusted code generated by drivepack, never package text; it is compiled like a kernel (cached on disk
by a hash of its source, compiler and flags).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import cffi

from jit.common.errors import CompileError

SPIN_NS = 20_000  # at most this long spinning before a futex wait (workers and caller alike)
LINGER_NS = 500_000  # idle workers poll (yielding, module docstring) this long after the last call or region
SPLIT = 4  # chunks per thread: a late thread costs at most about 1 / (threads * SPLIT) of a region
# a wait for other threads' chunks counts as a stall (module docstring) past this many times the caller's own part
# and this long: a chunk runs for a fraction of the caller's part, a descheduled thread for a time slice
STALL_RATIO = 4
STALL_MIN_NS = 500_000
SOLO_FACTOR = 16  # regions after a stall run on the caller alone for this many times the stall
SOLO_MAX_NS = 1_000_000_000
MAX_THREADS = 256
SLICE_NS = 100_000  # the workers' time slice request (module docstring): the shortest EEVDF takes
SLICE_ENV = "DRIVEPACK_CPU_SLICE_US"  # the workers' slice in microseconds; 0: the kernel's

POOL_SOURCE = r"""
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef void (*dp_fn)(void *ctx, int lo, int hi);

#define DP_MAX_WORKERS (MAX_THREADS - 1)
#define DP_MAX_CHUNKS 65535

#if defined(__x86_64__) || defined(__i386__)
#define dp_pause() __builtin_ia32_pause()
#elif defined(__aarch64__) || defined(__arm__)
#define dp_pause() __asm__ __volatile__("yield")
#else
#define dp_pause() ((void)0)
#endif

/* Every word the caller and the workers both touch during a region lies on cache lines of its own (DP_LINE: two
   lines, as adjacent-line prefetchers fetch them in pairs): where they shared lines, each chunk's claim and count
   moved a line between the cores, which cost a round trip each (several hundred nanoseconds between a VM's cores
   on different dies) and several per chunk. */
#define DP_LINE _Alignas(128)
/* the current job's chunks, one word per thread taking part (the caller's is slot 0, worker w's slot w + 1):
   generation (32 bits) | next chunk of the slot to claim (16) | end of the slot's chunks (16) */
static struct { DP_LINE _Atomic uint64_t word; } dp_slot[MAX_THREADS];
/* the job: written by the caller before it publishes `gen` (the futex word: the generation of the last job
   published), read by the workers after; unchanged while the job runs, so every core keeps its copy */
static struct {
  DP_LINE _Atomic uint32_t gen;
  _Atomic int slots, active, n, chunks;
  _Atomic(dp_fn) fn;
  _Atomic(void *) ctx;
} dp_job;
/* chunks of the current job finished (futex word), counted once per thread and job; whether the caller sleeps on it */
static struct { DP_LINE _Atomic uint32_t done; _Atomic int caller_waiting; } dp_fin;
static DP_LINE _Atomic int dp_sleepers;
/* the caller's own words, read by a worker only when it decides between polling and sleeping */
static DP_LINE _Atomic int dp_holds;  /* replays in progress: idle workers poll instead of sleeping */
static _Atomic int64_t dp_linger_until;  /* dp_now() until which idle workers poll instead of sleeping */
static _Atomic int dp_caller_cpu = -1;   /* the core the caller published its last region or hold from */
static _Atomic int64_t dp_solo_until;    /* dp_now() until which regions run on the caller alone (a worker stalled) */
/* the generation a new worker starts from: the last published before it was created, so that the region its
   creator publishes next is new to it however late the thread starts (read at its start, it missed that region) */
static _Atomic uint32_t dp_start_gen[MAX_THREADS];
static _Atomic pid_t dp_worker_tid[MAX_THREADS];  /* each started worker's thread id (0: not started) */
static DP_LINE atomic_flag dp_busy = ATOMIC_FLAG_INIT;  /* a region runs (the caller's, with dp_grow below) */
static pthread_mutex_t dp_grow = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t dp_once = PTHREAD_ONCE_INIT;
static int dp_workers;
static DP_LINE _Atomic int64_t dp_spin_ns = SPIN_NS;  /* from here on: settings, read far more than written */
static _Atomic int64_t dp_linger_ns = LINGER_NS;
static _Atomic int dp_stall_worker = -1;  /* tests: this worker sleeps dp_stall_ns before claiming a chunk */
static cpu_set_t dp_cores;               /* the cores the process may run on, when workers avoid the caller's */
static _Atomic int dp_avoid;             /* workers keep off the caller's core (dp_pool_avoid_caller) */
static _Atomic int64_t dp_stall_ns;
static _Atomic int64_t dp_solo_factor = SOLO_FACTOR;
static _Atomic int64_t dp_slice_ns = SLICE_NS;  /* the workers' slice request; 0: the kernel's */
static _Atomic uint32_t dp_sched_gen = 1;       /* bumped when dp_slice_ns or dp_caller_rt changes: workers
                                                   apply them when woken */
static _Atomic uint32_t dp_caller_rt;           /* the caller's real-time policy << 8 | its priority; 0: fair */
static __thread int dp_worker_rt;               /* this worker runs with the caller's real-time policy */

struct dp_sched_attr {
  uint32_t size, policy;
  uint64_t flags;
  int32_t nice;
  uint32_t priority;
  uint64_t runtime, deadline, period;
};
/* the calling thread's scheduling attributes, where its policy is a fair one (real-time and idle threads are left
   alone) */
static int dp_fair_attr(struct dp_sched_attr *a) {
  *a = (struct dp_sched_attr){0};
  return syscall(SYS_sched_getattr, 0, a, sizeof *a, 0) == 0 && (a->policy == SCHED_OTHER || a->policy == SCHED_BATCH);
}
/* the calling thread's scheduling: the caller's real-time policy and priority where ``rt`` says one (policy << 8 |
   priority), else a fair policy with the slice request ``slice_ns`` (sched_attr.sched_runtime: EEVDF's slice on Linux
   6.12 and later, ignored before; 0: the kernel's default), its nice kept. A thread the OS does not let change
   (no privilege for a real-time policy) stays as it was. */
static void dp_follow(uint32_t rt, int64_t slice_ns) {
  struct dp_sched_attr a = {0};
  if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0) return;
  int fair = a.policy == SCHED_OTHER || a.policy == SCHED_BATCH;
  if (!rt && !fair && !dp_worker_rt) return;  /* real-time or idle by someone else's choice: left alone */
  a.size = sizeof a;
  a.flags = 0;
  a.deadline = a.period = 0;
  if (rt) {
    a.policy = rt >> 8;
    a.priority = rt & 0xff;
    a.runtime = 0;
  } else {
    if (!fair) a.policy = SCHED_OTHER;
    a.priority = 0;
    a.runtime = (uint64_t)slice_ns;
  }
  if (syscall(SYS_sched_setattr, 0, &a, 0) == 0) dp_worker_rt = rt != 0;
}

/* the calling thread's real-time policy and priority (policy << 8 | priority; 0 for any other policy): what the
   workers follow (module docstring) */
static uint32_t dp_own_rt(void) {
  struct dp_sched_attr a = {0};
  if (syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0) return 0;
  return (a.policy == SCHED_FIFO || a.policy == SCHED_RR) ? (a.policy << 8 | (a.priority & 0xff)) : 0;
}
static void dp_note_caller_rt(void) {
  uint32_t rt = dp_own_rt();
  if (rt != atomic_load_explicit(&dp_caller_rt, memory_order_relaxed)) {
    atomic_store(&dp_caller_rt, rt);
    atomic_fetch_add(&dp_sched_gen, 1);
  }
}

static void dp_futex_wait(_Atomic uint32_t *w, uint32_t v) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}
static void dp_futex_wake(_Atomic uint32_t *w, int n) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
static int64_t dp_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* spin until *w leaves `old` (true) or the spin time is spent (false) */
static int dp_spin(_Atomic uint32_t *w, uint32_t old) {
  int64_t start = 0, limit = atomic_load_explicit(&dp_spin_ns, memory_order_relaxed);
  for (unsigned k = 0;; k++) {
    if (atomic_load_explicit(w, memory_order_acquire) != old) return 1;
    dp_pause();
    if ((k & 31) == 31) {
      int64_t t = dp_now();
      if (!start) start = t;
      else if (t - start >= limit) return 0;
    }
  }
}

/* claim and run chunks of job `gen` until none is left: the slot's own chunks first, in order, then the other
   slots' (a late or descheduled thread's chunks are taken by whoever is free). A thread's own chunks are the same
   share of every region, so consecutive kernels split alike read what the same core wrote: in its cache. */
static void dp_run_chunks(uint32_t gen, int own) {
  int slots = atomic_load_explicit(&dp_job.slots, memory_order_relaxed);
  uint32_t ran = 0;
  for (int k = 0; k < slots; k++) {
    _Atomic uint64_t *word = &dp_slot[(own + k) % slots].word;
    for (;;) {
      uint64_t t = atomic_load_explicit(word, memory_order_acquire);
      uint32_t next = (uint32_t)(t >> 16) & 0xffff, end = (uint32_t)t & 0xffff;
      if ((uint32_t)(t >> 32) != gen || next >= end) break;
      if (!atomic_compare_exchange_weak_explicit(word, &t, t + (1u << 16), memory_order_acq_rel,
                                                 memory_order_relaxed))
        continue;
      /* a chunk of this job is claimed and not finished: the job's fields cannot change until it is */
      int64_t n = atomic_load_explicit(&dp_job.n, memory_order_relaxed);
      int64_t nch = atomic_load_explicit(&dp_job.chunks, memory_order_relaxed);
      dp_fn fn = atomic_load_explicit(&dp_job.fn, memory_order_relaxed);
      fn(atomic_load_explicit(&dp_job.ctx, memory_order_relaxed), (int)(n * next / nch), (int)(n * (next + 1) / nch));
      ran++;
    }
  }
  /* counted once, when nothing is left to claim: every chunk this thread claimed has run (the job's fields hold
     until its last chunk is counted) */
  uint32_t chunks = (uint32_t)atomic_load_explicit(&dp_job.chunks, memory_order_relaxed);
  if (ran && atomic_fetch_add(&dp_fin.done, ran) + ran == chunks && atomic_load(&dp_fin.caller_waiting))
    dp_futex_wake(&dp_fin.done, 1);
}

/* wake every sleeping worker (after a new dp_job.gen is published); how many were counted asleep */
static int dp_wake_sleepers(void) {
  if (atomic_load(&dp_sleepers) == 0) return 0;  /* reading keeps the line shared between the cores */
  int sleeping = atomic_exchange(&dp_sleepers, 0);
  if (sleeping > 0) dp_futex_wake(&dp_job.gen, INT_MAX);
  return sleeping;
}

static void dp_linger(void) {
  atomic_store_explicit(&dp_linger_until, dp_now() + atomic_load_explicit(&dp_linger_ns, memory_order_relaxed),
                        memory_order_relaxed);
}

/* after a spin ran out: whether to keep polling rather than sleep. Only while a replay holds the pool or lingers,
   and only if the core is not wanted elsewhere: a yield that gave the core away for longer than a spin means it is
   shared, where polling would take another thread's share of it (module docstring) */
static int dp_keep_polling(void) {
  if (dp_worker_rt) return 0;  /* module docstring: a real-time worker never polls */
  if (atomic_load_explicit(&dp_holds, memory_order_relaxed) <= 0 &&
      dp_now() >= atomic_load_explicit(&dp_linger_until, memory_order_relaxed))
    return 0;
  int64_t before = dp_now();
  sched_yield();
  return dp_now() - before < atomic_load_explicit(&dp_spin_ns, memory_order_relaxed);
}

/* every core the process may use but the caller's ``caller`` */
static cpu_set_t dp_cores_but(int caller) {
  cpu_set_t set = dp_cores;
  if (caller >= 0 && caller < CPU_SETSIZE && CPU_ISSET(caller, &set) && CPU_COUNT(&set) > 1) CPU_CLR(caller, &set);
  return set;
}

/* the caller notes its core; where it changed, it moves every started worker off it itself (a system call per
   worker): a worker waiting to run on the caller's core could not run to move itself while a real-time caller held
   that core */
static void dp_note_caller_cpu(void) {
  if (!atomic_load_explicit(&dp_avoid, memory_order_relaxed)) return;
  int cpu = sched_getcpu();
  if (atomic_exchange_explicit(&dp_caller_cpu, cpu, memory_order_relaxed) == cpu) return;
  cpu_set_t set = dp_cores_but(cpu);
  for (int w = 0; w < DP_MAX_WORKERS; w++) {
    pid_t tid = atomic_load_explicit(&dp_worker_tid[w], memory_order_relaxed);
    if (tid) sched_setaffinity(tid, sizeof set, &set);
  }
}

static void *dp_worker(void *arg) {
  int me = (int)(intptr_t)arg;
  uint32_t seen = atomic_load(&dp_start_gen[me]), sched_seen = 0;
  if (atomic_load(&dp_avoid)) {  /* started after the caller noted its core: off it from the start */
    cpu_set_t set = dp_cores_but(atomic_load(&dp_caller_cpu));
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  atomic_store(&dp_worker_tid[me], (pid_t)syscall(SYS_gettid));
  for (;;) {
    if (!dp_spin(&dp_job.gen, seen)) {
      if (dp_keep_polling()) continue;
      /* counted before each wait and uncounted by the waker (dp_wake_sleepers), so a wake-up already sent is
         not sent again by the next region before this worker has run */
      do {
        atomic_fetch_add(&dp_sleepers, 1);
        if (atomic_load(&dp_job.gen) != seen) break;
        dp_futex_wait(&dp_job.gen, seen);
      } while (atomic_load(&dp_job.gen) == seen);
    }
    seen = atomic_load_explicit(&dp_job.gen, memory_order_acquire);
    uint32_t sched_gen = atomic_load_explicit(&dp_sched_gen, memory_order_relaxed);
    if (sched_gen != sched_seen) {
      dp_follow(atomic_load(&dp_caller_rt), atomic_load(&dp_slice_ns));
      sched_seen = sched_gen;
    }
    if (me >= atomic_load_explicit(&dp_job.active, memory_order_relaxed)) continue;
    if (atomic_load_explicit(&dp_stall_worker, memory_order_relaxed) == me) {
      int64_t ns = atomic_load(&dp_stall_ns);
      struct timespec ts = {ns / 1000000000, ns % 1000000000};
      nanosleep(&ts, NULL);
    }
    dp_run_chunks(seen, me + 1);
  }
  return NULL;
}

static void dp_after_fork_child(void) {
  /* no worker survives fork: the child starts its own on first need */
  dp_workers = 0;
  for (int w = 0; w < DP_MAX_WORKERS; w++) atomic_store(&dp_worker_tid[w], 0);  /* the parent's threads */
  atomic_store(&dp_caller_cpu, -1);
  atomic_flag_clear(&dp_busy);
  atomic_store(&dp_sleepers, 0);
  atomic_store(&dp_fin.caller_waiting, 0);
  pthread_mutex_init(&dp_grow, NULL);
}
static void dp_init(void) { pthread_atfork(NULL, NULL, dp_after_fork_child); }

static int dp_start_workers(int want) {
  pthread_once(&dp_once, dp_init);
  if (want > DP_MAX_WORKERS) want = DP_MAX_WORKERS;
  pthread_mutex_lock(&dp_grow);
  while (dp_workers < want) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    atomic_store(&dp_start_gen[dp_workers], atomic_load(&dp_job.gen));
    int failed = pthread_create(&th, &attr, dp_worker, (void *)(intptr_t)dp_workers);
    pthread_attr_destroy(&attr);
    if (failed) break;
    dp_workers++;
  }
  int have = dp_workers;
  pthread_mutex_unlock(&dp_grow);
  return have;
}

void dp_parallel_for(int threads, int n, int chunks, dp_fn fn, void *ctx) {
  if (n <= 0) return;
  if (threads <= 1 || n == 1 || atomic_flag_test_and_set_explicit(&dp_busy, memory_order_acquire)) {
    fn(ctx, 0, n);  /* one thread, one element, or a region already running (nested or another caller) */
    return;
  }
  int64_t started = dp_now();
  if (started < atomic_load_explicit(&dp_solo_until, memory_order_relaxed)) {
    fn(ctx, 0, n);  /* a worker stalled a region lately: the caller alone until the solo spell ends */
    atomic_flag_clear_explicit(&dp_busy, memory_order_release);
    return;
  }
  int workers = dp_start_workers(threads - 1);
  if (workers > threads - 1) workers = threads - 1;
  int64_t nch = chunks > 0 ? chunks : (int64_t)(workers + 1) * SPLIT;
  if (nch > n) nch = n;
  if (nch > DP_MAX_CHUNKS) nch = DP_MAX_CHUNKS;
  if (workers < 1 || nch < 2) {
    fn(ctx, 0, n);
    atomic_flag_clear_explicit(&dp_busy, memory_order_release);
    return;
  }
  uint32_t gen = atomic_load_explicit(&dp_job.gen, memory_order_relaxed) + 1;
  atomic_store_explicit(&dp_job.fn, fn, memory_order_relaxed);
  atomic_store_explicit(&dp_job.ctx, ctx, memory_order_relaxed);
  atomic_store_explicit(&dp_job.n, n, memory_order_relaxed);
  atomic_store_explicit(&dp_job.active, workers, memory_order_relaxed);
  atomic_store_explicit(&dp_fin.done, 0, memory_order_relaxed);
  atomic_store_explicit(&dp_job.chunks, (int)nch, memory_order_relaxed);
  atomic_store_explicit(&dp_job.slots, workers + 1, memory_order_relaxed);
  for (int s = 0; s <= workers; s++)
    atomic_store_explicit(&dp_slot[s].word, ((uint64_t)gen << 32) | (uint64_t)(nch * s / (workers + 1)) << 16 |
                                       (uint64_t)(nch * (s + 1) / (workers + 1)), memory_order_release);
  dp_note_caller_cpu();
  if (atomic_load_explicit(&dp_holds, memory_order_relaxed) <= 0) dp_note_caller_rt();  /* a hold noted it */
  atomic_store(&dp_job.gen, gen);
  dp_wake_sleepers();
  dp_run_chunks(gen, 0);
  int64_t own_done = dp_now();
  /* wait for the chunks other threads hold: spin a little, then sleep until the last one is done */
  for (;;) {
    uint32_t d = atomic_load(&dp_fin.done);
    if (d == (uint32_t)nch) break;
    if (dp_spin(&dp_fin.done, d) || dp_keep_polling()) continue;
    atomic_store(&dp_fin.caller_waiting, 1);
    while ((d = atomic_load(&dp_fin.done)) != (uint32_t)nch) dp_futex_wait(&dp_fin.done, d);
    atomic_store(&dp_fin.caller_waiting, 0);
    break;
  }
  int64_t finished = dp_now(), waited = finished - own_done;
  if (waited >= STALL_MIN_NS && waited > STALL_RATIO * (own_done - started)) {
    int64_t solo = waited * atomic_load_explicit(&dp_solo_factor, memory_order_relaxed);
    atomic_store_explicit(&dp_solo_until, finished + (solo < SOLO_MAX_NS ? solo : SOLO_MAX_NS), memory_order_relaxed);
  }
  dp_linger();
  atomic_flag_clear_explicit(&dp_busy, memory_order_release);
}

/* delta +1: a replay starts; sleeping workers are woken now (an empty generation: no chunk to claim), so that
   their wake-up overlaps the caller's own work instead of the next region, and until the matching -1 they poll
   between regions instead of sleeping. Waking is skipped while a region runs: its workers are awake. Returns how
   many sleeping workers it woke. */
int dp_pool_hold(int delta) {
  if (delta < 0) dp_linger();
  if (delta > 0) dp_note_caller_rt();
  if (atomic_fetch_add(&dp_holds, delta) + delta <= 0 || delta <= 0 || atomic_load(&dp_sleepers) == 0 ||
      dp_now() < atomic_load_explicit(&dp_solo_until, memory_order_relaxed))
    return 0;
  if (atomic_flag_test_and_set_explicit(&dp_busy, memory_order_acquire)) return 0;
  dp_note_caller_cpu();
  atomic_fetch_add(&dp_job.gen, 1);
  int woken = dp_wake_sleepers();
  atomic_flag_clear_explicit(&dp_busy, memory_order_release);
  return woken;
}

/* on: woken workers keep off the core the caller runs on (of the cores the process may use now); off: they stay
   where they are. Returns whether it is on (never with fewer than two cores to use). */
int dp_pool_avoid_caller(int on) {
  cpu_set_t set;
  if (on && sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 1) {
    dp_cores = set;
    atomic_store(&dp_avoid, 1);
  } else {
    atomic_store(&dp_avoid, 0);
  }
  return atomic_load(&dp_avoid);
}

int dp_pool_workers(void) { return dp_workers; }
int dp_pool_sleeping(void) { return atomic_load(&dp_sleepers); }
void dp_pool_set_spin_ns(int64_t ns) { atomic_store(&dp_spin_ns, ns < 0 ? 0 : ns); }
void dp_pool_set_linger_ns(int64_t ns) {
  atomic_store(&dp_linger_ns, ns < 0 ? 0 : ns);
  if (ns <= 0) atomic_store(&dp_linger_until, 0);
}
int dp_pool_lingering(void) { return dp_now() < atomic_load(&dp_linger_until); }
int dp_pool_solo(void) { return dp_now() < atomic_load(&dp_solo_until); }
void dp_pool_end_solo(void) { atomic_store(&dp_solo_until, 0); }
void dp_pool_set_solo_factor(int64_t f) { atomic_store(&dp_solo_factor, f < 0 ? 0 : f); }
/* the workers' slice request from their next wake-up on (0: the kernel's) */
void dp_pool_set_slice_ns(int64_t ns) {
  atomic_store(&dp_slice_ns, ns < 0 ? 0 : ns);
  atomic_fetch_add(&dp_sched_gen, 1);
}
/* whether this kernel takes slice requests: it reports a fair thread's slice (Linux 6.12 and later) */
int dp_pool_slices(void) {
  struct dp_sched_attr a;
  return dp_fair_attr(&a) && a.runtime != 0;
}
/* the addresses of the words the caller and the workers share (tests: each on lines of its own); how many */
int dp_pool_shared_words(uintptr_t *out) {
  const volatile void *words[] = {&dp_slot[0].word, &dp_slot[1].word, &dp_job.gen, &dp_fin.done, &dp_sleepers,
                                  &dp_holds, &dp_busy, &dp_spin_ns};
  int n = (int)(sizeof words / sizeof words[0]);
  for (int i = 0; i < n; i++) out[i] = (uintptr_t)words[i];
  return n;
}
void dp_pool_stall_worker(int worker, int64_t ns) {
  atomic_store(&dp_stall_ns, ns);
  atomic_store(&dp_stall_worker, worker);
}
""".replace("MAX_THREADS", str(MAX_THREADS)).replace("SPIN_NS", str(SPIN_NS)).replace("LINGER_NS", str(LINGER_NS)) \
    .replace("SPLIT", str(SPLIT)).replace("STALL_RATIO", str(STALL_RATIO)) \
    .replace("STALL_MIN_NS", str(STALL_MIN_NS)).replace("SOLO_FACTOR", str(SOLO_FACTOR)) \
    .replace("SOLO_MAX_NS", str(SOLO_MAX_NS)).replace("SLICE_NS", str(SLICE_NS))

POOL_CDEF = """
typedef void (*dp_fn)(void *ctx, int lo, int hi);
void dp_parallel_for(int threads, int n, int chunks, dp_fn fn, void *ctx);
int dp_pool_workers(void);
int dp_pool_avoid_caller(int on);
int dp_pool_sleeping(void);
int dp_pool_hold(int delta);
void dp_pool_set_spin_ns(int64_t ns);
void dp_pool_set_linger_ns(int64_t ns);
int dp_pool_lingering(void);
void dp_pool_stall_worker(int worker, int64_t ns);
int dp_pool_shared_words(uintptr_t *out);
int dp_pool_solo(void);
void dp_pool_end_solo(void);
void dp_pool_set_solo_factor(int64_t f);
void dp_pool_set_slice_ns(int64_t ns);
int dp_pool_slices(void);
"""
POOL_FLAGS = ("-pthread",)


PIN_ENV = "DRIVEPACK_CPU_PIN"  # 0: workers go wherever the OS puts them


def slice_ns() -> int:
    """The workers' slice request in nanoseconds: ``$DRIVEPACK_CPU_SLICE_US`` microseconds, else ``SLICE_NS``."""
    raw = os.environ.get(SLICE_ENV)
    if raw is None:
        return SLICE_NS
    if not raw.strip().isdigit():
        raise CompileError(f"{SLICE_ENV}: expected a whole number of microseconds, got {raw!r}")
    return int(raw) * 1000


class Pool:
    """The loaded pool (``path``: its shared object, compiled from POOL_SOURCE with POOL_FLAGS by the CPU
    runtime, targets/cpu_runtime.py ``thread_pool``): ``lib`` (cffi) for calls from Python,
    ``parallel_for_address`` for generated C."""

    def __init__(self, path: str) -> None:
        # never unloaded: workers run its code for the rest of the process
        self._pin = ctypes.CDLL(path, mode=os.RTLD_LOCAL | getattr(os, "RTLD_NODELETE", 0))
        self.ffi = cffi.FFI()
        self.ffi.cdef(POOL_CDEF)
        self.lib: Any = self.ffi.dlopen(path)
        self.parallel_for_address = int(self.ffi.cast("uintptr_t", self.lib.dp_parallel_for))
        self.avoids_caller = bool(self.lib.dp_pool_avoid_caller(os.environ.get(PIN_ENV, "1") != "0"))
        slice_request = slice_ns()
        slices = slice_request > 0 and bool(self.lib.dp_pool_slices())
        self.lib.dp_pool_set_slice_ns(slice_request)
        self.solo_factor = 0 if slices else SOLO_FACTOR  # module docstring: no solo spells with short slices
        self.lib.dp_pool_set_solo_factor(self.solo_factor)

    def workers(self) -> int:
        return int(self.lib.dp_pool_workers())
