/* The CPU device's worker pool and command queues (loaded with ctypes by tiny_cpu/pool.py).

   Built when tiny-cpu is installed, as the extension tiny_cpu._pool (setup.py), so that running kernels needs no C
   compiler; a source checkout without that build compiles this file on first use instead. The library is not a
   Python module: it has no PyInit function and is only ever opened with ctypes. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <time.h>
typedef void (*tc_entry)(const long long *, int);
#define TC_MAX_THREADS 256
/* A worker that finished its share, and a caller whose shares are done while a worker's are not, poll for up to
   this long before blocking on a condition variable: waking a blocked thread costs 40-90 us on a virtual machine
   whose idle vCPU halted (measured here: the second share of a two-share launch started 40-50 us after the first,
   and the caller was woken another 40 us after the last share ended), while a step of back-to-back kernels
   launches again within microseconds. */
#define TC_SPIN_NS 200000LL
/* A worker woken by tinycore_pool_wake (a realize is about to launch kernels) polls this long for the launch: a
   full realize after a pause spends 0.1-0.3 ms in Python before its first kernel starts. */
#define TC_WAKE_SPIN_NS 2000000LL
static pthread_mutex_t tc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tc_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t tc_done = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t tc_launch = PTHREAD_MUTEX_INITIALIZER;
static tc_entry tc_job_entry;
static const long long *tc_job_arguments;
static int tc_job_shares, tc_next_share, tc_finished_shares, tc_active, tc_started, tc_sleeping;
static unsigned long tc_generation, tc_nudges;
static int tc_nudge_useful = 1;  /* 0 after a wake found no launch: no more wakes until the workers run a job */
static pthread_t tc_workers[TC_MAX_THREADS];
static int tc_kept_off = -1;  /* the CPU the workers were last kept off, -1 for none yet */

/* Keep the worker threads off the CPU the launching thread runs on (Linux). A worker woken after sleeping was often
   placed on the launching thread's CPU, and the two took turns there for milliseconds while the other CPU idled
   (conv2d after a 0.1 s pause, 2 threads: half the launches ran at one core's speed, 65-75 GFLOPS against 100-130;
   every share's start CPU recorded). Affinity is set again only when the launching thread has moved. */
static void tc_keep_workers_off_caller(void) {
#if defined(__linux__)
  int here = sched_getcpu();
  if (here < 0 || here == tc_kept_off || tc_started == 0) return;
  cpu_set_t others;
  if (sched_getaffinity(0, sizeof(others), &others) != 0) return;
  CPU_CLR(here, &others);
  if (CPU_COUNT(&others) == 0) return;  /* one allowed CPU: nothing to keep off */
  for (int k = 0; k < tc_started; k++) pthread_setaffinity_np(tc_workers[k], sizeof(others), &others);
  tc_kept_off = here;
#endif
}

static long long tc_clock_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static inline void tc_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* poll (without the lock) until done() or `span` ns have passed; the caller then rechecks under the lock */
#define TC_SPIN_UNTIL(done, span) do { \
    long long tc_deadline = tc_clock_ns() + (span); \
    for (int tc_polls = 1; !(done); tc_polls++) { \
      tc_relax(); \
      if ((tc_polls & 255) == 0 && tc_clock_ns() > tc_deadline) break; \
    } \
  } while (0)

/* the counters polled without the lock are written (under it) with atomic stores */
#define TC_GET(variable) __atomic_load_n(&(variable), __ATOMIC_ACQUIRE)
#define TC_SET(variable, value) __atomic_store_n(&(variable), (value), __ATOMIC_RELEASE)

/* claim shares of the current job until none are left; called with tc_lock held, returns with it held */
static void tc_work(void) {
  tc_entry entry = tc_job_entry;
  const long long *arguments = tc_job_arguments;
  while (tc_next_share < tc_job_shares) {
    int share = tc_next_share++;
    pthread_mutex_unlock(&tc_lock);
    entry(arguments, share);
    pthread_mutex_lock(&tc_lock);
    TC_SET(tc_finished_shares, tc_finished_shares + 1);
  }
}

/* `start` is the generation before the job that started the thread, so that job counts as new */
static void *tc_worker(void *start) {
  unsigned long seen = (unsigned long)start;
  pthread_mutex_lock(&tc_lock);
  for (;;) {
    if (tc_generation == seen) {
      pthread_mutex_unlock(&tc_lock);
      TC_SPIN_UNTIL(TC_GET(tc_generation) != seen, TC_SPIN_NS);
      pthread_mutex_lock(&tc_lock);
    }
    while (tc_generation == seen) {
      unsigned long nudges = tc_nudges;
      TC_SET(tc_sleeping, tc_sleeping + 1);
      pthread_cond_wait(&tc_wake, &tc_lock);
      TC_SET(tc_sleeping, tc_sleeping - 1);
      if (tc_generation == seen && tc_nudges != nudges) {  /* woken ahead of a launch: poll for it */
        pthread_mutex_unlock(&tc_lock);
        TC_SPIN_UNTIL(TC_GET(tc_generation) != seen, TC_WAKE_SPIN_NS);
        pthread_mutex_lock(&tc_lock);
        if (tc_generation == seen) TC_SET(tc_nudge_useful, 0);
      }
    }
    seen = tc_generation;
    TC_SET(tc_active, tc_active + 1);
    tc_work();
    TC_SET(tc_active, tc_active - 1);
    if (tc_finished_shares == tc_job_shares && tc_active == 0) pthread_cond_signal(&tc_done);
  }
  return 0;
}

static void tc_queues_after_fork(void);

/* after fork() only the forking thread exists: start from an empty pool with fresh locks (called by Python's
   os.register_at_fork in the child) */
void tinycore_pool_after_fork(void) {
  pthread_mutex_init(&tc_lock, 0);
  pthread_mutex_init(&tc_launch, 0);
  pthread_cond_init(&tc_wake, 0);
  pthread_cond_init(&tc_done, 0);
  tc_started = 0;
  tc_active = 0;
  tc_sleeping = 0;
  tc_nudge_useful = 1;
  tc_kept_off = -1;
  tc_queues_after_fork();
}

/* wake the sleeping worker threads ahead of launches that are about to come, so that the first launch does not
   wait for them to be scheduled (40-90 us on a virtual machine whose idle vCPU halted); they poll for a launch for
   TC_WAKE_SPIN_NS, then sleep again. Costs two atomic reads when every worker is awake already. A wake that no
   launch on the workers followed makes later wakes do nothing until one does: a program whose realizes launch only
   one-share kernels (eager code on small tensors) keeps its workers asleep. */
void tinycore_pool_wake(void) {
  if (TC_GET(tc_sleeping) == 0 || TC_GET(tc_nudge_useful) == 0) return;
  pthread_mutex_lock(&tc_lock);
  if (tc_sleeping && tc_nudge_useful) {
    tc_nudges++;
    pthread_cond_broadcast(&tc_wake);
  }
  pthread_mutex_unlock(&tc_lock);
}

/* the pool's state for tests: started workers, sleeping workers, wakes made, whether a wake would do anything */
void tinycore_pool_state(long long *out) {
  pthread_mutex_lock(&tc_lock);
  out[0] = tc_started;
  out[1] = tc_sleeping;
  out[2] = (long long)tc_nudges;
  out[3] = tc_nudge_useful;
  pthread_mutex_unlock(&tc_lock);
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
    if (!failed) {
      tc_workers[tc_started] = thread;
      tc_kept_off = -1;  /* the new worker may run anywhere */
    }
    pthread_attr_destroy(&attributes);
    if (failed) { status = tc_started ? 0 : -1; break; }
    tc_started++;
  }
  tc_keep_workers_off_caller();
  TC_SET(tc_nudge_useful, 1);
  tc_job_entry = entry;
  tc_job_arguments = arguments;
  tc_job_shares = shares;
  tc_next_share = 0;
  TC_SET(tc_finished_shares, 0);
  TC_SET(tc_generation, tc_generation + 1);
  pthread_cond_broadcast(&tc_wake);
  tc_work();
  if (tc_finished_shares < tc_job_shares || tc_active > 0) {
    pthread_mutex_unlock(&tc_lock);
    TC_SPIN_UNTIL(TC_GET(tc_finished_shares) >= shares && TC_GET(tc_active) == 0, TC_SPIN_NS);
    pthread_mutex_lock(&tc_lock);
  }
  while (tc_finished_shares < tc_job_shares || tc_active > 0) pthread_cond_wait(&tc_done, &tc_lock);
  pthread_mutex_unlock(&tc_lock);
  pthread_mutex_unlock(&tc_launch);
  return status;
}

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
/* The command queues of the CPU device. A command is TC_WORDS 64-bit words: an opcode and its operands.
   A signal is two 64-bit words in host memory: the value, then the timestamp (CLOCK_MONOTONIC nanoseconds). */
enum { TC_EXEC = 1, TC_SIGNAL = 2, TC_WAIT = 3, TC_COPY = 4, TC_TIMESTAMP = 5, TC_BARRIER = 6 };
#define TC_WORDS 6
#define TC_MAX_QUEUES 64
typedef unsigned long long tc_u64;
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  long long *pending;          /* commands handed to the queue's thread, owned by the queue */
  long long pending_words, pending_capacity;
  int busy, thread_started, broken;
  long long submissions, wait_timeout_ns;
} tc_queue;
static tc_queue *tc_queues[TC_MAX_QUEUES];
static int tc_queue_count;

static long long tc_now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static tc_u64 *tc_signal(long long address) { return (tc_u64 *)(__INTPTR_TYPE__)address; }

/* run `count` words of commands; a wait whose value has not come stops the run (returns its position) unless
   `block`, in which case it waits up to the queue's timeout (returns -1 and marks the queue broken past it) */
static long long tc_run(tc_queue *queue, const long long *commands, long long count, int block) {
  for (long long at = 0; at < count; at += TC_WORDS) {
    const long long *word = commands + at;
    switch (word[0]) {
    case TC_EXEC:
      if (word[3] <= 1) ((tc_entry)(__INTPTR_TYPE__)word[1])((const long long *)(__INTPTR_TYPE__)word[2], 0);
      else tinycore_parallel((tc_entry)(__INTPTR_TYPE__)word[1], (const long long *)(__INTPTR_TYPE__)word[2],
                             (int)word[3], (int)word[4]);
      break;
    case TC_SIGNAL:
      __atomic_store_n(&tc_signal(word[1])[1], (tc_u64)tc_now_ns(), __ATOMIC_RELAXED);
      __atomic_store_n(&tc_signal(word[1])[0], (tc_u64)word[2], __ATOMIC_RELEASE);
      break;
    case TC_WAIT: {
      tc_u64 *signal = tc_signal(word[1]);
      if (__atomic_load_n(&signal[0], __ATOMIC_ACQUIRE) >= (tc_u64)word[2]) break;
      if (!block) return at;
      long long deadline = tc_now_ns() + queue->wait_timeout_ns;
      for (int spins = 0; __atomic_load_n(&signal[0], __ATOMIC_ACQUIRE) < (tc_u64)word[2]; spins++) {
        if (spins < 200) { sched_yield(); continue; }
        if (tc_now_ns() > deadline) { queue->broken = 1; return -1; }
        struct timespec pause = {0, 20000};
        nanosleep(&pause, 0);
      }
      break;
    }
    case TC_COPY:
      memcpy((void *)(__INTPTR_TYPE__)word[1], (const void *)(__INTPTR_TYPE__)word[2], (size_t)word[3]);
      break;
    case TC_TIMESTAMP:
      __atomic_store_n(&tc_signal(word[1])[1], (tc_u64)tc_now_ns(), __ATOMIC_RELEASE);
      break;
    case TC_BARRIER:
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      break;
    }
  }
  return count;
}

/* the queue's thread: runs what submissions could not finish at once (they stopped at a wait), in order */
static void *tc_queue_thread(void *argument) {
  tc_queue *queue = (tc_queue *)argument;
  pthread_mutex_lock(&queue->lock);
  for (;;) {
    while (queue->pending_words == 0 || queue->busy) pthread_cond_wait(&queue->wake, &queue->lock);
    long long *batch = queue->pending, count = queue->pending_words;
    queue->pending = 0;
    queue->pending_words = queue->pending_capacity = 0;
    queue->busy = 1;
    pthread_mutex_unlock(&queue->lock);
    long long done = tc_run(queue, batch, count, 1);
    free(batch);
    pthread_mutex_lock(&queue->lock);
    queue->busy = 0;
    if (done < 0) { free(queue->pending); queue->pending = 0; queue->pending_words = queue->pending_capacity = 0; }
    if (queue->pending_words) pthread_cond_signal(&queue->wake);
  }
  return 0;
}

static void tc_queue_init(tc_queue *queue) {
  pthread_mutex_init(&queue->lock, 0);
  pthread_cond_init(&queue->wake, 0);
  queue->pending = 0;
  queue->pending_words = queue->pending_capacity = 0;
  queue->busy = queue->thread_started = 0;
}

/* a new queue whose device-side waits give up after `wait_timeout_ns` (0 when no more queues can be made) */
void *tinycore_queue_create(long long wait_timeout_ns) {
  pthread_mutex_lock(&tc_launch);
  tc_queue *queue = tc_queue_count < TC_MAX_QUEUES ? (tc_queue *)calloc(1, sizeof(tc_queue)) : 0;
  if (queue) {
    tc_queue_init(queue);
    queue->wait_timeout_ns = wait_timeout_ns;
    tc_queues[tc_queue_count++] = queue;
  }
  pthread_mutex_unlock(&tc_launch);
  return queue;
}

/* run `count` words of commands after everything submitted before: on the calling thread while nothing is
   pending and no wait blocks, the rest on the queue's thread. Returns 0, -1 for a broken queue, -2 when the
   queue's thread cannot start. */
int tinycore_queue_submit(tc_queue *queue, const long long *commands, long long count) {
  long long start = 0;
  int status = 0;
  pthread_mutex_lock(&queue->lock);
  queue->submissions++;
  if (queue->broken) { pthread_mutex_unlock(&queue->lock); return -1; }
  if (!queue->busy && queue->pending_words == 0) {
    queue->busy = 1;
    pthread_mutex_unlock(&queue->lock);
    start = tc_run(queue, commands, count, 0);
    pthread_mutex_lock(&queue->lock);
    queue->busy = 0;
  }
  if (start < count) {
    long long needed = queue->pending_words + count - start;
    if (needed > queue->pending_capacity) {
      long long capacity = needed * 2;
      long long *grown = (long long *)realloc(queue->pending, (size_t)capacity * sizeof(long long));
      if (!grown) { pthread_mutex_unlock(&queue->lock); return -2; }
      queue->pending = grown;
      queue->pending_capacity = capacity;
    }
    memcpy(queue->pending + queue->pending_words, commands + start, (size_t)(count - start) * sizeof(long long));
    queue->pending_words = needed;
    if (!queue->thread_started) {
      pthread_t thread;
      pthread_attr_t attributes;
      pthread_attr_init(&attributes);
      pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
      if (pthread_create(&thread, &attributes, tc_queue_thread, queue) == 0) queue->thread_started = 1;
      else status = -2;
      pthread_attr_destroy(&attributes);
    }
  }
  if (queue->pending_words) pthread_cond_signal(&queue->wake);
  pthread_mutex_unlock(&queue->lock);
  return status;
}

/* submissions so far, and whether a device-side wait timed out */
long long tinycore_queue_submissions(tc_queue *queue) { return queue->submissions; }
int tinycore_queue_broken(tc_queue *queue) { return queue->broken; }

/* accept submissions again after a timeout */
void tinycore_queue_reset(tc_queue *queue) {
  pthread_mutex_lock(&queue->lock);
  queue->broken = 0;
  pthread_mutex_unlock(&queue->lock);
}

/* after fork(): the queues' threads are gone, their pending commands dropped */
static void tc_queues_after_fork(void) {
  for (int index = 0; index < tc_queue_count; index++) tc_queue_init(tc_queues[index]);
}
