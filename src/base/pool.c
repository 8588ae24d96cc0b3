/* pool.c -- fixed thread pool: parts of a job go to whichever thread is free; idle threads spin, then sleep. */
#include "base/base.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* How a job is shared. The caller publishes `ticket`, which packs the job's generation (high 32 bits), its
 * part count nth (bits 16..31) and the next unclaimed part (low 16 bits), then runs part 0 itself. Parts
 * 1..nth-1 are claimed with one compare-and-swap by any thread, the caller included. So a part whose
 * worker is asleep or descheduled (another process has the core) is run by a thread that is on a core: a
 * job never waits for a thread that has not started, and an oversubscribed machine degrades towards
 * one-thread speed instead of losing a scheduler time slice per job. The split is fixed by nth, so
 * results do not depend on which thread runs which part.
 *
 * Waiting. A thread with nothing to do spins on an atomic with a pause hint (on a quiet machine decode
 * jobs come back to back within microseconds), then sleeps on a condition variable. Sleepers announce
 * themselves in atomic counters, so on a quiet machine nobody touches the mutex. Each thread adapts its
 * spin budget: a spin that finds its event doubles it (up to a maximum), a spin during which the thread
 * lost its core (the clock jumped between two looks: the machine is oversubscribed) halves it and goes to
 * sleep at once; so does a caller's spin that times out. Spinning on a busy machine only burns the time
 * slice the late thread needs, while a sleeper frees its core, and the scheduler favours it when it is
 * woken. The maxima are long (2 ms) because waking a sleeping thread can itself take a millisecond on a
 * virtual machine.
 *
 * Going solo. When even so the workers cost more than they give (see judge()), the caller runs whole jobs
 * alone for a while -- the same parts in order, so the same results -- and then tries the workers again.
 * On a quiet machine this never triggers; with another busy process on a 2-core machine it keeps 2-thread
 * decode at about 1-thread speed instead of well below it. */

enum {
    TICKET_PART_BITS = 16,
    WORKER_SPIN_MAX_NS = 2000000, /* idle worker: longest spin for the next job before sleeping */
    CALLER_SPIN_MAX_NS = 2000000, /* caller waiting for parts still running: longest spin before sleeping */
    SPIN_MIN_NS = 2000,           /* floor of the adaptive budgets */
    PREEMPTED_NS = 50000,         /* a gap this long between two clock reads means we lost the core */
    SPIN_CHECK = 32,              /* pause hints between clock reads (about 1 us on x86) */
    SOLO_MIN_NS = 50000000,       /* when workers don't pay off: first period without them (judge) */
    SOLO_MAX_NS = 400000000,
    JUDGE_MIN_JOBS = 8,         /* judge() sees this many jobs... */
    JUDGE_MIN_NS = 10000000,    /* ...over this long before it may send the caller solo */
    JUDGE_TAU_NS = 50000000,    /* judge()'s sums fade over about this long (like the first solo period) */
    JUDGE_MIN_JOB_NS = 20000,   /* shorter jobs are not judged */
    WARM_NS = 20000000,         /* time sleeping workers get to wake up before judge() counts jobs without them */
    WAIT_RECHECK_NS = 20000000, /* a sleeping thread re-checks its condition this often (lost wake-ups) */
};

#define JUDGE_MARGIN 1.1      /* judge(): workers must cost 10% more than they give before the caller goes solo */
#define SOLO_DECAY   0.984375 /* the wall/CPU sums of solo jobs: each job's weight decays by 1/64 per later job */
#define PAD(name)    char name[64]

struct pb_pool {
    int n;
    pthread_t *threads;
    /* current job: written by the caller before it publishes the ticket; read after claiming a part */
    pb_pool_fn fn;
    void *ctx;
    bool measure; /* workers time their parts into part_cpu */
    /* the caller's adaptive state (only the calling thread touches it) */
    uint64_t spin_ns;                 /* spin budget while waiting for parts still running */
    uint64_t solo_until, solo_ns;     /* run jobs without the workers until then; length of the next such period */
    double s_par, s_solo;             /* decayed sums of job times in parallel and estimated alone (judge) */
    double solo_wall, solo_cpu;       /* decayed sums of wall and CPU time of jobs run alone */
    uint64_t warm_until;              /* judge() ignores jobs no worker took part in until then */
    uint64_t judge_since, judge_last; /* judge(): first and last job it counted since its sums were reset */
    int judged;
    uint64_t rng; /* picks the jobs judge() measures */
    PAD(pad0);
    atomic_uint_fast64_t ticket; /* generation << 32 | nth << 16 | next part */
    PAD(pad1);
    atomic_int remaining;          /* parts 1..nth-1 of the current job not finished yet */
    atomic_int caller_asleep;      /* the caller sleeps on cv_done */
    atomic_uint_fast64_t part_cpu; /* CPU time of the workers' parts of a measured job */
    PAD(pad2);
    atomic_int sleepers; /* workers sleeping on cv_work */
    atomic_bool stop;
    atomic_int limit; /* threads pb_pool_run uses (thermal governor); 0 = all */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    pthread_cond_t cv_done;
};

static inline uint32_t tk_gen(uint64_t t) { return (uint32_t)(t >> 32); }
static inline int tk_nth(uint64_t t) { return (int)((t >> TICKET_PART_BITS) & 0xffff); }
static inline int tk_next(uint64_t t) { return (int)(t & 0xffff); }

/* A hint to the core that this is a spin-wait loop (frees the sibling hyper-thread, saves power). */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || (defined(__arm__) && defined(__ARM_ARCH) && __ARM_ARCH >= 7)
    __asm__ __volatile__("yield" ::: "memory");
#else
    sched_yield();
#endif
}

/* CPU time of the calling thread: unlike the wall clock it does not run while the thread has lost its core
 * (or shares it), so it measures the work itself. */
static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleeping. Each sleep is one side of a store-then-load pair (Dekker): the sleeper stores "I sleep" and
 * loads the condition, the waker stores the condition and loads "someone sleeps"; at least one of them
 * must see the other's store. seq_cst accesses alone promise that in C11, but every such store here is a
 * read-modify-write (fetch_add / fetch_sub / exchange), never a plain store: qemu-user running an ARM64
 * binary on an x86 host does not keep a store-release (stlr) before a later load-acquire (ldar) -- a
 * litmus test saw both loads miss both stores in ~0.1-0.2% of tries -- and a lost wake-up of the caller
 * hung test_matmul_group under qemu in CI for over an hour; read-modify-writes become locked (fully
 * fenced) host instructions there. (Not a fence: gcc refuses atomic_thread_fence under ThreadSanitizer.)
 * And no sleep is unbounded: a waiter re-checks its condition every WAIT_RECHECK_NS, so even a missed
 * wake-up costs a few milliseconds, never a hang. */
static void timed_wait(pb_pool *p, pthread_cond_t *cv) {
#if defined(__APPLE__) /* iOS / macOS: no pthread_condattr_setclock; a relative wait instead */
    struct timespec rel = {0, WAIT_RECHECK_NS};
    pthread_cond_timedwait_relative_np(cv, &p->mu, &rel);
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += WAIT_RECHECK_NS;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(cv, &p->mu, &ts);
#endif
}

/* Called by whoever finished the last outstanding part: wakes the caller if it went to sleep. The
 * pair of read-modify-writes (fetch_sub of remaining here, exchange of caller_asleep there) guarantees that either we
 * see the caller asleep or the caller sees remaining == 0 before it waits. */
static void part_done(pb_pool *p) {
    if (atomic_fetch_sub(&p->remaining, 1) == 1 && atomic_load(&p->caller_asleep)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Claims and runs parts of the job whose ticket was t until that job has none left; returns how many.
 * A worker adds the CPU time of its parts to part_cpu when the caller measures the job (for judge()). */
static int run_parts(pb_pool *p, uint64_t t, bool is_worker) {
    uint32_t gen = tk_gen(t);
    int ran = 0;
    while (tk_gen(t) == gen && tk_next(t) < tk_nth(t)) {
        if (!atomic_compare_exchange_weak_explicit(&p->ticket, &t, t + 1, memory_order_acquire, memory_order_acquire))
            continue; /* t now holds the current ticket */
        /* The claimed part is unfinished, so the caller is still inside this job and fn/ctx are its. */
        uint64_t c0 = is_worker && p->measure ? thread_cpu_ns() : 0;
        p->fn(p->ctx, tk_next(t), tk_nth(t));
        if (c0) atomic_fetch_add_explicit(&p->part_cpu, thread_cpu_ns() - c0, memory_order_relaxed);
        part_done(p); /* its release orders the part_cpu update before the caller's read */
        ran++;
        t = atomic_load_explicit(&p->ticket, memory_order_acquire);
    }
    return ran;
}

/* One bounded spin of a waiting thread: the waiter looks at its condition, then calls spin_step(), which
 * relaxes the core and reads the clock every SPIN_CHECK looks; spin_adapt() turns the way the spin ended
 * into the next budget. */
typedef enum { SPIN_DONE, SPIN_TIMEOUT, SPIN_PREEMPTED } spin_end;

typedef struct {
    uint64_t t0, last, budget;
    int looks;
} spinner;

static inline void spin_start(spinner *s, uint64_t budget) {
    s->t0 = s->last = pb_time_ns();
    s->budget = budget;
    s->looks = 0;
}

/* Called after each unsuccessful look: SPIN_DONE to keep spinning, else why to stop. */
static inline spin_end spin_step(spinner *s) {
    cpu_relax();
    if (++s->looks % SPIN_CHECK) return SPIN_DONE;
    uint64_t now = pb_time_ns();
    if (now - s->last >= PREEMPTED_NS) return SPIN_PREEMPTED;
    if (now - s->t0 >= s->budget) return SPIN_TIMEOUT;
    s->last = now;
    return SPIN_DONE;
}

/* timeout_halves: whether a spin that timed out also halves the budget (the caller's does: parts that
 * finish that late were mostly held up by a lost core; a worker's does not: gaps between jobs are normal). */
static uint64_t spin_adapt(uint64_t budget, spin_end how, uint64_t max, bool timeout_halves) {
    if (how == SPIN_DONE) return budget * 2 > max ? max : budget * 2;
    if (how == SPIN_PREEMPTED || timeout_halves) return budget / 2 < SPIN_MIN_NS ? SPIN_MIN_NS : budget / 2;
    return budget;
}

/* Waits until a job newer than generation seen is published (returns its ticket) or the pool stops. */
static uint64_t wait_work(pb_pool *p, uint32_t seen, uint64_t *budget) {
    spinner sp;
    spin_start(&sp, *budget);
    spin_end how;
    uint64_t t;
    for (;;) {
        t = atomic_load_explicit(&p->ticket, memory_order_acquire);
        if (tk_gen(t) != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) {
            *budget = spin_adapt(*budget, SPIN_DONE, WORKER_SPIN_MAX_NS, false);
            return t;
        }
        if ((how = spin_step(&sp)) != SPIN_DONE) break;
    }
    *budget = spin_adapt(*budget, how, WORKER_SPIN_MAX_NS, false);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1); /* pairs with the caller's ticket exchange + sleepers load */
    while (tk_gen(t = atomic_load(&p->ticket)) == seen && !atomic_load(&p->stop)) timed_wait(p, &p->cv_work);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    /* work came soon after all: a longer spin would have caught it without the wake-up */
    if (pb_time_ns() - sp.t0 < WORKER_SPIN_MAX_NS) *budget = spin_adapt(*budget, SPIN_DONE, WORKER_SPIN_MAX_NS, false);
    return t;
}

static void *worker(void *arg) {
    pb_pool *p = arg;
    uint32_t seen = 0; /* generation 0 is the "no job yet" ticket; the first job is generation 1 */
    uint64_t budget = WORKER_SPIN_MAX_NS;
    for (;;) {
        uint64_t t = wait_work(p, seen, &budget);
        if (atomic_load(&p->stop)) return NULL;
        run_parts(p, t, true);
        seen = tk_gen(t);
    }
}

/* The caller, after its own parts: waits for parts other threads are still running. */
static void wait_done(pb_pool *p) {
    if (atomic_load_explicit(&p->remaining, memory_order_acquire) == 0) return;
    spinner sp;
    spin_start(&sp, p->spin_ns);
    spin_end how;
    for (;;) {
        if (atomic_load_explicit(&p->remaining, memory_order_acquire) == 0) {
            p->spin_ns = spin_adapt(p->spin_ns, SPIN_DONE, CALLER_SPIN_MAX_NS, true);
            return;
        }
        if ((how = spin_step(&sp)) != SPIN_DONE) break;
    }
    p->spin_ns = spin_adapt(p->spin_ns, how, CALLER_SPIN_MAX_NS, true);
    pthread_mutex_lock(&p->mu);
    atomic_exchange(&p->caller_asleep, 1); /* an exchange, not a store: see timed_wait */
    while (atomic_load(&p->remaining) != 0) timed_wait(p, &p->cv_done);
    atomic_store(&p->caller_asleep, 0);
    pthread_mutex_unlock(&p->mu);
}

pb_status pb_pool_new(int n_threads, pb_pool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 256) return pb_error(PB_ERR_INVALID_ARG, "thread count %d is too large", n_threads);
    pb_pool *p = pb_calloc(1, sizeof *p);
    if (!p) return PB_ERR_NOMEM;
    p->n = n_threads;
    p->spin_ns = CALLER_SPIN_MAX_NS;
    p->solo_ns = SOLO_MIN_NS;
    p->warm_until = pb_time_ns() + WARM_NS;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca; /* timed waits on the monotonic clock (timed_wait) */
    pthread_condattr_init(&ca);
#if !defined(__APPLE__)
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
#endif
    pthread_cond_init(&p->cv_work, &ca);
    pthread_cond_init(&p->cv_done, &ca);
    pthread_condattr_destroy(&ca);
    if (n_threads > 1) {
        p->threads = pb_calloc((size_t)n_threads - 1, sizeof(pthread_t));
        if (!p->threads) {
            free(p);
            return PB_ERR_NOMEM;
        }
        for (int i = 1; i < n_threads; i++) {
            if (pthread_create(&p->threads[i - 1], NULL, worker, p) != 0) {
                p->n = i; /* only i-1 workers exist */
                pb_pool_free(p);
                return pb_error(PB_ERR_NOMEM, "cannot start thread %d", i);
            }
        }
    }
    *out = p;
    return PB_OK;
}

void pb_pool_free(pb_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p->threads);
    free(p);
}

int pb_pool_size(const pb_pool *p) { return p ? p->n : 1; }

/* The caller's judgement of whether its workers pay off, from one job run with them: par is the wall time
 * the job took; solo what the caller alone would have taken: the CPU time of all its parts (whoever ran
 * them) times the wall/CPU stretch seen when the caller last ran jobs alone (1 on a quiet machine). CPU
 * time does not run while a thread waits for a core, so it measures the work itself, even when parts are
 * uneven (causal attention) or our own threads share a core. Sums decay, so big jobs weigh more
 * than tiny ones and old jobs fade. When the workers cost more than they give (their parts start or
 * finish late because they lose their cores), the caller runs jobs alone for a while, then tries the
 * workers again, each failure doubling the solo period. The parts and their split are the same either way. */
static void judge(pb_pool *p, uint64_t now, uint64_t par, uint64_t solo_cpu, bool stolen) {
    /* Workers that were asleep (a new pool, the end of a solo period) take a while to wake up; until they
     * have, the caller runs every part itself, which says nothing yet about what they are worth. */
    if (stolen && now < p->warm_until) return;
    if (par < JUDGE_MIN_JOB_NS) return; /* too short to time fairly; and too short to matter */
    double stretch = p->solo_cpu > 0 ? p->solo_wall / p->solo_cpu : 1.0;
    if (p->judged == 0) p->judge_since = p->judge_last = now;
    double keep = 1.0 - (double)(now - p->judge_last) / JUDGE_TAU_NS; /* the sums cover about JUDGE_TAU_NS */
    keep = keep < 0 ? 0 : keep;
    p->judge_last = now;
    p->s_par = p->s_par * keep + (double)par;
    p->s_solo = p->s_solo * keep + (double)solo_cpu * stretch;
    p->judged++;
    uint64_t seen = now - p->judge_since;
    if (p->judged >= JUDGE_MIN_JOBS && seen >= JUDGE_MIN_NS && p->s_par > p->s_solo * JUDGE_MARGIN) {
        p->solo_until = now + p->solo_ns;
        p->solo_ns = p->solo_ns * 2 > SOLO_MAX_NS ? SOLO_MAX_NS : p->solo_ns * 2;
        p->s_par = p->s_solo = 0;
        p->judged = 0;
        p->warm_until = p->solo_until + WARM_NS;
    } else if (seen >= 4 * (uint64_t)JUDGE_TAU_NS) {
        p->solo_ns = SOLO_MIN_NS; /* workers have paid off for a while: forgive past failures */
    }
}

void pb_pool_run_n(pb_pool *p, int n, pb_pool_fn fn, void *ctx) {
    if (!p || p->n == 1 || n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    if (n > p->n) n = p->n;
    /* The CPU clock is a system call (~0.5 us): only a random quarter of the jobs are measured. */
    p->rng = p->rng * 6364136223846793005u + 1442695040888963407u;
    uint64_t t0 = pb_time_ns(), c0 = (p->rng >> 62) == 0 ? thread_cpu_ns() : 0;
    bool measure = c0 != 0; /* 0: not picked, or no CPU clock here (then the workers are always used) */
    if (t0 < p->solo_until) {
        for (int i = 0; i < n; i++) fn(ctx, i, n);
        if (!measure) return;
        uint64_t wall = pb_time_ns() - t0, cpu = thread_cpu_ns() - c0;
        p->solo_wall = p->solo_wall * SOLO_DECAY + (double)wall;
        p->solo_cpu = p->solo_cpu * SOLO_DECAY + (double)(cpu < wall ? cpu : wall);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->measure = measure;
    atomic_store_explicit(&p->part_cpu, 0, memory_order_relaxed);
    atomic_store_explicit(&p->remaining, n - 1, memory_order_relaxed);
    uint64_t gen = (uint64_t)tk_gen(atomic_load_explicit(&p->ticket, memory_order_relaxed)) + 1;
    uint64_t t = (gen & 0xffffffffu) << 32 | (uint64_t)n << TICKET_PART_BITS | 1;
    atomic_exchange(&p->ticket, t); /* publishes fn/ctx/remaining; pairs with the sleepers count (see timed_wait) */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, n);
    int mine = 1 + run_parts(p, t, false); /* parts no worker has picked up yet */
    uint64_t c1 = measure ? thread_cpu_ns() : 0;
    wait_done(p);
    if (!measure) return;
    uint64_t t2 = pb_time_ns();
    judge(p, t2, t2 - t0, c1 - c0 + atomic_load_explicit(&p->part_cpu, memory_order_relaxed), mine == n);
}

void pb_pool_set_limit(pb_pool *p, int n) {
    if (!p) return;
    atomic_store(&p->limit, n < 1 ? 1 : n > p->n ? p->n : n);
}

int pb_pool_limit(const pb_pool *p) {
    if (!p) return 1;
    int l = atomic_load(&((pb_pool *)p)->limit);
    return l > 0 ? l : p->n;
}

void pb_pool_run(pb_pool *p, pb_pool_fn fn, void *ctx) { pb_pool_run_n(p, pb_pool_limit(p), fn, ctx); }

// --- one-off threads -----------------------------------------------------------------------------------

struct pb_thread {
    pthread_t id;
    void (*fn)(void *);
    void *arg;
};

static void *thread_main(void *p) {
    pb_thread *t = p;
    t->fn(t->arg);
    return NULL;
}

pb_status pb_thread_start(void (*fn)(void *), void *arg, pb_thread **out) {
    *out = NULL;
    pb_thread *t = pb_calloc(1, sizeof *t);
    if (!t) return PB_ERR_NOMEM;
    t->fn = fn, t->arg = arg;
    if (pthread_create(&t->id, NULL, thread_main, t) != 0) {
        free(t);
        return pb_error(PB_ERR_IO, "cannot start a thread");
    }
    *out = t;
    return PB_OK;
}

void pb_thread_join(pb_thread *t) {
    if (!t) return;
    pthread_join(t->id, NULL);
    free(t);
}
