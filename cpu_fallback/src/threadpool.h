#ifndef VKINFER_CPU_THREADPOOL_H
#define VKINFER_CPU_THREADPOOL_H
#include <stddef.h>

/* Run fn(ctx, i) for i in [0, n) on `threads` threads (the caller is one of them). Items are
 * handed out dynamically; each item must write disjoint outputs, so results do not depend on the
 * thread count. One parallel_for runs at a time (callers serialize). */
void vki_parallel_for(size_t n, size_t threads, void (*fn)(void* ctx, size_t i), void* ctx);
#endif
