/* The element gather (vkinfer/model/moves.py): every data-movement op (Slice, Split, Concat on any axis,
 * Transpose, Pad in every mode, Gather, DepthToSpace, SpaceToDepth, Tile, Expand, nearest Resize) on 8-bit
 * tensors (elem 1) and on float32/int32 (elem 4) or int64 (elem 8) tensors as one table computed at lowering
 * time. The output is `n_rows` rows of `row_len` elements of `elem` bytes; row r copies input rows[5r] from
 * element rows[5r+3] with stride rows[5r+4] into its elements [rows[5r+1], rows[5r+2]) and writes the fill
 * element elsewhere (input == n_in: the whole row is fill; the fill's low `elem` bytes, little-endian). Every
 * row's first and last source element are checked against its input's size here, so a run never reads outside
 * its operands. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* elem 1: the table as runs in output order, neighbours merged where both the output and the input continue (a
 * ring buffer's Concat of T rows is then two copies, a Slice one): micro_wakeword's Concats and Slices of 2-20
 * rows cost 30-90 ns each as row walks. */
typedef struct {
    uint64_t dst, len; /* output bytes [dst, dst + len) */
    int64_t src, st;   /* input element start and stride (st 1: one memcpy) */
    uint32_t k;        /* input, or n_in: fill */
} run_t;

typedef struct {
    uint32_t n_in, elem;
    uint8_t fill;      /* elem 1 */
    uint8_t fillv[8];  /* elem > 1: the fill element's bytes */
    uint64_t row_len, n_rows;
    int64_t* rows; /* n_rows x 5: input, lo, hi, start, stride */
    run_t* runs;   /* elem 1 */
    uint64_t n_runs;
} gather_t;

static void gather_free(void* p)
{
    gather_t* t = p;
    if (t) {
        free(t->rows);
        free(t->runs);
    }
    free(t);
}

/* Append a run to runs[*n] (NULL: only count), merged into the previous one where it continues it. */
static void add_run(run_t* runs, uint64_t* n, uint32_t k, uint32_t n_in, uint64_t dst, uint64_t len, int64_t src,
                    int64_t st)
{
    if (!len) return;
    if (len == 1) st = 1;
    if (*n && runs) {
        run_t* q = &runs[*n - 1];
        if (q->k == k && q->dst + q->len == dst &&
            (k == n_in || (q->st == 1 && st == 1 && q->src + (int64_t)q->len == src))) {
            q->len += len;
            return;
        }
    }
    if (runs) runs[*n] = (run_t){dst, len, src, st, k};
    (*n)++;
}

/* The runs of an elem-1 table (runs NULL: their count, before merging as the full walk would). */
static void table_runs(const gather_t* t, run_t* runs, uint64_t* n)
{
    *n = 0;
    for (uint64_t r = 0; r < t->n_rows; r++) {
        const int64_t* d = t->rows + 5 * r;
        const uint64_t L = t->row_len, base = r * L, lo = (uint64_t)d[1], hi = (uint64_t)d[2];
        if (hi <= lo) {
            add_run(runs, n, t->n_in, t->n_in, base, L, 0, 1);
            continue;
        }
        add_run(runs, n, t->n_in, t->n_in, base, lo, 0, 1);
        add_run(runs, n, (uint32_t)d[0], t->n_in, base + lo, hi - lo, d[3], d[4]);
        add_run(runs, n, t->n_in, t->n_in, base + hi, L - hi, 0, 1);
    }
}

/* Fill elements [lo, hi) of a row of elem-byte elements. */
static void fill_elems(uint8_t* dst, uint64_t lo, uint64_t hi, const gather_t* t)
{
    for (uint64_t j = lo; j < hi; j++) memcpy(dst + j * t->elem, t->fillv, t->elem);
}

/* elem > 1: the same walk with elem-byte elements (a strided run copies element by element). */
static void gather_run_wide(const gather_t* t, uint8_t* const* ptr)
{
    uint8_t* y = ptr[t->n_in];
    const uint64_t L = t->row_len, e = t->elem;
    for (uint64_t r = 0; r < t->n_rows; r++) {
        const int64_t* d = t->rows + 5 * r;
        uint8_t* dst = y + r * L * e;
        uint64_t lo = (uint64_t)d[1], hi = (uint64_t)d[2];
        fill_elems(dst, 0, lo, t);
        fill_elems(dst, hi > lo ? hi : lo, L, t);
        if (hi <= lo) continue;
        const uint8_t* src = ptr[d[0]] + (uint64_t)d[3] * e;
        int64_t st = d[4];
        uint64_t m = hi - lo;
        if (st == 1) {
            memcpy(dst + lo * e, src, m * e);
        } else if (e == 4) {
            for (uint64_t j = 0; j < m; j++) memcpy(dst + (lo + j) * 4, src + (int64_t)j * st * 4, 4);
        } else {
            for (uint64_t j = 0; j < m; j++) memcpy(dst + (lo + j) * e, src + (int64_t)j * st * (int64_t)e, e);
        }
    }
}

static vki_status gather_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const gather_t* t = p;
    if (t->elem != 1) {
        gather_run_wide(t, ptr);
        return VKI_OK;
    }
    uint8_t* y = ptr[t->n_in];
    for (uint64_t i = 0; i < t->n_runs; i++) {
        const run_t* q = &t->runs[i];
        uint8_t* dst = y + q->dst;
        if (q->k == t->n_in) {
            memset(dst, t->fill, q->len);
            continue;
        }
        const uint8_t* src = ptr[q->k] + q->src;
        const int64_t st = q->st;
        if (st == 1) {
            memcpy(dst, src, q->len);
        } else {
            for (uint64_t j = 0; j < q->len; j++) dst[j] = src[(int64_t)j * st];
        }
    }
    return VKI_OK;
}

vki_status vki_graph_add_gather(vki_graph* g, uint32_t n_in, const uint64_t* in_elems, uint64_t row_len,
                                uint64_t n_rows, const int64_t* rows, uint64_t fill, uint32_t elem, const vki_ref* xs,
                                vki_ref y)
{
    if (n_in < 1 || n_in >= VKI_GRAPH_MAX_REFS || !in_elems || !xs || (n_rows && !rows))
        FAIL(VKI_EINVAL, "gather: 1 to %d inputs", VKI_GRAPH_MAX_REFS - 1);
    if (elem != 1 && elem != 2 && elem != 4 && elem != 8) FAIL(VKI_EINVAL, "gather: element size must be 1, 2, 4 or 8");
    if (elem < 8 && fill >> (8 * elem)) FAIL(VKI_EINVAL, "gather: fill must fit in one %u-byte element", elem);
    uint64_t out = vki_mul2(vki_mul2(row_len, n_rows), elem);
    if (!row_len || !n_rows || !out) FAIL(VKI_EINVAL, "gather: empty or too large output");
    for (uint64_t r = 0; r < n_rows; r++) {
        const int64_t* d = rows + 5 * r;
        int64_t k = d[0], lo = d[1], hi = d[2], start = d[3], st = d[4];
        if (k < 0 || k > (int64_t)n_in || lo < 0 || hi < lo || (uint64_t)hi > row_len)
            FAIL(VKI_EINVAL, "gather: row %llu has input %lld, range [%lld, %lld) of %llu", (unsigned long long)r,
                 (long long)k, (long long)lo, (long long)hi, (unsigned long long)row_len);
        if (hi == lo) continue;
        if (k == (int64_t)n_in) FAIL(VKI_EINVAL, "gather: fill row %llu copies elements", (unsigned long long)r);
        int64_t m = hi - lo;
        int64_t size = (int64_t)in_elems[k];
        if (in_elems[k] > (UINT64_C(1) << 40) || st > size || st < -size || start < 0 || start >= size)
            FAIL(VKI_EINVAL, "gather: row %llu starts at %lld (stride %lld) of a %llu-element input",
                 (unsigned long long)r, (long long)start, (long long)st, (unsigned long long)in_elems[k]);
        int64_t ast = st < 0 ? -st : st;  /* |st| <= size <= 2^40: the product below cannot overflow */
        if (ast && m - 1 > (INT64_C(1) << 62) / ast)
            FAIL(VKI_EINVAL, "gather: row %llu runs past its input", (unsigned long long)r);
        int64_t last = start + (m - 1) * st;
        if (last < 0 || last >= size)
            FAIL(VKI_EINVAL, "gather: row %llu reads element %lld of a %llu-element input", (unsigned long long)r,
                 (long long)last, (unsigned long long)in_elems[k]);
    }
    gather_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "gather: out of memory");
    t->rows = malloc(vki_mul2(n_rows, 5 * sizeof(int64_t)));
    if (!t->rows) {
        free(t);
        FAIL(VKI_ENOMEM, "gather: out of memory");
    }
    memcpy(t->rows, rows, n_rows * 5 * sizeof(int64_t));
    t->n_in = n_in;
    t->elem = elem;
    t->fill = (uint8_t)fill;
    for (uint32_t i = 0; i < 8; i++) t->fillv[i] = (uint8_t)(fill >> (8 * i));
    t->row_len = row_len;
    t->n_rows = n_rows;
    if (elem == 1) {
        uint64_t n = 0;
        table_runs(t, NULL, &n); /* an upper bound: counted unmerged */
        t->runs = malloc(vki_mul2(n ? n : 1, sizeof *t->runs));
        if (!t->runs) {
            gather_free(t);
            FAIL(VKI_ENOMEM, "gather: out of memory");
        }
        table_runs(t, t->runs, &t->n_runs);
        free(t->rows); /* the runs say everything the walk needs */
        t->rows = NULL;
    }
    /* On the heap: up to VKI_GRAPH_MAX_REFS operands. */
    vki_ref* refs = malloc((n_in + 1) * sizeof *refs);
    uint64_t* need = malloc((n_in + 1) * sizeof *need);
    if (!refs || !need) {
        free(refs);
        free(need);
        gather_free(t);
        FAIL(VKI_ENOMEM, "gather: out of memory");
    }
    for (uint32_t i = 0; i < n_in; i++) {
        refs[i] = xs[i];
        need[i] = vki_mul2(in_elems[i], elem);
        if (vki_refs_overlap(xs[i], y)) {
            free(refs);
            free(need);
            gather_free(t);
            FAIL(VKI_EINVAL, "gather: input %u overlaps the output", i);
        }
    }
    refs[n_in] = y;
    need[n_in] = out;
    vki_status st = vki_graph_push(g, "gather", gather_run, gather_free, t, n_in + 1, refs, need);
    free(refs);
    free(need);
    return st;
}
