/* A persistent pthread pool: threads are created once and woken per job, because creating
 * threads per call would cost more than a small layer's whole run. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define MAX_WORKERS 63

static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;  /* one job at a time */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_start = PTHREAD_COND_INITIALIZER;
static pthread_cond_t cv_done = PTHREAD_COND_INITIALIZER;
static size_t nworkers;            /* created so far */
static uint64_t generation;        /* bumped per job */
static size_t participants;        /* workers taking part in the current job */
static size_t finished;            /* of those, how many are done */
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
    uint64_t seen = 0;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (generation == seen) pthread_cond_wait(&cv_start, &mu);
        seen = generation;
        if (id >= participants) continue;
        pthread_mutex_unlock(&mu);
        drain();
        pthread_mutex_lock(&mu);
        if (++finished == participants) pthread_cond_signal(&cv_done);
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
    participants = want;
    finished = 0;
    generation++;
    pthread_cond_broadcast(&cv_start);
    pthread_mutex_unlock(&mu);

    drain();

    pthread_mutex_lock(&mu);
    while (finished < participants) pthread_cond_wait(&cv_done, &mu);
    pthread_mutex_unlock(&mu);
    pthread_mutex_unlock(&run_lock);
}
