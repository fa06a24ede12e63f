#ifndef VKINFER_CPU_THREADPOOL_H
#define VKINFER_CPU_THREADPOOL_H
#include <stddef.h>

/* Run fn(ctx, i) for i in [0, n) on `threads` threads (the caller is one of them). Items are
 * handed out dynamically; each item must write disjoint outputs, so results do not depend on the
 * thread count. One parallel_for runs at a time (callers serialize). */
void vki_parallel_for(size_t n, size_t threads, void (*fn)(void* ctx, size_t i), void* ctx);

/* Wake sleeping workers so that they spin, ready for the jobs that follow, without giving them one.
 * A worker asleep in the kernel takes tens of microseconds to join a job (30-60 us measured on a
 * 2-vCPU VM, milliseconds at times), longer than many layers take: a graph run calls this before
 * its first operator, so the wake-up overlaps that operator instead of delaying each of the first
 * parallel ones. Costs nothing when no worker sleeps. */
void vki_pool_wake(size_t threads);
#endif
