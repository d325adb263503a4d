"""tensorforge's OpenMP runtime, linked into every library built with ``-fopenmp`` by GCC on x86-64.

Generated kernels use OpenMP pragmas; GCC turns them into calls of libgomp's ABI
(``GOMP_parallel``, ``GOMP_barrier``, the dynamic-loop calls, ``omp_get_thread_num`` ...).
libgomp binds each OpenMP thread id to one OS thread, and every id must pass every barrier, so a
parallel region lasts as long as its slowest OS thread.  On a machine whose cores are taken away
for milliseconds (a VM whose vCPUs the host deschedules, another process on the core, a worker
still asleep after the model sat idle), every kernel then waits for a thread that is not running.
Measured here (2-core VM): an empty 2-thread libgomp region after 50 ms of idle cost 5.7 ms.
With a busy loop pinned to one of the two cores, whole models in one process, interleaved, went
from libgomp to this runtime: ResNet-18 60.3 -> 44.2 ms and 66.0 -> 39.9 ms (the loop on either
core), EfficientNet-B0 21.3 -> 19.2 ms, MobileNetV2 14.1 -> 14.1 and 15.2 -> 14.2 ms.  On the
quiet machine the two are level (ratios 0.98-1.03 over the same three models).

This runtime implements the same ABI so that a region never waits for a thread that has not
started: ids are claimed by whichever OS thread is free, the caller first; an id waiting at a
barrier for an unclaimed id runs it itself as a coroutine on a stack of its own (the only place
ids switch stacks).  A late worker finds nothing left.  The semantics OpenMP promises hold
(distinct ids, ``omp_get_num_threads`` fixed per team, barriers, dynamic loops, critical
sections); a region started while another runs gets a team of one, which OpenMP allows.

``TENSORFORGE_OPENMP=libgomp`` builds with GNU's runtime instead (part of the cache key through
the source).  ``TENSORFORGE_SPIN_US`` (default 200) is how long an idle worker spins before it
sleeps; a worker asleep for 2 s ends, since a process may load many models, each library with
its own pool.  Idle workers spin while a region runs and that long after it ends, so a worker
that came too late for one region is awake for the next.  A worker that claims ids on the caller's
CPU (where the scheduler often wakes it) moves itself off that CPU for the region.
"""
from __future__ import annotations

import os
import platform

SOURCE = r"""/* tensorforge's OpenMP runtime: the part of libgomp's ABI that generated kernels call, where an
   OpenMP thread id is claimed by whichever OS thread is free (the caller first), so a region never
   waits for a thread the system has not run.  Why and how: tensorforge/codegen/c/omp_runtime.py.
   Hidden symbols: the library binds to these, never to a libgomp loaded elsewhere in the process. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>

#define TFO_API __attribute__((visibility("hidden")))
#define TFO_MAX 64                    /* team members at most */
#define TFO_STACK (8u << 20)          /* a coroutine's stack: reserved, touched as used */
#define TFO_IDLE_S 2                  /* seconds a worker sleeps before it ends */

/* ---- switching stacks (x86-64 System V: callee-saved registers, MXCSR, x87 control word) ---- */
__asm__(".text\n"
        ".p2align 4\n"
        ".hidden tfo_switch\n"
        ".type tfo_switch,@function\n"
        "tfo_switch:\n"                 /* rdi: where to save this stack's pointer, rsi: the one to load */
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size tfo_switch, .-tfo_switch\n");
void tfo_switch(void **save, void *load);

static inline void tfo_pause(void) { __builtin_ia32_pause(); }

static long tfo_futex(atomic_uint *addr, int op, unsigned val, const struct timespec *timeout)
{
  return syscall(SYS_futex, (unsigned *)addr, op | FUTEX_PRIVATE_FLAG, val, timeout, NULL, 0);
}

/* One step of waiting for another thread: pause, and after a while give the CPU away. */
static inline void tfo_idle_step(long spins)
{
  if (spins > 4096) sched_yield();
  else tfo_pause();
}

static double tfo_now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- teams ---------------------------------------------------------------------------------- */
typedef struct tfo_ws {               /* one dynamic loop of a region, shared by its ids */
  atomic_long next;                   /* first unclaimed iteration (counted from 0) */
  long count, start, incr, chunk;
  atomic_int ready;                   /* 0: nobody set it up yet, 1: being set up, 2: ready */
} tfo_ws;

typedef struct tfo_region tfo_region;
typedef struct tfo_host tfo_host;

enum { TFO_RUNNING, TFO_WAITING, TFO_DONE };

typedef struct tfo_member {           /* one OpenMP thread id of a team */
  tfo_region *r;
  tfo_host *host;                     /* the OS thread running it */
  int id, state;
  unsigned wait_gen;                  /* the barrier generation it waits to see pass */
  long ws_ord;                        /* worksharing loops it has entered */
  tfo_ws *ws;                         /* the one it is in */
  void *sp;                           /* saved stack pointer while switched out */
  void *stack;                        /* its coroutine stack, NULL on the host's own */
} tfo_member;

struct tfo_region {
  void (*fn)(void *);
  void *data;
  int nth, icv, level;                /* team size; the nthreads setting its ids report; nesting */
  bool preset;                        /* a combined parallel loop: every id starts in loop 0 */
  bool active;                        /* it or a region around it has more than one id */
  atomic_uint arrived, gen;           /* the barrier */
  atomic_int done;                    /* ids finished (added by each host when it leaves) */
  pthread_mutex_t ws_lock;
  tfo_ws **ws;
  long ws_count, ws_cap;
  tfo_member members[TFO_MAX];
};

struct tfo_host {                     /* an OS thread's part in one region */
  tfo_region *r;
  tfo_member *native;                 /* the id on the OS thread's own stack, NULL between ids */
  void *home_sp;                      /* the host loop's stack pointer while switched out */
  tfo_member *coroutines[TFO_MAX];
  int ncoroutines, finished;
};

static __thread tfo_member *tfo_self;  /* the id this OS thread is running */
static __thread int tfo_icv;           /* omp_set_num_threads of this thread; 0: default */
static __thread void *tfo_stacks[TFO_MAX];   /* this OS thread's free coroutine stacks */
static __thread int tfo_nstacks;

/* The pool: one region slot, workers that claim its ids.  claim packs the region's sequence
   number (high 32 bits), team size (bits 16-31) and next unclaimed id (low 16 bits), so a worker
   waking late cannot take an id of a region that has ended. */
static struct {
  pthread_mutex_t busy;
  atomic_uint gen;                    /* bumped when a region is published (futex word) */
  atomic_int sleepers;
  atomic_int caller_cpu;              /* the CPU the current region's caller started it on */
  atomic_ullong claim;
  int workers;
  bool taken[TFO_MAX];                /* worker slots in use (changed only under busy) */
  cpu_set_t allowed;                  /* the CPUs the process may use, read once */
  tfo_region region;
  double spin_s;
  atomic_int running;                 /* a pool region is under way */
  _Atomic double last_end;            /* when the last pool region ended (tfo_now) */
  int default_threads;
} tfo_pool = { .busy = PTHREAD_MUTEX_INITIALIZER };
static pthread_once_t tfo_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t tfo_critical_lock = PTHREAD_MUTEX_INITIALIZER;


static int tfo_cpus(void)
{
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static void tfo_after_fork(void)      /* the child has no workers and no region running */
{
  pthread_mutex_init(&tfo_pool.busy, NULL);
  pthread_mutex_init(&tfo_pool.region.ws_lock, NULL);
  pthread_mutex_init(&tfo_critical_lock, NULL);
  tfo_pool.workers = 0;
  memset(tfo_pool.taken, 0, sizeof tfo_pool.taken);
  atomic_store(&tfo_pool.sleepers, 0);
  atomic_store(&tfo_pool.claim, 0);
  atomic_store(&tfo_pool.running, 0);
}

static void tfo_init(void)
{
  const char *env = getenv("OMP_NUM_THREADS");
  int n = env ? atoi(env) : 0;
  tfo_pool.default_threads = n > 0 ? n : tfo_cpus();
  const char *spin = getenv("TENSORFORGE_SPIN_US");
  tfo_pool.spin_s = (spin ? atof(spin) : 200.0) * 1e-6;
  pthread_mutex_init(&tfo_pool.region.ws_lock, NULL);
  if (sched_getaffinity(0, sizeof tfo_pool.allowed, &tfo_pool.allowed) != 0) CPU_ZERO(&tfo_pool.allowed);
  pthread_atfork(NULL, NULL, tfo_after_fork);
}

/* ---- claiming ids ---------------------------------------------------------------------------- */
static int tfo_claim(unsigned seq)
{
  unsigned long long v = atomic_load(&tfo_pool.claim);
  for (;;) {
    if ((unsigned)(v >> 32) != seq) return -1;
    const int next = (int)(v & 0xffff), nth = (int)((v >> 16) & 0xffff);
    if (next >= nth) return -1;
    if (atomic_compare_exchange_weak(&tfo_pool.claim, &v, v + 1)) return next;
  }
}

static tfo_ws *tfo_ws_at(tfo_region *r, long ord);
static void tfo_ws_setup(tfo_ws *w, long start, long end, long incr, long chunk);

/* ---- one OS thread's ids ---------------------------------------------------------------------- */
static bool tfo_runnable(const tfo_member *m)
{
  return m->state == TFO_WAITING && atomic_load(&m->r->gen) != m->wait_gen;
}

static void tfo_member_init(tfo_member *m, tfo_region *r, tfo_host *h, int id)
{
  m->r = r;
  m->host = h;
  m->id = id;
  m->state = TFO_RUNNING;
  m->ws_ord = r->preset ? 1 : 0;
  m->ws = r->preset ? r->ws[0] : NULL;
  m->stack = NULL;
}

/* Switches from the running context (its stack pointer saved in *save) to `to`, or to the host
   loop for NULL. */
static void tfo_go(tfo_host *h, void **save, tfo_member *to)
{
  tfo_self = to;
  tfo_switch(save, to ? to->sp : h->home_sp);
}

static tfo_member *tfo_runnable_coroutine(tfo_host *h, const tfo_member *besides)
{
  for (int i = 0; i < h->ncoroutines; i++)
    if (h->coroutines[i] != besides && tfo_runnable(h->coroutines[i])) return h->coroutines[i];
  return NULL;
}

static void *tfo_new_stack(void)
{
  if (tfo_nstacks > 0) return tfo_stacks[--tfo_nstacks];
  void *p = mmap(NULL, TFO_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void tfo_entry(void);

/* Starts id `id` on a stack of its own and switches to it from `save`. */
static void tfo_spawn(tfo_host *h, int id, void **save)
{
  void *stack = tfo_new_stack();
  if (!stack) abort();
  tfo_member *m = &h->r->members[id];
  tfo_member_init(m, h->r, h, id);
  m->stack = stack;
  /* what tfo_switch pops: MXCSR and x87 control word, six registers, tfo_entry as return address;
     tfo_entry then starts with the stack pointer at 8 mod 16, as after a call */
  uintptr_t top = ((uintptr_t)stack + TFO_STACK) & ~(uintptr_t)15;
  void **sp = (void **)(top - 8 * 8 - 8);
  unsigned ctl[2];
  __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(ctl[0]), "=m"(ctl[1]));
  memcpy(sp, ctl, sizeof ctl);
  for (int i = 1; i <= 6; i++) sp[i] = NULL;
  sp[7] = (void *)tfo_entry;
  m->sp = sp;
  h->coroutines[h->ncoroutines++] = m;
  tfo_go(h, save, m);
}

static void tfo_entry(void)
{
  tfo_member *m = tfo_self;
  tfo_host *h = m->host;
  m->r->fn(m->r->data);
  m->state = TFO_DONE;
  h->finished++;
  for (;;) {                 /* never resumed; the host loop keeps the stack for later */
    tfo_member *to = tfo_runnable_coroutine(h, m);
    tfo_go(h, &m->sp, to ? to : h->native);
  }
}

/* An id waits at a barrier: it claims an id nobody has and runs it, or lets another id of its
   host whose barrier opened go on, or (a coroutine beside the host loop) hands back to the loop. */
static void tfo_barrier(tfo_member *m)
{
  tfo_region *r = m->r;
  if (r->nth == 1) return;
  const unsigned gen = atomic_load(&r->gen);
  if (atomic_fetch_add(&r->arrived, 1) + 1 == (unsigned)r->nth) {
    atomic_store(&r->arrived, 0);
    atomic_fetch_add(&r->gen, 1);
    return;
  }
  tfo_host *h = m->host;
  m->wait_gen = gen;
  m->state = TFO_WAITING;
  for (long spins = 0; atomic_load(&r->gen) == gen; spins++) {
    const int id = r == &tfo_pool.region ? tfo_claim(atomic_load(&tfo_pool.gen)) : -1;
    tfo_member *to;
    if (id >= 0) tfo_spawn(h, id, &m->sp);
    else if ((to = tfo_runnable_coroutine(h, m)) != NULL) tfo_go(h, &m->sp, to);
    else if (h->native && h->native != m && tfo_runnable(h->native)) tfo_go(h, &m->sp, h->native);
    else if (!h->native) tfo_go(h, &m->sp, NULL);
    else tfo_idle_step(spins);
  }
  m->state = TFO_RUNNING;
}

static void tfo_run_native(tfo_host *h, int id)
{
  tfo_member *m = &h->r->members[id];
  tfo_member_init(m, h->r, h, id);
  h->native = m;
  tfo_self = m;
  h->r->fn(h->r->data);
  m->state = TFO_DONE;
  h->finished++;
  h->native = NULL;
  tfo_self = NULL;
}

/* One OS thread's part in the pool's region `seq`: id `first`, every id it can claim, then its
   coroutines until they end.  Its finished ids go into r->done last: after that it never reads
   the region again, and the caller may start the next one. */
static void tfo_run_host(unsigned seq, int first)
{
  tfo_region *r = &tfo_pool.region;
  tfo_host h = { .r = r };
  tfo_run_native(&h, first);
  for (long spins = 0;; spins++) {
    const int id = tfo_claim(seq);
    if (id >= 0) { tfo_run_native(&h, id); continue; }
    int live = 0;
    for (int i = 0; i < h.ncoroutines; i++) live += h.coroutines[i]->state != TFO_DONE;
    if (!live) break;
    tfo_member *to = tfo_runnable_coroutine(&h, NULL);
    if (to) { tfo_go(&h, &h.home_sp, to); spins = 0; }
    else tfo_idle_step(spins);
  }
  tfo_self = NULL;
  for (int i = 0; i < h.ncoroutines; i++) {
    if (tfo_nstacks < TFO_MAX) tfo_stacks[tfo_nstacks++] = h.coroutines[i]->stack;
    else munmap(h.coroutines[i]->stack, TFO_STACK);
  }
  atomic_fetch_add(&r->done, h.finished);
}

/* ---- workers ------------------------------------------------------------------------------- */
/* A worker about to run ids on the caller's CPU (where the scheduler often wakes it, and where it
   stays while both spin, another CPU idle) moves itself off that CPU for the region; after it, it
   may run anywhere again (pinned, it would share its CPU with the caller whenever the scheduler
   moves the caller there).  Returns whether it moved. */
static bool tfo_move_off(int cpu)
{
  if (cpu < 0 || sched_getcpu() != cpu || !CPU_ISSET(cpu, &tfo_pool.allowed) || CPU_COUNT(&tfo_pool.allowed) < 2)
    return false;
  cpu_set_t mask = tfo_pool.allowed;
  CPU_CLR(cpu, &mask);
  return sched_setaffinity(0, sizeof mask, &mask) == 0;
}

static void *tfo_worker(void *arg)
{
  const int index = (int)((uintptr_t)arg >> 32);
  unsigned seen = (unsigned)(uintptr_t)arg;
  for (;;) {
    unsigned g = atomic_load(&tfo_pool.gen);
    if (g == seen) {
      /* spin while a region runs and spin_s past its end: a worker that came too late to
         claim an id must still be spinning when the next region starts, or it sleeps through
         every region (woken late each time, it finds every id claimed by the caller) */
      const double t0 = tfo_now();
      for (long i = 0; (g = atomic_load(&tfo_pool.gen)) == seen; i++) {
        tfo_pause();
        if ((i & 255) != 255 || atomic_load(&tfo_pool.running)) continue;
        const double end = atomic_load(&tfo_pool.last_end), now = tfo_now();
        if (now - (end > t0 ? end : t0) > tfo_pool.spin_s) break;
      }
      if (g == seen) {
        /* asleep; after TFO_IDLE_S without a region the thread ends (a process may load many
           models, each with its own pool), unless a region is being started right now */
        const struct timespec idle = { TFO_IDLE_S, 0 };
        atomic_fetch_add(&tfo_pool.sleepers, 1);
        while ((g = atomic_load(&tfo_pool.gen)) == seen) {
          if (tfo_futex(&tfo_pool.gen, FUTEX_WAIT, seen, &idle) == 0 || errno != ETIMEDOUT) continue;
          if (pthread_mutex_trylock(&tfo_pool.busy) != 0) continue;
          const bool quit = atomic_load(&tfo_pool.gen) == seen;
          if (quit) {
            tfo_pool.workers--;
            tfo_pool.taken[index] = false;
          }
          pthread_mutex_unlock(&tfo_pool.busy);
          if (quit) {
            atomic_fetch_sub(&tfo_pool.sleepers, 1);
            return NULL;
          }
        }
        atomic_fetch_sub(&tfo_pool.sleepers, 1);
      }
    }
    seen = g;
    const int id = tfo_claim(g);
    if (id < 0) continue;
    const bool moved = tfo_move_off(atomic_load(&tfo_pool.caller_cpu));
    tfo_run_host(g, id);
    if (moved) sched_setaffinity(0, sizeof tfo_pool.allowed, &tfo_pool.allowed);
  }
  return NULL;
}

static void tfo_start_workers(int n)
{
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, TFO_STACK);
  while (tfo_pool.workers < n) {
    pthread_t t;
    int slot = 0;
    while (tfo_pool.taken[slot]) slot++;
    const uintptr_t arg = ((uintptr_t)slot << 32) | atomic_load(&tfo_pool.gen);
    if (pthread_create(&t, &attr, tfo_worker, (void *)arg) != 0) break;
    tfo_pool.taken[slot] = true;
    pthread_detach(t);
    tfo_pool.workers++;
  }
  pthread_attr_destroy(&attr);
}

/* ---- regions ------------------------------------------------------------------------------- */
static int tfo_icv_here(void)
{
  pthread_once(&tfo_once, tfo_init);
  if (tfo_self) return tfo_self->r->icv;
  return tfo_icv > 0 ? tfo_icv : tfo_pool.default_threads;
}

/* Sets up region r for fn on nth ids inside `outer` (NULL: none); loop: a combined parallel
   loop's bounds (start, end, incr, chunk), set up before any id runs. */
static void tfo_region_open(tfo_region *r, void (*fn)(void *), void *data, int nth, int icv,
                            const tfo_member *outer, const long *loop)
{
  r->fn = fn;
  r->data = data;
  r->nth = nth;
  r->icv = icv;
  r->level = outer ? outer->r->level + 1 : 1;
  r->active = nth > 1 || (outer && outer->r->active);
  atomic_store(&r->arrived, 0);
  atomic_store(&r->done, 0);
  r->ws_count = 0;
  r->preset = loop != NULL;
  if (loop) tfo_ws_setup(tfo_ws_at(r, 0), loop[0], loop[1], loop[2], loop[3]);
}

/* A team of one on the calling thread (nested regions, and regions while the pool is busy).
   Small kernels run here on every call (their `if` clause says one thread), so the region is a
   per-thread spare that is reused, not allocated and cleared each time. */
static __thread tfo_region *tfo_spare;

static void tfo_serial(void (*fn)(void *), void *data, int icv, const long *loop)
{
  tfo_member *outer = tfo_self;
  tfo_region *r = tfo_spare;
  if (r) tfo_spare = NULL;
  else if (!(r = (tfo_region *)calloc(1, sizeof(tfo_region)))) abort();
  else pthread_mutex_init(&r->ws_lock, NULL);
  tfo_region_open(r, fn, data, 1, icv, outer, loop);
  tfo_host h = { .r = r };
  tfo_member_init(&r->members[0], r, &h, 0);
  h.native = &r->members[0];
  tfo_self = &r->members[0];
  fn(data);
  tfo_self = outer;
  if (!tfo_spare) {
    tfo_spare = r;
    return;
  }
  for (long i = 0; i < r->ws_cap; i++) free(r->ws[i]);
  free(r->ws);
  pthread_mutex_destroy(&r->ws_lock);
  free(r);
}

/* Region of fn on num_threads ids (0: the setting); loop as for tfo_region_open. */
static void tfo_parallel(void (*fn)(void *), void *data, unsigned num_threads, const long *loop)
{
  const int icv = tfo_icv_here();
  int n = num_threads ? (int)num_threads : icv;
  if (n > TFO_MAX) n = TFO_MAX;
  if (n <= 1 || tfo_self || pthread_mutex_trylock(&tfo_pool.busy) != 0) {
    tfo_serial(fn, data, icv, loop);
    return;
  }
  tfo_region *r = &tfo_pool.region;
  tfo_region_open(r, fn, data, n, icv, NULL, loop);
  if (tfo_pool.workers < n - 1) tfo_start_workers(n - 1);
  const unsigned seq = atomic_load(&tfo_pool.gen) + 1;
  atomic_store(&tfo_pool.running, 1);
  atomic_store(&tfo_pool.caller_cpu, sched_getcpu());
  atomic_store(&tfo_pool.claim, ((unsigned long long)seq << 32) | ((unsigned long long)n << 16) | 1u);
  atomic_store(&tfo_pool.gen, seq);
  if (atomic_load(&tfo_pool.sleepers) > 0) tfo_futex(&tfo_pool.gen, FUTEX_WAKE, INT_MAX, NULL);
  tfo_run_host(seq, 0);
  for (long spins = 0; atomic_load(&r->done) < n; spins++) tfo_idle_step(spins);
  atomic_store(&tfo_pool.last_end, tfo_now());
  atomic_store(&tfo_pool.running, 0);
  pthread_mutex_unlock(&tfo_pool.busy);
}

TFO_API void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags)
{
  (void)flags;
  tfo_parallel(fn, data, num_threads, NULL);
}

TFO_API void GOMP_parallel_loop_nonmonotonic_dynamic(void (*fn)(void *), void *data, unsigned num_threads,
                                                     long start, long end, long incr, long chunk, unsigned flags)
{
  (void)flags;
  const long loop[4] = { start, end, incr, chunk };
  tfo_parallel(fn, data, num_threads, loop);
}

TFO_API void GOMP_parallel_loop_dynamic(void (*fn)(void *), void *data, unsigned num_threads, long start,
                                        long end, long incr, long chunk, unsigned flags)
{
  GOMP_parallel_loop_nonmonotonic_dynamic(fn, data, num_threads, start, end, incr, chunk, flags);
}

TFO_API void GOMP_barrier(void)
{
  if (tfo_self) tfo_barrier(tfo_self);
}

/* ---- dynamic loops -------------------------------------------------------------------------- */
static tfo_ws *tfo_ws_at(tfo_region *r, long ord)
{
  pthread_mutex_lock(&r->ws_lock);
  while (r->ws_count <= ord) {
    if (r->ws_count == r->ws_cap) {
      const long cap = r->ws_cap ? 2 * r->ws_cap : 16;
      tfo_ws **grown = (tfo_ws **)realloc(r->ws, (size_t)cap * sizeof *grown);
      if (!grown) abort();
      for (long i = r->ws_cap; i < cap; i++) grown[i] = NULL;
      r->ws = grown;
      r->ws_cap = cap;
    }
    if (!r->ws[r->ws_count] && !(r->ws[r->ws_count] = (tfo_ws *)malloc(sizeof(tfo_ws)))) abort();
    atomic_store(&r->ws[r->ws_count]->ready, 0);
    r->ws_count++;
  }
  tfo_ws *w = r->ws[ord];
  pthread_mutex_unlock(&r->ws_lock);
  return w;
}

static void tfo_ws_setup(tfo_ws *w, long start, long end, long incr, long chunk)
{
  long count = 0;
  if (incr > 0 && end > start) count = (end - start + incr - 1) / incr;
  else if (incr < 0 && end < start) count = (start - end - incr - 1) / (-incr);
  w->count = count;
  w->start = start;
  w->incr = incr;
  w->chunk = chunk > 0 ? chunk : 1;
  atomic_store(&w->next, 0);
  atomic_store(&w->ready, 2);
}

static bool tfo_next(tfo_ws *w, long *istart, long *iend)
{
  const long i = atomic_fetch_add(&w->next, w->chunk);
  if (i >= w->count) return false;
  const long j = i + w->chunk < w->count ? i + w->chunk : w->count;
  *istart = w->start + i * w->incr;
  *iend = w->start + j * w->incr;
  return true;
}

TFO_API bool GOMP_loop_nonmonotonic_dynamic_start(long start, long end, long incr, long chunk, long *istart,
                                                  long *iend)
{
  tfo_member *m = tfo_self;
  if (!m) {                  /* an orphaned loop outside any region: the caller takes it whole */
    if (incr > 0 ? start >= end : start <= end) return false;
    *istart = start;
    *iend = end;
    return true;
  }
  tfo_ws *w = tfo_ws_at(m->r, m->ws_ord++);
  int expected = 0;
  if (atomic_compare_exchange_strong(&w->ready, &expected, 1)) tfo_ws_setup(w, start, end, incr, chunk);
  else while (atomic_load(&w->ready) != 2) tfo_pause();
  m->ws = w;
  return tfo_next(w, istart, iend);
}

TFO_API bool GOMP_loop_nonmonotonic_dynamic_next(long *istart, long *iend)
{
  tfo_member *m = tfo_self;
  return m && m->ws ? tfo_next(m->ws, istart, iend) : false;
}

TFO_API bool GOMP_loop_dynamic_start(long start, long end, long incr, long chunk, long *istart, long *iend)
{
  return GOMP_loop_nonmonotonic_dynamic_start(start, end, incr, chunk, istart, iend);
}

TFO_API bool GOMP_loop_dynamic_next(long *istart, long *iend)
{
  return GOMP_loop_nonmonotonic_dynamic_next(istart, iend);
}

TFO_API void GOMP_loop_end(void)
{
  if (tfo_self) {
    tfo_self->ws = NULL;
    tfo_barrier(tfo_self);
  }
}

TFO_API void GOMP_loop_end_nowait(void)
{
  if (tfo_self) tfo_self->ws = NULL;
}

TFO_API void GOMP_critical_start(void) { pthread_mutex_lock(&tfo_critical_lock); }
TFO_API void GOMP_critical_end(void) { pthread_mutex_unlock(&tfo_critical_lock); }

/* What GCC brackets the combining of a user-declared reduction with (the kernels' NaN-propagating
   max/min over threads): no barrier inside, so no id switches stacks while holding it. */
static pthread_mutex_t tfo_atomic_lock = PTHREAD_MUTEX_INITIALIZER;
TFO_API void GOMP_atomic_start(void) { pthread_mutex_lock(&tfo_atomic_lock); }
TFO_API void GOMP_atomic_end(void) { pthread_mutex_unlock(&tfo_atomic_lock); }

/* ---- the omp_* calls ------------------------------------------------------------------------- */
TFO_API int omp_get_thread_num(void) { return tfo_self ? tfo_self->id : 0; }
TFO_API int omp_get_num_threads(void) { return tfo_self ? tfo_self->r->nth : 1; }
TFO_API int omp_get_max_threads(void) { return tfo_icv_here(); }
TFO_API int omp_in_parallel(void) { return tfo_self && tfo_self->r->active; }
TFO_API int omp_get_level(void) { return tfo_self ? tfo_self->r->level : 0; }
TFO_API int omp_get_num_procs(void) { return tfo_cpus(); }
TFO_API double omp_get_wtime(void) { return tfo_now(); }

/* omp_get_max_threads of the calling thread, visible outside the library (tests read it). */
__attribute__((visibility("default"))) int tensorforge_omp_max_threads(void) { return omp_get_max_threads(); }

TFO_API void omp_set_num_threads(int n)
{
  pthread_once(&tfo_once, tfo_init);
  tfo_icv = n > 0 ? n : 1;
}
"""


def wanted(source: str, arch: str, compiler: str) -> bool:
    """Whether a library built from ``source`` takes this runtime: it uses OpenMP, the target is
    x86-64 (the stack switch is written for it), the compiler is GCC (clang's ``-fopenmp`` calls
    another ABI) and ``TENSORFORGE_OPENMP`` does not ask for libgomp."""
    if os.environ.get("TENSORFORGE_OPENMP", "").strip().lower() in ("libgomp", "gomp", "gnu"):
        return False
    return ("omp" in source and arch in ("x86_64", "AMD64") and "clang" not in compiler.lower()
            and platform.system() == "Linux")


MARK = "tfo_switch"      # a name only this runtime defines: a library holding it links without libgomp


__all__ = ["MARK", "SOURCE", "wanted"]
