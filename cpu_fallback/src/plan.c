/* The CPU arena's memory plan: vkinfer/model/memory.py's plan_offsets in C, offset for offset.
 *
 * memory.py is the definition (and the planner wherever this one declines): tensors of `size` bytes live from
 * step `first` to step `last`; each is placed at the lowest aligned offset clear of the placed tensors alive with
 * it, in order of decreasing size ("greedy by size"), then, when that is over the aligned live peak, in order of
 * first use and decreasing size ("greedy by breadth"), then, still over, alternately at the lowest and at the
 * highest free offset below the peak ("two-ended"); the smallest wins, the earlier on a tie. Ties of the sort keys
 * go by name: the caller gives the tensors' indices in name order.
 *
 * The walks are those of memory.py: `lowest` over the placed intervals alive with a tensor in increasing offset
 * (an interval [off, end), zero-length for a zero-byte tensor: the first gap of `need` bytes from 0, a gap ending
 * at a block's start), `highest` over them in decreasing end. The placed intervals of the tensors alive at every
 * step are kept as merged runs (`pinned`), and all placed intervals as runs and points (`every`) for those
 * tensors' own queries, exactly as memory._Runs keeps them; the others are found through an index by step.
 * Where offsets tie, the order of the blocks does not change either walk (after a block that does not fit, `at`
 * is past that offset), so a block list need only be sorted by offset (or by end for `highest`).
 *
 * Python's integers do not overflow: every sum here is checked, and where one would leave int64 the planner
 * declines (*done = 0) and the caller plans in Python. It declines too where its step index would be large for
 * the tensor count (steps are indexed directly) or its per-step lists would pass PLAN_MAX_INDEX entries; a
 * 100k-node chain's plan took 0.9 s in Python, ~10 ms here. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "vkinfer_cpu.h"

/* entries of the per-step lists of placed tensors (4 bytes each): past this the caller's Python plans it */
#define PLAN_MAX_INDEX ((uint64_t)1 << 25)

typedef struct {
    int64_t *start, *end; /* sorted disjoint runs [start, end), touching ones merged */
    int64_t* pt;          /* zero-length intervals outside every run, sorted */
    size_t n, np;
} runs;

typedef struct {
    uint32_t count;
    const int64_t *size, *first, *last;
    int64_t align, lo, hi, span;
    size_t *alive_base, *born_base; /* per step: where its list of placed tensors starts in alive_ix / born_ix */
    uint32_t *alive_len, *born_len, *alive_ix, *born_ix;
    int64_t *poff, *pend; /* each placed tensor's interval */
    int64_t* near;        /* (off, end) pairs of one query */
    uint32_t* tmp;        /* merge sort's buffer */
    int by;               /* the sort's keys: 0 (-size, first), 1 (first, -size), 2 first */
    runs pinned, every;
    uint32_t everywhere; /* tensors alive at every step */
} planner;

static int round_up(int64_t n, int64_t align, int64_t* out)
{
    int64_t t;
    if (__builtin_add_overflow(n, align - 1, &t))
        return 0;
    *out = t / align * align;
    return 1;
}

static size_t bisect_left(const int64_t* a, size_t n, int64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t bisect_right(const int64_t* a, size_t n, int64_t x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x < a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* memory._Runs.add: cover [s, e). Capacity: one run and one point per tensor, each tensor added once. */
static void runs_add(runs* r, int64_t s, int64_t e)
{
    if (e == s) {
        size_t i = bisect_right(r->start, r->n, s);
        if (i == 0 || r->end[i - 1] < s) { /* a point on or inside a run blocks nothing the run does not */
            size_t k = bisect_right(r->pt, r->np, s);
            memmove(r->pt + k + 1, r->pt + k, (r->np - k) * sizeof(int64_t));
            r->pt[k] = s;
            r->np++;
        }
        return;
    }
    size_t i = bisect_left(r->end, r->n, s);   /* the first run ending at or after s (touching: merged) */
    size_t j = bisect_right(r->start, r->n, e); /* runs before j start at or before e */
    if (i < j) {
        if (r->start[i] < s)
            s = r->start[i];
        if (r->end[j - 1] > e)
            e = r->end[j - 1];
    }
    if (j == i) { /* a new run at i */
        memmove(r->start + i + 1, r->start + i, (r->n - i) * sizeof(int64_t));
        memmove(r->end + i + 1, r->end + i, (r->n - i) * sizeof(int64_t));
        r->n++;
    } else if (j - i > 1) { /* runs i..j-1 become one */
        memmove(r->start + i + 1, r->start + j, (r->n - j) * sizeof(int64_t));
        memmove(r->end + i + 1, r->end + j, (r->n - j) * sizeof(int64_t));
        r->n -= j - i - 1;
    }
    r->start[i] = s;
    r->end[i] = e;
    if (r->np) {
        size_t a = bisect_left(r->pt, r->np, s), b = bisect_right(r->pt, r->np, e);
        memmove(r->pt + a, r->pt + b, (r->np - b) * sizeof(int64_t));
        r->np -= b - a;
    }
}

/* memory._lowest over the blocks `near` (nn (off, end) pairs sorted by offset), the runs of `r` and its points,
 * merged by offset. */
static int64_t lowest(const int64_t* near, size_t nn, const runs* r, int64_t need)
{
    int64_t at = 0;
    size_t i = 0, j = 0, k = 0;
    for (;;) {
        int64_t off, end;
        /* the block of least offset among the three lists' heads */
        int which = -1;
        off = 0;
        if (i < nn) {
            which = 0;
            off = near[2 * i];
        }
        if (j < r->n && (which < 0 || r->start[j] < off)) {
            which = 1;
            off = r->start[j];
        }
        if (k < r->np && (which < 0 || r->pt[k] < off)) {
            which = 2;
            off = r->pt[k];
        }
        if (which < 0)
            return at;
        if (which == 0)
            end = near[2 * i++ + 1];
        else if (which == 1)
            end = r->end[j++];
        else
            end = r->pt[k++];
        if (off - at >= need)
            return at;
        if (end > at)
            at = end;
    }
}

/* memory._highest over `near` (sorted by decreasing end) and the runs of `r` (the two-ended plan makes no
 * points), merged by decreasing end; -1 where nothing fits. */
static int64_t highest(const int64_t* near, size_t nn, const runs* r, int64_t need, int64_t cap)
{
    int64_t top = cap;
    size_t i = 0, j = r->n;
    for (;;) {
        int64_t off, end;
        if (i < nn && (j == 0 || near[2 * i + 1] >= r->end[j - 1])) {
            off = near[2 * i];
            end = near[2 * i + 1];
            i++;
        } else if (j > 0) {
            j--;
            off = r->start[j];
            end = r->end[j];
        } else {
            break;
        }
        if (top - end >= need)
            return top - need;
        if (off < top)
            top = off;
    }
    return top >= need ? top - need : -1;
}

/* Sorts nn (off, end) pairs by offset (by = 0, increasing) or by end (by = 1, decreasing): insertion sort, as
 * a tensor of a chain meets a handful; past 32, qsort. */
static int by_off(const void* a, const void* b)
{
    int64_t x = ((const int64_t*)a)[0], y = ((const int64_t*)b)[0];
    return (x > y) - (x < y);
}

static int by_end_down(const void* a, const void* b)
{
    int64_t x = ((const int64_t*)a)[1], y = ((const int64_t*)b)[1];
    return (x < y) - (x > y);
}

static void sort_pairs(int64_t* p, size_t nn, int by)
{
    if (nn > 32) {
        qsort(p, nn, 2 * sizeof(int64_t), by ? by_end_down : by_off);
        return;
    }
    for (size_t i = 1; i < nn; i++) {
        int64_t o = p[2 * i], e = p[2 * i + 1];
        size_t j = i;
        while (j > 0 && (by ? p[2 * (j - 1) + 1] < e : p[2 * (j - 1)] > o)) {
            p[2 * j] = p[2 * (j - 1)];
            p[2 * j + 1] = p[2 * (j - 1) + 1];
            j--;
        }
        p[2 * j] = o;
        p[2 * j + 1] = e;
    }
}

/* The placed intervals (other than the pinned runs) alive with tensor k: those alive at its first step, then
 * those first used during its life (memory._Placed.near). */
static size_t gather(planner* p, uint32_t k)
{
    size_t nn = 0;
    int64_t f = p->first[k] - p->lo, l = p->last[k] - p->lo;
    const uint32_t* a = p->alive_ix + p->alive_base[f];
    for (uint32_t i = 0; i < p->alive_len[f]; i++, nn++) {
        p->near[2 * nn] = p->poff[a[i]];
        p->near[2 * nn + 1] = p->pend[a[i]];
    }
    for (int64_t s = f + 1; s <= l; s++) {
        const uint32_t* b = p->born_ix + p->born_base[s];
        for (uint32_t i = 0; i < p->born_len[s]; i++, nn++) {
            p->near[2 * nn] = p->poff[b[i]];
            p->near[2 * nn + 1] = p->pend[b[i]];
        }
    }
    return nn;
}

static void index_add(planner* p, uint32_t k, int64_t at, int64_t end)
{
    int64_t f = p->first[k] - p->lo, l = p->last[k] - p->lo;
    p->poff[k] = at;
    p->pend[k] = end;
    p->born_ix[p->born_base[f] + p->born_len[f]++] = k;
    for (int64_t s = f; s <= l; s++)
        p->alive_ix[p->alive_base[s] + p->alive_len[s]++] = k;
}

static int is_everywhere(const planner* p, uint32_t k)
{
    return p->first[k] == p->lo && p->last[k] == p->hi;
}

static void reset(planner* p)
{
    memset(p->alive_len, 0, (size_t)(p->span + 1) * sizeof(uint32_t));
    memset(p->born_len, 0, (size_t)(p->span + 1) * sizeof(uint32_t));
    p->pinned.n = p->pinned.np = p->every.n = p->every.np = 0;
}

/* memory._aligned_peak: the most bytes alive at one step, each size max(size, least) rounded up. 0: overflow. */
static int aligned_peak(planner* p, int64_t least, int64_t* delta, int64_t* out)
{
    memset(delta, 0, (size_t)(p->span + 2) * sizeof(int64_t));
    for (uint32_t k = 0; k < p->count; k++) {
        int64_t n;
        if (!round_up(p->size[k] > least ? p->size[k] : least, p->align, &n))
            return 0;
        int64_t* a = &delta[p->first[k] - p->lo];
        int64_t* b = &delta[p->last[k] - p->lo + 1];
        if (__builtin_add_overflow(*a, n, a) || __builtin_sub_overflow(*b, n, b))
            return 0;
    }
    int64_t peak = 0, alive = 0;
    for (int64_t s = 0; s <= p->span + 1; s++) {
        if (__builtin_add_overflow(alive, delta[s], &alive))
            return 0;
        if (alive > peak)
            peak = alive;
    }
    *out = peak;
    return 1;
}

/* Stable merge sort of idx[0..n) by p->by's keys; a merge of two halves already in order is skipped. */
static int key_le(const planner* p, uint32_t a, uint32_t b)
{
    const int64_t *size = p->size, *first = p->first;
    if (p->by == 0)
        return size[a] > size[b] || (size[a] == size[b] && first[a] <= first[b]);
    if (p->by == 1)
        return first[a] < first[b] || (first[a] == first[b] && size[a] >= size[b]);
    return first[a] <= first[b];
}

static void merge_sort(planner* p, uint32_t* idx, size_t n)
{
    if (n <= 16) {
        for (size_t i = 1; i < n; i++) {
            uint32_t v = idx[i];
            size_t j = i;
            while (j > 0 && !key_le(p, idx[j - 1], v)) {
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = v;
        }
        return;
    }
    size_t h = n / 2;
    merge_sort(p, idx, h);
    merge_sort(p, idx + h, n - h);
    if (key_le(p, idx[h - 1], idx[h]))
        return;
    memcpy(p->tmp, idx, h * sizeof(uint32_t));
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n)
        idx[o++] = key_le(p, p->tmp[i], idx[j]) ? p->tmp[i++] : idx[j++];
    while (i < h)
        idx[o++] = p->tmp[i++];
}

/* The name order sorted by (-size, first) (by = 0), (first, -size) (by = 1) or first (by = 2). */
static void make_order(planner* p, const uint32_t* by_name, uint32_t* out, int by)
{
    p->by = by;
    memcpy(out, by_name, (size_t)p->count * sizeof(uint32_t));
    merge_sort(p, out, p->count);
}

/* memory._greedy: offsets into out, the arena's size into *total. 0: an overflow. */
static int greedy(planner* p, const uint32_t* order, int64_t* out, int64_t* total)
{
    reset(p);
    uint32_t to_come = p->everywhere;
    int64_t top = 0;
    for (uint32_t i = 0; i < p->count; i++) {
        uint32_t k = order[i];
        int64_t size = p->size[k], need, rounded, at, end, reach;
        if (!round_up(size > 1 ? size : 1, p->align, &need) || !round_up(size, p->align, &rounded))
            return 0;
        int ev = is_everywhere(p, k);
        if (ev) {
            at = lowest(NULL, 0, &p->every, need);
        } else {
            size_t nn = gather(p, k);
            sort_pairs(p->near, nn, 0);
            at = lowest(p->near, nn, &p->pinned, need);
        }
        if (__builtin_add_overflow(at, need, &reach))
            return 0;
        end = at + rounded; /* rounded <= need */
        out[k] = at;
        to_come -= (uint32_t)ev;
        if (to_come)
            runs_add(&p->every, at, end);
        if (ev && end > at)
            runs_add(&p->pinned, at, end);
        else
            index_add(p, k, at, end);
        if (reach > top)
            top = reach;
    }
    *total = top;
    return 1;
}

/* memory._two_ended into out with the arena's size `cap`: 1 planned, 0 something did not fit (or overflowed). */
static int two_ended(planner* p, const uint32_t* order, int64_t cap, int64_t* out)
{
    reset(p);
    uint32_t to_come = p->everywhere;
    for (uint32_t i = 0; i < p->count; i++) {
        uint32_t k = order[i];
        int64_t size = p->size[k], need, off;
        if (!round_up(size > 1 ? size : 1, p->align, &need))
            return 0;
        int ev = is_everywhere(p, k);
        size_t nn = ev ? 0 : gather(p, k);
        const runs* r = ev ? &p->every : &p->pinned;
        if (i % 2 == 0) {
            sort_pairs(p->near, nn, 0);
            off = lowest(p->near, nn, r, need);
            if (cap - off < need)
                return 0;
        } else {
            sort_pairs(p->near, nn, 1);
            off = highest(p->near, nn, r, need, cap);
            if (off < 0)
                return 0;
        }
        out[k] = off;
        to_come -= (uint32_t)ev;
        if (to_come)
            runs_add(&p->every, off, off + need); /* off + need <= cap */
        if (ev)
            runs_add(&p->pinned, off, off + need);
        else
            index_add(p, k, off, off + need);
    }
    return 1;
}

static void* alloc(size_t count, size_t each, int* failed)
{
    void* q = calloc(count ? count : 1, each);
    if (!q)
        *failed = 1;
    return q;
}

vki_status vki_plan_offsets(uint64_t n, const int64_t* size, const int64_t* first, const int64_t* last,
                            const int64_t* name_order, int64_t align, int64_t* offsets, int64_t* arena, int32_t* done)
{
    if (!done || !arena || (n && (!size || !first || !last || !name_order || !offsets))) {
        vki_set_error("plan_offsets: a NULL array");
        return VKI_EINVAL;
    }
    *done = 0;
    *arena = 0;
    if (align < 1) {
        vki_set_error("plan_offsets: alignment %lld is not positive", (long long)align);
        return VKI_EINVAL;
    }
    if (n >= UINT32_MAX) {
        vki_set_error("plan_offsets: %llu tensors (at most %u)", (unsigned long long)n, UINT32_MAX - 1);
        return VKI_EINVAL;
    }
    if (n == 0) {
        *done = 1;
        return VKI_OK;
    }
    int failed = 0;
    uint8_t* seen = alloc(n, 1, &failed);
    if (failed)
        return VKI_ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        int64_t k = name_order[i];
        if (k < 0 || (uint64_t)k >= n || seen[k]) {
            free(seen);
            vki_set_error("plan_offsets: the name order is not a permutation of the %llu tensors (entry %llu: %lld)",
                          (unsigned long long)n, (unsigned long long)i, (long long)k);
            return VKI_EINVAL;
        }
        seen[k] = 1;
    }
    free(seen);
    /* What memory.py plans its own way (negative sizes, a tensor read before it is written, a step span far
     * past the tensor count) is declined: the caller's Python plans it, the same plan by definition. */
    planner P = {.count = (uint32_t)n, .size = size, .first = first, .last = last, .align = align};
    planner* p = &P;
    p->lo = first[0];
    p->hi = last[0];
    for (uint64_t k = 0; k < n; k++) {
        if (size[k] < 0 || first[k] > last[k]) {
            vki_set_error("plan_offsets: tensor %llu (size %lld, steps %lld..%lld) is left to the Python planner",
                          (unsigned long long)k, (long long)size[k], (long long)first[k], (long long)last[k]);
            return VKI_OK;
        }
        if (first[k] < p->lo)
            p->lo = first[k];
        if (last[k] > p->hi)
            p->hi = last[k];
    }
    if (__builtin_sub_overflow(p->hi, p->lo, &p->span) || (uint64_t)p->span > 8 * n + 1024) {
        vki_set_error("plan_offsets: steps %lld..%lld for %llu tensors: left to the Python planner", (long long)p->lo,
                      (long long)p->hi, (unsigned long long)n);
        return VKI_OK;
    }
    size_t steps = (size_t)p->span + 2;
    /* The per-step lists' capacities: every tensor that can be indexed (all but those alive everywhere with a
     * nonzero size, which greedy keeps as pinned runs; the two-ended plan indexes fewer). */
    p->alive_base = alloc(steps, sizeof(size_t), &failed);
    p->born_base = alloc(steps, sizeof(size_t), &failed);
    p->alive_len = alloc(steps, sizeof(uint32_t), &failed);
    p->born_len = alloc(steps, sizeof(uint32_t), &failed);
    int64_t* delta = alloc(steps, sizeof(int64_t), &failed);
    vki_status status = VKI_ENOMEM;
    uint32_t *by_name = NULL, *order = NULL;
    int64_t* other = NULL;
    if (failed)
        goto out;
    uint64_t entries = 0;
    for (uint32_t k = 0; k < n; k++) {
        int ev = is_everywhere(p, k);
        p->everywhere += (uint32_t)ev;
        if (ev && size[k] > 0)
            continue;
        int64_t f = first[k] - p->lo, l = last[k] - p->lo;
        entries += (uint64_t)(l - f + 1);
        p->born_len[f]++;
        for (int64_t s = f; s <= l && entries <= PLAN_MAX_INDEX; s++)
            p->alive_len[s]++;
        if (entries > PLAN_MAX_INDEX) {
            vki_set_error("plan_offsets: over %llu entries of the step index: left to the Python planner",
                          (unsigned long long)PLAN_MAX_INDEX);
            status = VKI_OK;
            goto out;
        }
    }
    size_t at_alive = 0, at_born = 0;
    for (size_t s = 0; s < steps; s++) {
        p->alive_base[s] = at_alive;
        p->born_base[s] = at_born;
        at_alive += p->alive_len[s];
        at_born += p->born_len[s];
    }
    p->alive_ix = alloc(at_alive, sizeof(uint32_t), &failed);
    p->born_ix = alloc(at_born, sizeof(uint32_t), &failed);
    p->poff = alloc(n, sizeof(int64_t), &failed);
    p->pend = alloc(n, sizeof(int64_t), &failed);
    p->near = alloc(2 * n, sizeof(int64_t), &failed);
    p->tmp = alloc(n / 2 + 1, sizeof(uint32_t), &failed);
    p->pinned.start = alloc(n, sizeof(int64_t), &failed);
    p->pinned.end = alloc(n, sizeof(int64_t), &failed);
    p->pinned.pt = alloc(n, sizeof(int64_t), &failed);
    p->every.start = alloc(n, sizeof(int64_t), &failed);
    p->every.end = alloc(n, sizeof(int64_t), &failed);
    p->every.pt = alloc(n, sizeof(int64_t), &failed);
    by_name = alloc(n, sizeof(uint32_t), &failed);
    order = alloc(n, sizeof(uint32_t), &failed);
    other = alloc(n, sizeof(int64_t), &failed);
    if (failed)
        goto out;
    for (uint32_t i = 0; i < n; i++)
        by_name[i] = (uint32_t)name_order[i];
    status = VKI_OK;
    int64_t bound, best, total, cap;
    const char* wide = "plan_offsets: a sum past int64: left to the Python planner";
    if (!aligned_peak(p, 0, delta, &bound)) {
        vki_set_error("%s", wide);
        goto out;
    }
    make_order(p, by_name, order, 0);
    if (!greedy(p, order, offsets, &best)) {
        vki_set_error("%s", wide);
        goto out;
    }
    if (best > bound) {
        make_order(p, by_name, order, 1);
        if (!greedy(p, order, other, &total)) {
            vki_set_error("%s", wide);
            goto out;
        }
        if (total < best) {
            best = total;
            memcpy(offsets, other, n * sizeof(int64_t));
        }
        if (best > bound) {
            if (!aligned_peak(p, 1, delta, &cap)) {
                vki_set_error("%s", wide);
                goto out;
            }
            make_order(p, by_name, order, 2);
            if (two_ended(p, order, cap, other) && cap < best) {
                best = cap;
                memcpy(offsets, other, n * sizeof(int64_t));
            }
        }
    }
    *arena = best;
    *done = 1;
out:
    free(p->alive_base);
    free(p->born_base);
    free(p->alive_len);
    free(p->born_len);
    free(delta);
    free(p->alive_ix);
    free(p->born_ix);
    free(p->poff);
    free(p->pend);
    free(p->near);
    free(p->tmp);
    free(p->pinned.start);
    free(p->pinned.end);
    free(p->pinned.pt);
    free(p->every.start);
    free(p->every.end);
    free(p->every.pt);
    free(by_name);
    free(order);
    free(other);
    return status;
}

/* vki_plan_name_order's sort: (8-byte big-endian prefix, index) pairs, ties of the prefix by the rest of the
 * names (strcmp compares unsigned bytes: UTF-8's byte order is the code points' order, Python's for str). */
typedef struct {
    uint64_t key;
    uint32_t index;
} name_key;

static int name_le(const name_key* a, const name_key* b, const char* const* at)
{
    if (a->key != b->key)
        return a->key < b->key;
    if ((a->key & 0xff) == 0) /* shorter than 8 bytes: the same name (no name holds a NUL) */
        return 1;
    return strcmp(at[a->index] + 8, at[b->index] + 8) <= 0;
}

static void name_sort(name_key* v, size_t n, name_key* tmp, const char* const* at)
{
    if (n <= 16) {
        for (size_t i = 1; i < n; i++) {
            name_key x = v[i];
            size_t j = i;
            while (j > 0 && !name_le(&v[j - 1], &x, at)) {
                v[j] = v[j - 1];
                j--;
            }
            v[j] = x;
        }
        return;
    }
    size_t h = n / 2;
    name_sort(v, h, tmp, at);
    name_sort(v + h, n - h, tmp, at);
    if (name_le(&v[h - 1], &v[h], at))
        return;
    memcpy(tmp, v, h * sizeof(name_key));
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n)
        v[o++] = name_le(&tmp[i], &v[j], at) ? tmp[i++] : v[j++];
    while (i < h)
        v[o++] = tmp[i++];
}

vki_status vki_plan_name_order(const char* names, uint64_t bytes, uint64_t n, int64_t* order)
{
    if ((n && (!names || !order)) || n >= UINT32_MAX) {
        vki_set_error("plan_name_order: NULL arrays or %llu names", (unsigned long long)n);
        return VKI_EINVAL;
    }
    if (n == 0)
        return VKI_OK;
    if (bytes == 0 || names[bytes - 1] != 0) {
        vki_set_error("plan_name_order: the names do not end with a NUL");
        return VKI_EINVAL;
    }
    int failed = 0;
    const char** at = alloc(n, sizeof(char*), &failed);
    name_key* v = alloc(n, sizeof(name_key), &failed);
    name_key* tmp = alloc(n / 2 + 1, sizeof(name_key), &failed);
    vki_status status = VKI_ENOMEM;
    if (failed)
        goto out;
    uint64_t k = 0;
    const char *s = names, *stop = names + bytes;
    while (s < stop) {
        const char* z = memchr(s, 0, (size_t)(stop - s));
        if (!z || k == n) {
            k = n + 1;
            break;
        }
        at[k++] = s;
        s = z + 1;
    }
    if (k != n) {
        vki_set_error("plan_name_order: the %llu bytes do not hold exactly %llu NUL-terminated names",
                      (unsigned long long)bytes, (unsigned long long)n);
        status = VKI_EINVAL;
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t key = 0;
        const unsigned char* c = (const unsigned char*)at[i];
        int j = 0;
        for (; j < 8 && c[j]; j++)
            key = key << 8 | c[j];
        v[i].key = j ? key << (8 * (8 - j)) : 0; /* (a shift by 64 is undefined) */
        v[i].index = i;
    }
    name_sort(v, n, tmp, at);
    for (uint32_t i = 0; i < n; i++)
        order[i] = v[i].index;
    status = VKI_OK;
out:
    free(at);
    free(v);
    free(tmp);
    return status;
}
