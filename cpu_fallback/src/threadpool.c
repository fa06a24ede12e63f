/* A persistent pthread pool: threads are created once and woken per job, because creating
 * threads per call would cost more than a small layer's whole run. Workers spin for a short while
 * before sleeping (and the caller spins before waiting), because a futex wake-up costs tens of
 * microseconds: as much as a small layer's whole run. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define MAX_WORKERS 63
#define SPIN_ITERATIONS 20000  /* ~50-100 us of pause instructions */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;  /* one job at a time */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_start = PTHREAD_COND_INITIALIZER;
static pthread_cond_t cv_done = PTHREAD_COND_INITIALIZER;
static size_t nworkers;                 /* created so far (under mu) */
/* Job word: (job counter << 8) | participating workers. One atomic load tells a worker both which
 * job is current and whether it takes part, so a worker waking late can never act on a stale mix
 * of the two (which would miscount `finished`). */
static atomic_uint_fast64_t job_word;
static atomic_size_t finished;          /* participants done with the current job */
static atomic_size_t next_item;
static size_t job_n;
static void (*job_fn)(void*, size_t);
static void* job_ctx;

static void drain(void)
{
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&next_item, 1, memory_order_relaxed);
        if (i >= job_n) return;
        job_fn(job_ctx, i);
    }
}

static void* worker(void* arg)
{
    size_t id = (size_t)(uintptr_t)arg;
    /* Not the current job word: the caller creates workers for the job it is about to publish (or
     * has published), and job counters start at 1, so 0 makes a new worker join the current job. */
    uint64_t seen = 0;
    for (;;) {
        for (int i = 0; i < SPIN_ITERATIONS && atomic_load_explicit(&job_word, memory_order_acquire) == seen; i++)
            cpu_relax();
        if (atomic_load_explicit(&job_word, memory_order_acquire) == seen) {
            pthread_mutex_lock(&mu);
            while (atomic_load(&job_word) == seen) pthread_cond_wait(&cv_start, &mu);
            pthread_mutex_unlock(&mu);
        }
        seen = atomic_load_explicit(&job_word, memory_order_acquire);
        size_t want = (size_t)(seen & 0xFF);
        if (id >= want) continue;
        drain();
        if (atomic_fetch_add(&finished, 1) + 1 == want) {
            pthread_mutex_lock(&mu);  /* pairs with the caller's check-then-wait under mu */
            pthread_cond_signal(&cv_done);
            pthread_mutex_unlock(&mu);
        }
    }
    return NULL;
}

void vki_parallel_for(size_t n, size_t threads, void (*fn)(void* ctx, size_t i), void* ctx)
{
    if (threads > n) threads = n;
    if (threads <= 1) {
        for (size_t i = 0; i < n; i++) fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&run_lock);
    size_t want = threads - 1 > MAX_WORKERS ? MAX_WORKERS : threads - 1;
    pthread_mutex_lock(&mu);
    while (nworkers < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker, (void*)(uintptr_t)nworkers);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;  /* fewer threads than asked: still correct, just slower */
        nworkers++;
    }
    if (want > nworkers) want = nworkers;
    job_n = n;
    job_fn = fn;
    job_ctx = ctx;
    atomic_store(&next_item, 0);
    atomic_store(&finished, 0);
    uint64_t counter = (atomic_load(&job_word) >> 8) + 1;
    atomic_store_explicit(&job_word, (counter << 8) | want, memory_order_release);  /* publishes the job */
    pthread_cond_broadcast(&cv_start);
    pthread_mutex_unlock(&mu);

    drain();

    for (int i = 0; i < SPIN_ITERATIONS && atomic_load(&finished) < want; i++) cpu_relax();
    if (atomic_load(&finished) < want) {
        pthread_mutex_lock(&mu);
        while (atomic_load(&finished) < want) pthread_cond_wait(&cv_done, &mu);
        pthread_mutex_unlock(&mu);
    }
    pthread_mutex_unlock(&run_lock);
}
