/* The native graph's 8-bit binary elementwise operator over any numpy broadcast: com.microsoft QLinearAdd with
 * ORT's float arithmetic (vki_qlinear_add in qadd.c, the library's non-graph API too) or, given a table, any
 * binary 8-bit op as a 65536-byte lookup (QLinearMul), on canonical bytes. The output is contiguous in its
 * form's order, of `shape` (rank <= 6, collapsed by the caller); each operand is read at its own byte strides
 * per output axis (0 where it broadcasts), so equal shapes are one axis with strides 1 and 1. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#define QADD_MAX_RANK 6

typedef struct {
    uint32_t rank;
    uint64_t shape[QADD_MAX_RANK], sa[QADD_MAX_RANK], sb[QADD_MAX_RANK];
    uint64_t n, rows, len;   /* n = rows * len; len = the innermost axis */
    uint64_t per_item;       /* rows per work item (len < chunk) or chunks per row (len >= chunk): see run */
    int32_t is_signed, lo, hi;
    int32_t mul, za, zb;     /* mul: QLinearMul's arithmetic (ra: its ratio, fixed: its zero point) */
    float ra, rb, fixed;
    uint8_t* table;          /* NULL: ORT's QLinearAdd arithmetic */
} qadd_t;

/* Work is cut into pieces of at most QADD_CHUNK values of one innermost row. Signed operands (and strided
 * ones) are moved into per-thread buffers in canonical-to-logical form (XOR 0x80), added with ORT's
 * arithmetic, and the result moved back: three passes over 4 KiB that stay in L1. A piece's work is counted
 * as 8 bytes' worth per value (two conversions, two FMAs and a rounding per value: 75K values took 12.5 us on
 * one Zen 5 core). */
#define QADD_CHUNK 4096
typedef struct {
    const qadd_t* t;
    uint8_t* const* ptr;
    _Atomic int failed;
} qadd_job;

static void row_offsets(const qadd_t* t, uint64_t r, uint64_t* oa, uint64_t* ob)
{
    uint64_t a = 0, b = 0;
    for (int d = (int)t->rank - 2; d >= 0; d--) {
        uint64_t i = r % t->shape[d];
        r /= t->shape[d];
        a += i * t->sa[d];
        b += i * t->sb[d];
    }
    *oa = a;
    *ob = b;
}

/* m values of x from stride s into buf (XOR flip), or x itself when it needs no move. */
static const uint8_t* operand(const uint8_t* x, uint64_t s, size_t m, uint8_t flip, uint8_t* buf)
{
    if (s == 1 && !flip) return x;
    if (s == 0) {
        memset(buf, x[0] ^ flip, m);
    } else {
        for (size_t k = 0; k < m; k++) buf[k] = x[k * s] ^ flip;
    }
    return buf;
}

static int qadd_piece(const qadd_t* t, uint8_t* const* ptr, uint64_t r, uint64_t c0, size_t m)
{
    uint64_t oa, ob;
    row_offsets(t, r, &oa, &ob);
    const uint64_t la = t->sa[t->rank - 1], lb = t->sb[t->rank - 1];
    const uint8_t* a = ptr[0] + oa + c0 * la;
    const uint8_t* b = ptr[1] + ob + c0 * lb;
    uint8_t* y = ptr[2] + r * t->len + c0;
    if (t->table) {
        for (size_t k = 0; k < m; k++) y[k] = t->table[((size_t)a[k * la] << 8) | b[k * lb]];
        return 1;
    }
    static _Thread_local uint8_t ba[QADD_CHUNK], bb[QADD_CHUNK];  /* per thread: items run concurrently */
    const uint8_t flip = t->is_signed ? 0x80 : 0;
    const uint8_t* va = operand(a, la, m, flip, ba);
    const uint8_t* vb = operand(b, lb, m, flip, bb);
    if ((t->mul ? vki_qlinear_mul(va, vb, y, m, t->is_signed, t->za, t->zb, t->ra, t->fixed, t->lo, t->hi)
                : vki_qlinear_add(va, vb, y, m, t->is_signed, t->ra, t->rb, t->fixed, t->lo, t->hi)) != VKI_OK)
        return 0;
    if (flip)
        for (size_t k = 0; k < m; k++) y[k] ^= 0x80;
    return 1;
}

/* Rows [r0, r1) of a short innermost axis (len < QADD_SHORT, (r1 - r0) * len <= QADD_CHUNK), batched: every
 * row's operand bytes gathered into the per-thread buffers, one arithmetic call over them all, the output rows
 * contiguous. A per-row call cost more than the arithmetic: open_nsfw's (1, 7, 7, 1024) + (1, 1, 1, 1024)
 * QLinearAdds, whose CPU form has rows of 7 bytes, took 0.9 ms for 50K values on one Zen 4 core. Row offsets
 * advance as an odometer (no division per row). */
#define QADD_SHORT 64
static int qadd_rows(const qadd_t* t, uint8_t* const* ptr, uint64_t r0, uint64_t r1)
{
    static _Thread_local uint8_t ba[QADD_CHUNK], bb[QADD_CHUNK];
    const uint64_t len = t->len, la = t->sa[t->rank - 1], lb = t->sb[t->rank - 1];
    const uint8_t flip = t->is_signed ? 0x80 : 0;
    const int outer = (int)t->rank - 1;  /* axes [0, outer) index the rows */
    uint64_t idx[QADD_MAX_RANK] = {0}, oa = 0, ob = 0, r = r0;
    for (int d = outer - 1; d >= 0; d--) {
        idx[d] = r % t->shape[d];
        r /= t->shape[d];
        oa += idx[d] * t->sa[d];
        ob += idx[d] * t->sb[d];
    }
    for (uint64_t row = r0; row < r1; row++) {
        uint8_t* da = ba + (row - r0) * len;
        uint8_t* db = bb + (row - r0) * len;
        const uint8_t* a = ptr[0] + oa;
        const uint8_t* b = ptr[1] + ob;
        for (uint64_t k = 0; k < len; k++) da[k] = a[k * la] ^ flip;
        for (uint64_t k = 0; k < len; k++) db[k] = b[k * lb] ^ flip;
        for (int d = outer - 1; d >= 0; d--) {  /* the next row's offsets */
            oa += t->sa[d];
            ob += t->sb[d];
            if (++idx[d] < t->shape[d]) break;
            oa -= idx[d] * t->sa[d];
            ob -= idx[d] * t->sb[d];
            idx[d] = 0;
        }
    }
    size_t m = (size_t)((r1 - r0) * len);
    uint8_t* y = ptr[2] + r0 * len;
    if ((t->mul ? vki_qlinear_mul(ba, bb, y, m, t->is_signed, t->za, t->zb, t->ra, t->fixed, t->lo, t->hi)
                : vki_qlinear_add(ba, bb, y, m, t->is_signed, t->ra, t->rb, t->fixed, t->lo, t->hi)) != VKI_OK)
        return 0;
    if (flip)
        for (size_t k = 0; k < m; k++) y[k] ^= 0x80;
    return 1;
}

static void qadd_item(void* p, size_t item)
{
    qadd_job* j = p;
    const qadd_t* t = j->t;
    int ok = 1;
    if (t->len >= QADD_CHUNK) {  /* item = one chunk of one row (per_item chunks a row) */
        uint64_t chunks = t->per_item, r = item / chunks, c0 = (item % chunks) * QADD_CHUNK;
        size_t m = t->len - c0 < QADD_CHUNK ? (size_t)(t->len - c0) : QADD_CHUNK;
        ok = qadd_piece(t, j->ptr, r, c0, m);
    } else {  /* item = per_item whole rows */
        uint64_t r0 = (uint64_t)item * t->per_item;
        uint64_t r1 = r0 + t->per_item < t->rows ? r0 + t->per_item : t->rows;
        if (t->len < QADD_SHORT && !t->table)
            ok = qadd_rows(t, j->ptr, r0, r1);
        else
            for (uint64_t r = r0; r < r1 && ok; r++) ok = qadd_piece(t, j->ptr, r, 0, (size_t)t->len);
    }
    if (!ok) j->failed = 1;
}

static vki_status qadd_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const qadd_t* t = p;
    if (!t->n) return VKI_OK;
    qadd_job j = {t, ptr, 0};
    size_t items = t->len >= QADD_CHUNK ? (size_t)(t->rows * t->per_item)
                                        : (size_t)((t->rows + t->per_item - 1) / t->per_item);
    vki_for_items(items, t->n * 8, threads, qadd_item, &j);
    if (j.failed) FAIL(VKI_EINVAL, "qadd: bad arguments");
    return VKI_OK;
}

static void qadd_free(void* p)
{
    qadd_t* t = p;
    if (t) free(t->table);
    free(t);
}

vki_status vki_graph_add_qadd(vki_graph* g, uint32_t rank, const uint32_t* shape, const uint64_t* a_strides,
                              const uint64_t* b_strides, int32_t is_signed, int32_t mul, int32_t za, int32_t zb,
                              float ra, float rb, float fixed, int32_t lo, int32_t hi, const uint8_t* table,
                              vki_ref a, vki_ref b, vki_ref y)
{
    int32_t qlo = is_signed ? -128 : 0, qhi = is_signed ? 127 : 255;
    if (!table && (lo > hi || lo < qlo || hi > qhi)) FAIL(VKI_EINVAL, "qadd: bad clamp [%d, %d]", lo, hi);
    if (rank < 1 || rank > QADD_MAX_RANK || !shape || !a_strides || !b_strides)
        FAIL(VKI_EINVAL, "qadd: rank must be 1 to %d with shape and strides", QADD_MAX_RANK);
    qadd_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "qadd: out of memory");
    if (mul && (za < qlo || za > qhi || zb < qlo || zb > qhi)) {
        free(t);
        FAIL(VKI_EINVAL, "qadd: zero points %d, %d outside the type's range", za, zb);
    }
    *t = (qadd_t){.rank = rank, .is_signed = is_signed != 0, .lo = lo, .hi = hi, .ra = ra, .rb = rb,
                  .fixed = fixed, .mul = mul != 0 && !table, .za = za, .zb = zb};
    uint64_t n = 1, ea = 0, eb = 0;  /* ea, eb: the last byte each operand reads */
    int zero = 0;
    for (uint32_t d = 0; d < rank; d++) zero |= shape[d] == 0;
    for (uint32_t d = 0; d < rank; d++) {
        t->shape[d] = shape[d];
        t->sa[d] = a_strides[d];
        t->sb[d] = b_strides[d];
        n = vki_mul2(n, shape[d]);
        if (shape[d] && (a_strides[d] > (UINT64_C(1) << 40) || b_strides[d] > (UINT64_C(1) << 40))) {
            free(t);
            FAIL(VKI_EINVAL, "qadd: stride past 2^40 on axis %u", d);
        }
        if (shape[d]) {
            ea += (shape[d] - 1) * a_strides[d];
            eb += (shape[d] - 1) * b_strides[d];
        }
    }
    if (n == 0 && !zero) {  /* vki_mul2's overflow */
        free(t);
        FAIL(VKI_EINVAL, "qadd: shape too large");
    }
    t->n = n;
    t->len = shape[rank - 1];
    t->rows = t->len ? n / t->len : 0;
    t->per_item = t->len >= QADD_CHUNK ? (t->len + QADD_CHUNK - 1) / QADD_CHUNK : QADD_CHUNK / (t->len ? t->len : 1);
    if (table) {
        t->table = malloc(65536);
        if (!t->table) {
            free(t);
            FAIL(VKI_ENOMEM, "qadd: out of memory");
        }
        memcpy(t->table, table, 65536);
    }
    uint64_t need[3] = {n ? ea + 1 : 0, n ? eb + 1 : 0, n};
    vki_ref refs[3] = {a, b, y};
    return vki_graph_push(g, "qadd", qadd_run, qadd_free, t, 3, refs, need);
}
