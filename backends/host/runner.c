/* devicelayer's host runner: a recorded run of oneDNN calls executed in one call from Python.
 *
 * Built at first use by the system's C compiler (runner.py) and linked against nothing: oneDNN's
 * dnnl_primitive_execute and the OpenMP entry points of the runtime oneDNN runs on are handed in by address
 * (runner_init), so the runner works with whichever copy of each the process loaded.
 *
 * A run is an array of calls (runner_call).  EXECUTE executes a primitive on the calling thread (oneDNN wakes
 * the thread's OpenMP team where the primitive was built for one); ALONE does the same with the thread's team
 * size set to one around it; LANES executes the next `count` calls at once, call i on thread i % team of one
 * parallel region of the calling thread's team (each on its thread alone: oneDNN runs a primitive inside a
 * parallel region on the thread that executes it); HELPED does what LANES does with the runner's own helper
 * threads instead of a team (call 0 on the calling thread, call i offered to helper i - 1), for a thread whose
 * team is asleep or that has none: a helper armed beforehand (runner_arm) spins for its call instead of being
 * woken.  GUARD_NAN and GUARD_NAN_INF read `stream` float32 values at `primitive` and, where one is NaN (or NaN
 * or +infinity), stop the run with GUARDED and the guard's index: the caller computes the guarded call (the
 * next `nargs` calls) another way and goes on after it.  COPY copies `args` bytes from `stream` to `primitive`
 * (a layer's summand into the memory its convolution adds to).
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*execute_fn)(void *primitive, void *stream, int nargs, const void *args);
typedef void (*parallel_fn)(void (*task)(void *), void *data, unsigned threads, unsigned flags);
typedef int (*get_fn)(void);
typedef void (*set_fn)(int);

enum { EXECUTE = 0, ALONE = 1, LANES = 2, HELPED = 3, GUARD_NAN = 4, GUARD_NAN_INF = 5, COPY = 6 };
enum { GUARDED = -2 }; /* runner_run's status where a guard found what it looks for */
enum { MAX_LANES = 64 };

typedef struct {
    void *primitive;
    void *stream;
    const void *args; /* dnnl_exec_arg_t[nargs] */
    int32_t nargs;    /* LANES: how many of the following calls run at once */
    int32_t kind;
} runner_call;

static execute_fn execute;
static parallel_fn parallel;
static get_fn thread_num, num_threads, max_threads;
static set_fn set_threads;

/* execute, GOMP_parallel, omp_get_thread_num, omp_get_num_threads, omp_get_max_threads, omp_set_num_threads
 * (the five OpenMP ones NULL where oneDNN does not run on OpenMP: calls then run one after another). */
void runner_init(void *const *fns) {
    execute = (execute_fn)fns[0];
    parallel = (parallel_fn)fns[1];
    thread_num = (get_fn)fns[2];
    num_threads = (get_fn)fns[3];
    max_threads = (get_fn)fns[4];
    set_threads = (set_fn)fns[5];
}

typedef struct {
    const runner_call *calls;
    int count;
    int status[MAX_LANES];
} lanes_t;

static void lane(void *data) {
    lanes_t *l = (lanes_t *)data;
    int team = num_threads();
    set_threads(1);
    for (int i = thread_num(); i < l->count; i += team) {
        const runner_call *c = &l->calls[i];
        l->status[i] = execute(c->primitive, c->stream, c->nargs, c->args);
    }
}

static int run_lanes(const runner_call *calls, int count, int *failed, int at) {
    lanes_t l;
    l.calls = calls;
    l.count = count;
    for (int i = 0; i < count; i++) l.status[i] = 0;
    if (parallel != 0 && count > 1) {
        parallel(lane, &l, 0, 0);
    } else {
        for (int i = 0; i < count; i++) l.status[i] = execute(calls[i].primitive, calls[i].stream, calls[i].nargs,
                                                              calls[i].args);
    }
    for (int i = 0; i < count; i++) {
        if (l.status[i]) {
            *failed = at + i;
            return l.status[i];
        }
    }
    return 0;
}

/* The helpers: threads of the runner's own, each taking one call at a time from its slot.  A slot is IDLE,
 * POSTED (a call waits for its helper), TAKEN (the helper runs it) or DONE.  The thread that posted takes back
 * a call its helper has not started by the time its own call is done, and runs it itself: a helper that is
 * asleep, or shares its CPU with another busy thread, delays the run by no more than running it there. */
enum { MAX_HELPERS = MAX_LANES - 1 };
enum { YIELD_EVERY = 16 }; /* a spinning thread yields its CPU every this many rounds of 64 pauses (~10-30 us) */
enum { IDLE = 0, POSTED = 1, TAKEN = 2, DONE = 3 };
typedef struct {
    pthread_t thread;
    const runner_call *call;
    int status;
    atomic_int state;
} helper_t;

static helper_t helpers[MAX_HELPERS];
static int started; /* helpers running (started by the one thread in run_helped at a time) */
static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t helper_wake = PTHREAD_COND_INITIALIZER;
static atomic_llong spin_until; /* ns (CLOCK_MONOTONIC) until which an idle helper spins rather than sleeps */
static atomic_uint generation;  /* bumped by every wake-up: a sleeping helper rechecks */
static pthread_mutex_t helping = PTHREAD_MUTEX_INITIALIZER; /* one HELPED call at a time uses the helpers */
static atomic_int caller_cpu = -1; /* the CPU of the thread the helpers help, as it last armed or posted */

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void wake_helpers(void) {
    pthread_mutex_lock(&helper_lock);
    atomic_fetch_add(&generation, 1);
    pthread_cond_broadcast(&helper_wake);
    pthread_mutex_unlock(&helper_lock);
}

/* Keep the calling helper off the CPU of the thread it helps (where the process has another): the scheduler may
 * leave the two on one CPU, and then they take turns instead of running at once. */
static void keep_apart(int *avoided) {
#ifdef __linux__
    int cpu = atomic_load(&caller_cpu);
    if (cpu < 0 || cpu == *avoided || cpu >= CPU_SETSIZE) return;
    cpu_set_t cpus;
    if (sched_getaffinity(getpid(), sizeof cpus, &cpus) != 0 || !CPU_ISSET(cpu, &cpus) || CPU_COUNT(&cpus) < 2)
        return;
    CPU_CLR(cpu, &cpus);
    if (sched_setaffinity(0, sizeof cpus, &cpus) == 0) *avoided = cpu;
#else
    (void)avoided;
#endif
}

static void note_caller(void) {
#ifdef __linux__
    atomic_store(&caller_cpu, sched_getcpu());
#endif
}

static void *helper_main(void *arg) {
    helper_t *h = (helper_t *)arg;
    int avoided = -1;
    for (;;) {
        keep_apart(&avoided);
        unsigned spins = 0;
        while (atomic_load_explicit(&h->state, memory_order_acquire) != POSTED) {
            if (now_ns() < atomic_load(&spin_until)) {
                keep_apart(&avoided);
                for (int i = 0; i < 64; i++) relax();
                if (++spins % YIELD_EVERY == 0) sched_yield(); /* (a CPU shared with a busy thread: let it run) */
                continue;
            }
            pthread_mutex_lock(&helper_lock);
            unsigned gen = atomic_load(&generation);
            while (atomic_load(&h->state) != POSTED && now_ns() >= atomic_load(&spin_until) &&
                   atomic_load(&generation) == gen)
                pthread_cond_wait(&helper_wake, &helper_lock);
            pthread_mutex_unlock(&helper_lock);
        }
        int expected = POSTED;
        if (!atomic_compare_exchange_strong(&h->state, &expected, TAKEN)) continue; /* (taken back) */
        const runner_call *c = h->call;
        if (set_threads != 0) set_threads(1);
        h->status = execute(c->primitive, c->stream, c->nargs, c->args);
        atomic_store_explicit(&h->state, DONE, memory_order_release);
    }
    return 0;
}

/* A forked child has none of its parent's threads, and may have copied their locks held: it starts afresh. */
static void forget_helpers(void) {
    started = 0;
    pthread_mutex_init(&helper_lock, 0);
    pthread_cond_init(&helper_wake, 0);
    pthread_mutex_init(&helping, 0);
}

/* Have `count` helpers running; how many there are (fewer where a thread cannot be started). */
static int have_helpers(int count) {
    static int registered;
    if (!registered) {
        pthread_atfork(0, 0, forget_helpers);
        registered = 1;
    }
    while (started < count) {
        helper_t *h = &helpers[started];
        atomic_store(&h->state, IDLE);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
#ifdef __linux__
        /* the process's CPUs (its first thread's), not the caller's: a thread bound to one CPU (an OpenMP
         * team's first thread) would otherwise pass its CPU on to the helper, which then never runs beside it */
        cpu_set_t cpus;
        if (sched_getaffinity(getpid(), sizeof cpus, &cpus) == 0)
            pthread_attr_setaffinity_np(&attr, sizeof cpus, &cpus);
#endif
        int failed = pthread_create(&h->thread, &attr, helper_main, h);
        pthread_attr_destroy(&attr);
        if (failed) break;
        started++;
    }
    return started;
}

/* Let idle helpers spin for the next `ns` nanoseconds (a run with a HELPED call ahead), waking sleeping ones. */
void runner_arm(long long ns) {
    note_caller();
    atomic_store(&spin_until, now_ns() + ns);
    wake_helpers();
}

static int run_helped(const runner_call *calls, int count, int *failed, int at) {
    int status = 0, first = -1;
    int helped = pthread_mutex_trylock(&helping) == 0 ? have_helpers(count - 1) : -1;
    int held = helped >= 0;
    if (helped < 0) helped = 0; /* (another thread's HELPED call has them: one after another here) */
    if (helped > 0) note_caller();
    for (int i = 0; i < helped; i++) {
        helpers[i].call = &calls[i + 1];
        helpers[i].status = 0;
        atomic_store_explicit(&helpers[i].state, POSTED, memory_order_release);
    }
    if (helped > 0 && now_ns() >= atomic_load(&spin_until)) wake_helpers(); /* (not armed: they may sleep) */
    int size = set_threads != 0 ? max_threads() : 0;
    if (set_threads != 0) set_threads(1);
    for (int i = 0; i < count; i++) {
        int s;
        if (i >= 1 && i <= helped) {
            helper_t *h = &helpers[i - 1];
            int expected = POSTED;
            if (atomic_compare_exchange_strong(&h->state, &expected, IDLE)) { /* not started: run it here */
                const runner_call *c = &calls[i];
                s = execute(c->primitive, c->stream, c->nargs, c->args);
            } else { /* (its helper runs it: wait, yielding now and then in case the two share a CPU) */
                for (unsigned spins = 1; atomic_load_explicit(&h->state, memory_order_acquire) != DONE; spins++) {
                    relax();
                    if (spins % (64 * YIELD_EVERY) == 0) sched_yield();
                }
                s = h->status;
                atomic_store(&h->state, IDLE);
            }
        } else {
            const runner_call *c = &calls[i];
            s = execute(c->primitive, c->stream, c->nargs, c->args);
        }
        if (s && !status) {
            status = s;
            first = i;
        }
    }
    if (set_threads != 0) set_threads(size);
    if (held) pthread_mutex_unlock(&helping);
    if (status) *failed = at + first;
    return status;
}

/* Whether any of the `count` floats at `x` is NaN (or, with `inf`, NaN or +infinity). */
static int finds(const float *x, size_t count, int inf) {
    int bad = 0;
    if (inf) {
        for (size_t i = 0; i < count; i++) bad |= !(x[i] < INFINITY);
    } else {
        for (size_t i = 0; i < count; i++) bad |= x[i] != x[i];
    }
    return bad;
}

/* Run calls[0..n) in order; 0, or the first failing call's oneDNN status with its index in *failed (-1: a LANES
 * call asking for more than MAX_LANES or past the end). */
int runner_run(const runner_call *calls, int n, int *failed) {
    for (int i = 0; i < n; i++) {
        const runner_call *c = &calls[i];
        int status;
        if (c->kind == LANES || c->kind == HELPED) {
            int count = c->nargs;
            if (count < 0 || count > MAX_LANES || i + 1 + count > n) {
                *failed = i;
                return -1;
            }
            status = count == 0 ? 0 : c->kind == LANES ? run_lanes(c + 1, count, failed, i + 1)
                                                      : run_helped(c + 1, count, failed, i + 1);
            if (status) return status;
            i += count;
            continue;
        }
        if (c->kind == GUARD_NAN || c->kind == GUARD_NAN_INF) {
            if (finds((const float *)c->primitive, (size_t)(uintptr_t)c->stream, c->kind == GUARD_NAN_INF)) {
                *failed = i;
                return GUARDED;
            }
            continue;
        }
        if (c->kind == COPY) {
            memmove(c->primitive, c->stream, (size_t)(uintptr_t)c->args);
            continue;
        }
        if (c->kind == ALONE && set_threads != 0) {
            int size = max_threads();
            set_threads(1);
            status = execute(c->primitive, c->stream, c->nargs, c->args);
            set_threads(size);
        } else {
            status = execute(c->primitive, c->stream, c->nargs, c->args);
        }
        if (status) {
            *failed = i;
            return status;
        }
    }
    return 0;
}
