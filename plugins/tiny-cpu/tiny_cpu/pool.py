"""A worker pool written in C: one kernel launch split across CPU cores without taking the GIL per worker.

Kernels split across workers (SPECIAL "core_id") also get an entry point `NAME_entry(const long long *arguments,
int core_id)` from the C renderer, which unpacks buffer addresses and variable values from one array. The pool
library built here runs `entry(arguments, core_id)` for every core_id on persistent POSIX threads; the calling
thread takes a share itself, and the call returns once every share is done. One ctypes call per launch: a
Python-level pool costs a lock, a queue and a thread switch per worker, more than a small kernel's own run time.

The pool is compiled on first use with the CPU device's compiler (and cached like any kernel). A forked child
(os.fork, multiprocessing) starts from an empty pool: the parent's threads do not exist there. Where that fails
(no POSIX threads), `parallel_runner()` returns None and the runtime falls back to Python threads.
"""
from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any

POOL_SOURCE = r"""
#include <pthread.h>
typedef void (*tc_entry)(const long long *, int);
#define TC_MAX_THREADS 256
static pthread_mutex_t tc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tc_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t tc_done = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t tc_launch = PTHREAD_MUTEX_INITIALIZER;
static tc_entry tc_job_entry;
static const long long *tc_job_arguments;
static int tc_job_shares, tc_next_share, tc_finished_shares, tc_active, tc_started;
static unsigned long tc_generation;

/* claim shares of the current job until none are left; called with tc_lock held, returns with it held */
static void tc_work(void) {
  tc_entry entry = tc_job_entry;
  const long long *arguments = tc_job_arguments;
  while (tc_next_share < tc_job_shares) {
    int share = tc_next_share++;
    pthread_mutex_unlock(&tc_lock);
    entry(arguments, share);
    pthread_mutex_lock(&tc_lock);
    tc_finished_shares++;
  }
}

/* `start` is the generation before the job that started the thread, so that job counts as new */
static void *tc_worker(void *start) {
  unsigned long seen = (unsigned long)start;
  pthread_mutex_lock(&tc_lock);
  for (;;) {
    while (tc_generation == seen) pthread_cond_wait(&tc_wake, &tc_lock);
    seen = tc_generation;
    tc_active++;
    tc_work();
    tc_active--;
    if (tc_finished_shares == tc_job_shares && tc_active == 0) pthread_cond_signal(&tc_done);
  }
  return 0;
}

/* after fork() only the forking thread exists: start from an empty pool with fresh locks (called by Python's
   os.register_at_fork in the child) */
void tinycore_pool_after_fork(void) {
  pthread_mutex_init(&tc_lock, 0);
  pthread_mutex_init(&tc_launch, 0);
  pthread_cond_init(&tc_wake, 0);
  pthread_cond_init(&tc_done, 0);
  tc_started = 0;
  tc_active = 0;
}

/* run entry(arguments, share) for share = 0 .. shares-1 on up to `threads` threads (the caller included);
   returns 0, or -1 when no worker thread could be started (every share then ran on the caller) */
int tinycore_parallel(tc_entry entry, const long long *arguments, int shares, int threads) {
  int status = 0;
  pthread_mutex_lock(&tc_launch);
  pthread_mutex_lock(&tc_lock);
  if (threads > TC_MAX_THREADS) threads = TC_MAX_THREADS;
  while (tc_started < threads - 1 && tc_started < shares - 1) {
    pthread_t thread;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    int failed = pthread_create(&thread, &attributes, tc_worker, (void *)tc_generation);
    pthread_attr_destroy(&attributes);
    if (failed) { status = tc_started ? 0 : -1; break; }
    tc_started++;
  }
  tc_job_entry = entry;
  tc_job_arguments = arguments;
  tc_job_shares = shares;
  tc_next_share = 0;
  tc_finished_shares = 0;
  tc_generation++;
  pthread_cond_broadcast(&tc_wake);
  tc_work();
  while (tc_finished_shares < tc_job_shares || tc_active > 0) pthread_cond_wait(&tc_done, &tc_lock);
  pthread_mutex_unlock(&tc_lock);
  pthread_mutex_unlock(&tc_launch);
  return status;
}
"""

_lock = threading.Lock()
_state: dict[str, Any] = {}


def parallel_runner() -> Callable[[int, Any, int, int], int] | None:
    """The pool's `tinycore_parallel(entry_address, arguments, shares, threads)`, or None without a C pool."""
    with _lock:
        if "runner" not in _state:
            _state["runner"] = _build()
        return _state["runner"]


def _build() -> Callable[[int, Any, int, int], int] | None:
    """Compile and load the pool library; None when the compiler or the platform cannot build it."""
    try:
        from tiny_cpu.compiler import ClangCompiler
        from tiny_cpu.runtime import _load
        library, _ = _load(ClangCompiler().compile_cached(POOL_SOURCE))
        function = library.tinycore_parallel
    except Exception:  # noqa: BLE001 - any failure means: use the Python pool
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    function.restype = ctypes.c_int
    after_fork = library.tinycore_pool_after_fork
    after_fork.restype = None
    os.register_at_fork(after_in_child=after_fork)
    _state["library"] = library  # kept loaded for the life of the process
    return function  # type: ignore[no-any-return]
