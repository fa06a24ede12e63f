/* ONNX LSTM (float32, default activations Sigmoid/Tanh/Tanh, layout 0) as ONNX Runtime 1.31's CPU EP computes
 * it with constant W and R (vkinfer/cpu/lstm.py lowers to it; vkinfer/reference/lstm.py is the definition, equal
 * to ORT's bits on every case of tests/ops/test_lstm.py):
 *   - G = X W^T for every (time, batch) row, then per step G += H_prev R^T: MLAS's packed SGEMM, whose K loop
 *     runs in blocks of 256 (MLAS_SGEMM_PACKED_STRIDEK). Per output: an FMA chain from +0 over k in order within
 *     a block, each block then added to C with one rounding (the first block of X W^T is stored: beta = 0).
 *     Measured: blocks of 128, 512 or none miss ORT's bits for K >= 300 (vkinfer/reference/lstm.py).
 *   - per gate (ORT's order i, o, f, c): + P (.) C (product, then add), then + (Wb + Rb) and the clip as
 *     std::min/std::max order them (NaN -> clip), or without B: > clip -> clip, < -clip -> -clip;
 *     MLAS's logistic and tanh polynomials (fused Horner steps); C = C_prev * f + i * c unfused; H = tanh(C) * o.
 *   - sequence_lens: a finished row keeps its state and its Y rows stay 0; reverse runs each row backwards.
 * Operands: x (seq, batch, input) float32; y (seq, dirs, batch, hidden), followed with flag L_STATE (64) by Y_h
 * and Y_c (dirs, batch, hidden each); scratch (lstm_scratch floats).
 * `weights`, per direction: W^T packed in column panels of 64 (panel, k, 64; zero-padded), R^T packed per 16
 * hidden units (unit block, k, gate, 16; zero-padded), then by flags: bias Wb + Rb (4H), P (3H: i, o, f),
 * h0 (batch x H), c0 (batch x H); copied. lens: batch lengths (<= seq), copied. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

typedef float uf32 __attribute__((aligned(1), may_alias));

enum { L_REVERSE = 1, L_INPUT_FORGET = 2, L_BIAS = 4, L_PEEP = 8, L_H0 = 16, L_C0 = 32, L_STATE = 64, L_FLAGS = 127 };
#define L_STRIDE_K 256  /* MLAS_SGEMM_PACKED_STRIDEK */
#define L_ROWS 4        /* rows of X sharing one pass over W^T */
#define L_COLS 64       /* output columns per work item of X W^T */
#define L_UNITS 16      /* hidden units (x 4 gates) per work item of a step */

typedef struct {
    uint32_t seq, batch, in, hid, dirs, flags, max_len;
    float clip;
    uint64_t dir_floats;  /* floats of `w` per direction */
    float* w;
    uint32_t* lens;
} lstm_t;

/* Offsets inside one direction's block of `w`. */
static uint64_t n_cols(const lstm_t* t) { return (4 * (uint64_t)t->hid + L_COLS - 1) / L_COLS; }
static uint64_t n_units(const lstm_t* t) { return ((uint64_t)t->hid + L_UNITS - 1) / L_UNITS; }
static uint64_t off_r(const lstm_t* t) { return n_cols(t) * t->in * L_COLS; }
static uint64_t off_b(const lstm_t* t) { return off_r(t) + n_units(t) * t->hid * L_COLS; }
static uint64_t off_p(const lstm_t* t) { return off_b(t) + (t->flags & L_BIAS ? 4 * (uint64_t)t->hid : 0); }
static uint64_t off_h0(const lstm_t* t) { return off_p(t) + (t->flags & L_PEEP ? 3 * (uint64_t)t->hid : 0); }
static uint64_t off_c0(const lstm_t* t)
{
    return off_h0(t) + (t->flags & L_H0 ? (uint64_t)t->batch * t->hid : 0);
}

/* Scratch per direction: G (max_len * batch * 4H), h in two buffers (step parity), c (batch * H each). */
static uint64_t scratch_dir(const lstm_t* t)
{
    return (uint64_t)t->seq * t->batch * 4 * t->hid + 3 * (uint64_t)t->batch * t->hid;
}

/* acc[r][0..64) = the FMA chain from +0 over k in [k0, k1) of a[r][k] * b[k][0..64) (b: 64 floats per k, the
 * packed weights): MLAS's order for one K block. Fixed width so the accumulators can stay in registers. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void fma_tile(uint32_t m, const uf32* a, uint64_t lda, const float* b, uint32_t k0, uint32_t k1,
                     float (*acc)[L_COLS])
{
    float s[L_ROWS][L_COLS];
    for (uint32_t r = 0; r < L_ROWS; r++)
        for (uint32_t j = 0; j < L_COLS; j++) s[r][j] = 0.0f;
    if (m == L_ROWS) {
        for (uint32_t k = k0; k < k1; k++) {
            const float* bk = b + (uint64_t)k * L_COLS;
            for (uint32_t r = 0; r < L_ROWS; r++) {
                float av = a[r * lda + k];
                for (uint32_t j = 0; j < L_COLS; j++) s[r][j] = fmaf(av, bk[j], s[r][j]);
            }
        }
    } else if (m == 1) {  /* a step's H_prev R^T (batch 1): its own loop keeps the 64 sums in registers */
        for (uint32_t k = k0; k < k1; k++) {
            const float* bk = b + (uint64_t)k * L_COLS;
            float av = a[k];
            for (uint32_t j = 0; j < L_COLS; j++) s[0][j] = fmaf(av, bk[j], s[0][j]);
        }
    } else {
        for (uint32_t k = k0; k < k1; k++) {
            const float* bk = b + (uint64_t)k * L_COLS;
            for (uint32_t r = 0; r < m; r++) {
                float av = a[r * lda + k];
                for (uint32_t j = 0; j < L_COLS; j++) s[r][j] = fmaf(av, bk[j], s[r][j]);
            }
        }
    }
    for (uint32_t r = 0; r < m; r++)
        for (uint32_t j = 0; j < L_COLS; j++) acc[r][j] = s[r][j];
}

/* MLAS's logistic and tanh (FMA3 kernels' constants and Horner order); NaN passes through. */
static const float LOG_A[5] = {4.37031012579801e-11f, 1.15627324459942e-07f, 6.08574864600143e-05f,
                               8.51377133304701e-03f, 2.48287947061529e-01f};
static const float LOG_B[6] = {6.10247389755681e-13f, 5.76102136993427e-09f, 6.29106785017040e-06f,
                               1.70198817374094e-03f, 1.16817656904453e-01f, 9.93151921023180e-01f};
static const float TANH_P[7] = {-2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                                5.12229709037114e-08f, 1.48572235717979e-05f, 6.37261928875436e-04f,
                                4.89352455891786e-03f};
static const float TANH_Q[4] = {1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f,
                                4.89352518554385e-03f};

/* Branch-free forms (selects, no early return) so the gate loops below vectorize; the same operations in the
 * same order as MLAS: clamp, Horner by fused multiply-adds, multiply, divide; NaN passes through. */
static inline float sigm(float x)
{
    float v = x < -18.0f ? -18.0f : x;
    v = v > 18.0f ? 18.0f : v;
    float v2 = v * v;  /* Horner written out: a loop inside the unit loop kept it from vectorizing */
    float a = fmaf(fmaf(fmaf(fmaf(LOG_A[0], v2, LOG_A[1]), v2, LOG_A[2]), v2, LOG_A[3]), v2, LOG_A[4]);
    float b = fmaf(fmaf(fmaf(fmaf(fmaf(LOG_B[0], v2, LOG_B[1]), v2, LOG_B[2]), v2, LOG_B[3]), v2, LOG_B[4]), v2,
                   LOG_B[5]);
    float r = a * v / b + 0.5f;
    r = r > 0.0f ? r : 0.0f;
    return x != x ? x : r;
}

static inline float tanh_mlas(float x)
{
    float v = x < -9.0f ? -9.0f : x;
    v = v > 9.0f ? 9.0f : v;
    float v2 = v * v;
    float a = fmaf(fmaf(fmaf(fmaf(fmaf(fmaf(TANH_P[0], v2, TANH_P[1]), v2, TANH_P[2]), v2, TANH_P[3]), v2, TANH_P[4]),
                        v2, TANH_P[5]), v2, TANH_P[6]);
    float b = fmaf(fmaf(fmaf(TANH_Q[0], v2, TANH_Q[1]), v2, TANH_Q[2]), v2, TANH_Q[3]);
    float r = a * v / b;
    return x != x ? x : r;
}

/* ORT's clip_add_bias (bias present: b) or clip_ignore_bias. */
static inline float clip_bias(float g, int has_bias, float b, float clip)
{
    float x = g + b;  /* both forms, then a select: they differ on NaN (the first gives clip) */
    x = x < clip ? x : clip;
    x = -clip < x ? x : -clip;
    float y = g > clip ? clip : g < -clip ? -clip : g;
    return has_bias ? x : y;
}

/* The gates of `n` (<= L_UNITS) hidden units: gi, go, gf, gc their four gate sums (G + H_prev R^T), c the
 * previous cell state (updated in place), h the new hidden state. bias / peep: the direction's (i, o, f, c)
 * bias and (i, o, f) peepholes at the first unit, or NULL. Each step of ORT's order (see the file comment),
 * written as loops over the units so they vectorize (16 units: one AVX-512 vector per value). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void gates(uint32_t n, uint32_t hid, const uf32* gr, const float* bias, const float* peep, int input_forget,
                  float clip, uf32* c, float* h)
{
    float gi[L_UNITS], go[L_UNITS], gf[L_UNITS], gc[L_UNITS], cp[L_UNITS], bi[L_UNITS], bo[L_UNITS], bf[L_UNITS],
        bc[L_UNITS], pi[L_UNITS], po[L_UNITS], pf[L_UNITS], ig[L_UNITS], fg[L_UNITS], cg[L_UNITS], cn[L_UNITS];
    int hb = bias != NULL;
    for (uint32_t u = 0; u < L_UNITS; u++) {
        uint32_t k = u < n ? u : 0;  /* lanes past n compute on unit 0 and are not stored */
        gi[u] = gr[k];
        go[u] = gr[hid + k];
        gf[u] = gr[2 * hid + k];
        gc[u] = gr[3 * hid + k];
        cp[u] = c[k];
        bi[u] = hb ? bias[k] : 0.0f;
        bo[u] = hb ? bias[hid + k] : 0.0f;
        bf[u] = hb ? bias[2 * hid + k] : 0.0f;
        bc[u] = hb ? bias[3 * hid + k] : 0.0f;
        pi[u] = peep ? peep[k] : 0.0f;
        po[u] = peep ? peep[hid + k] : 0.0f;
        pf[u] = peep ? peep[2 * hid + k] : 0.0f;
    }
    if (peep)
        for (uint32_t u = 0; u < L_UNITS; u++) gi[u] = gi[u] + cp[u] * pi[u];
    for (uint32_t u = 0; u < L_UNITS; u++) ig[u] = sigm(clip_bias(gi[u], hb, bi[u], clip));
    if (input_forget) {
        for (uint32_t u = 0; u < L_UNITS; u++) fg[u] = 1.0f - ig[u];
    } else {
        if (peep)
            for (uint32_t u = 0; u < L_UNITS; u++) gf[u] = gf[u] + cp[u] * pf[u];
        for (uint32_t u = 0; u < L_UNITS; u++) fg[u] = sigm(clip_bias(gf[u], hb, bf[u], clip));
    }
    for (uint32_t u = 0; u < L_UNITS; u++) cg[u] = tanh_mlas(clip_bias(gc[u], hb, bc[u], clip));
    for (uint32_t u = 0; u < L_UNITS; u++) cn[u] = cp[u] * fg[u] + ig[u] * cg[u];
    if (peep)
        for (uint32_t u = 0; u < L_UNITS; u++) go[u] = go[u] + cn[u] * po[u];
    for (uint32_t u = 0; u < L_UNITS; u++) h[u] = tanh_mlas(cn[u]) * sigm(clip_bias(go[u], hb, bo[u], clip));
    for (uint32_t u = 0; u < n; u++) c[u] = cn[u];
}

typedef struct {
    const lstm_t* t;
    const uint8_t* x;
    uint8_t* y;
    uf32* s;  /* scratch: any address (an external buffer may be misaligned; UBSan saw it) */
    uint32_t step;
} lstm_job;

/* X W^T for direction item / n_col_items, its columns [64 c, 64 c + 64) (packed: k-major, 64 wide). */
static void xw_item(void* ctx, size_t item)
{
    const lstm_job* j = ctx;
    const lstm_t* t = j->t;
    uint32_t n4 = 4 * t->hid, cols = (n4 + L_COLS - 1) / L_COLS;
    uint32_t d = (uint32_t)(item / cols), n0 = (uint32_t)(item % cols) * L_COLS;
    uint32_t nw = n4 - n0 < L_COLS ? n4 - n0 : L_COLS;
    uint32_t rows = t->max_len * t->batch;
    const float* wp = t->w + d * t->dir_floats + (uint64_t)(n0 / L_COLS) * t->in * L_COLS;
    uf32* g = j->s + d * scratch_dir(t);
    const uf32* x = (const uf32*)j->x;
    float acc[L_ROWS][L_COLS];
    for (uint32_t r0 = 0; r0 < rows; r0 += L_ROWS) {
        uint32_t mr = rows - r0 < L_ROWS ? rows - r0 : L_ROWS;
        for (uint32_t k0 = 0; k0 < t->in; k0 += L_STRIDE_K) {
            uint32_t k1 = t->in - k0 < L_STRIDE_K ? t->in : k0 + L_STRIDE_K;
            fma_tile(mr, x + (uint64_t)r0 * t->in, t->in, wp, k0, k1, acc);
            for (uint32_t r = 0; r < mr; r++) {
                uf32* cr = g + (uint64_t)(r0 + r) * n4 + n0;
                if (k0)
                    for (uint32_t c = 0; c < nw; c++) cr[c] = cr[c] + acc[r][c];
                else
                    for (uint32_t c = 0; c < nw; c++) cr[c] = acc[r][c];
            }
        }
    }
}

/* One step for direction item / unit_items, hidden units [16 u, 16 u + 16): its 4 gate column ranges of
 * H_prev R^T added to G, the gates, C in place, H into the other parity buffer and into y. */
static void step_item(void* ctx, size_t item)
{
    const lstm_job* j = ctx;
    const lstm_t* t = j->t;
    uint32_t hid = t->hid, n4 = 4 * hid, units = (hid + L_UNITS - 1) / L_UNITS;
    uint32_t d = (uint32_t)(item / units), u0 = (uint32_t)(item % units) * L_UNITS;
    uint32_t uw = hid - u0 < L_UNITS ? hid - u0 : L_UNITS;
    uint32_t step = j->step;
    int reverse = (t->flags & L_REVERSE) || d == 1;
    const float* wd = t->w + d * t->dir_floats;
    const float* rp = wd + off_r(t) + (uint64_t)(u0 / L_UNITS) * hid * L_COLS;
    float acc[L_ROWS][L_COLS];
    const float* bias = t->flags & L_BIAS ? wd + off_b(t) : NULL;
    const float* peep = t->flags & L_PEEP ? wd + off_p(t) : NULL;
    uf32* g = j->s + d * scratch_dir(t);
    uf32* hb = g + (uint64_t)t->seq * t->batch * n4;
    uf32* hp = hb + (uint64_t)(step & 1) * t->batch * hid;
    uf32* hn = hb + (uint64_t)((step + 1) & 1) * t->batch * hid;
    uf32* cs = hb + 2 * (uint64_t)t->batch * hid;
    uf32* y = (uf32*)j->y;
    for (uint32_t b = 0; b < t->batch; b++) {
        uint32_t len = t->lens[b];
        if (step >= len) continue;
        uint32_t tt = reverse ? len - 1 - step : step;
        uf32* gr = g + ((uint64_t)tt * t->batch + b) * n4;
        for (uint32_t k0 = 0; k0 < hid; k0 += L_STRIDE_K) {
            uint32_t k1 = hid - k0 < L_STRIDE_K ? hid : k0 + L_STRIDE_K;
            fma_tile(1, (const uf32*)hp + (uint64_t)b * hid, hid, rp, k0, k1, acc);
            for (uint32_t q = 0; q < 4; q++)
                for (uint32_t u = 0; u < uw; u++)
                    gr[q * hid + u0 + u] = gr[q * hid + u0 + u] + acc[0][q * L_UNITS + u];
        }
        uf32* c = cs + (uint64_t)b * hid;
        uf32* yr = y + (((uint64_t)tt * t->dirs + d) * t->batch + b) * hid;
        float h[L_UNITS];
        gates(uw, hid, gr + u0, bias ? bias + u0 : NULL, peep ? peep + u0 : NULL, t->flags & L_INPUT_FORGET,
              t->clip, c + u0, h);
        for (uint32_t u = 0; u < uw; u++) {
            hn[(uint64_t)b * hid + u0 + u] = h[u];
            yr[u0 + u] = h[u];
        }
    }
}

static vki_status lstm_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const lstm_t* t = p;
    uint32_t hid = t->hid;
    lstm_job j = {t, ptr[0], ptr[2], (uf32*)ptr[1], 0};
    uint64_t y_floats = (uint64_t)t->seq * t->dirs * t->batch * hid;
    memset(ptr[2], 0, (size_t)(y_floats + (t->flags & L_STATE ? 2 * (uint64_t)t->dirs * t->batch * hid : 0)) * 4);
    for (uint32_t d = 0; d < t->dirs; d++) {
        const float* wd = t->w + d * t->dir_floats;
        uf32* hb = j.s + d * scratch_dir(t) + (uint64_t)t->seq * t->batch * 4 * hid;
        uint64_t bh = (uint64_t)t->batch * hid;
        if (t->flags & L_H0) memcpy(hb, wd + off_h0(t), bh * 4); else memset(hb, 0, bh * 4);
        if (t->flags & L_C0) memcpy(hb + 2 * bh, wd + off_c0(t), bh * 4); else memset(hb + 2 * bh, 0, bh * 4);
    }
    if (!t->max_len) return VKI_OK;
    uint32_t cols = (4 * hid + L_COLS - 1) / L_COLS, units = (hid + L_UNITS - 1) / L_UNITS;
    uint64_t xw_work = (uint64_t)t->max_len * t->batch * t->in * 4 * hid * t->dirs;
    vki_for_items((size_t)t->dirs * cols, xw_work, threads, xw_item, &j);
    uint64_t step_work = (uint64_t)t->batch * hid * 4 * hid * t->dirs;
    for (uint32_t s = 0; s < t->max_len; s++) {
        j.step = s;
        vki_for_items((size_t)t->dirs * units, step_work, threads, step_item, &j);
    }
    if (t->flags & L_STATE) {
        /* Y_h, Y_c after Y: a row's last step (len - 1) wrote H into parity buffer len & 1 and C in place; a
         * finished row is never touched again; length 0 stays 0 (ORT's Y_h, Y_c). */
        uint64_t bh = (uint64_t)t->batch * hid;
        uf32* yh = (uf32*)ptr[2] + y_floats;
        uf32* yc = yh + t->dirs * bh;
        for (uint32_t d = 0; d < t->dirs; d++) {
            const uf32* hb = j.s + d * scratch_dir(t) + (uint64_t)t->seq * t->batch * 4 * hid;
            for (uint32_t b = 0; b < t->batch; b++) {
                uint32_t len = t->lens[b];
                if (!len) continue;
                for (uint32_t k = 0; k < hid; k++) {
                    yh[(d * bh) + (uint64_t)b * hid + k] = hb[(len & 1) * bh + (uint64_t)b * hid + k];
                    yc[(d * bh) + (uint64_t)b * hid + k] = hb[2 * bh + (uint64_t)b * hid + k];
                }
            }
        }
    }
    return VKI_OK;
}

static void lstm_free(void* p)
{
    lstm_t* t = p;
    if (!t) return;
    free(t->w);
    free(t->lens);
    free(t);
}

vki_status vki_graph_add_lstm(vki_graph* g, uint32_t seq, uint32_t batch, uint32_t input, uint32_t hidden,
                              uint32_t dirs, uint32_t flags, float clip, const float* weights, const uint32_t* lens,
                              vki_ref x, vki_ref scratch, vki_ref y)
{
    if (!seq || !batch || !input || !hidden) FAIL(VKI_EINVAL, "lstm: seq, batch, input and hidden must be positive");
    if (dirs != 1 && dirs != 2) FAIL(VKI_EINVAL, "lstm: dirs must be 1 or 2, got %u", dirs);
    if (flags & ~(uint32_t)L_FLAGS) FAIL(VKI_EINVAL, "lstm: unknown flags 0x%x", flags);
    if (dirs == 2 && (flags & L_REVERSE)) FAIL(VKI_EINVAL, "lstm: reverse is for one direction");
    if (!(clip > 0.0f)) FAIL(VKI_EINVAL, "lstm: clip must be positive");
    if (!weights || !lens) FAIL(VKI_EINVAL, "lstm: weights and lens are required");
    if ((uint64_t)hidden * 4 > UINT32_MAX / 2 || (uint64_t)input > UINT32_MAX / 2)
        FAIL(VKI_EINVAL, "lstm: sizes too large");
    lstm_t tmp = {seq, batch, input, hidden, dirs, flags, 0, clip, 0, NULL, NULL};
    uint64_t dir_floats = off_c0(&tmp) + (flags & L_C0 ? (uint64_t)batch * hidden : 0);
    uint64_t need[3] = {vki_mul4(seq, batch, input, 4), vki_mul2(vki_mul2(scratch_dir(&tmp), dirs), 4),
                        vki_mul4((uint64_t)seq + (flags & L_STATE ? 2 : 0), dirs, batch, vki_mul2(hidden, 4))};
    uint64_t w_bytes = vki_mul2(vki_mul2(dir_floats, dirs), 4);
    if (!need[0] || !need[1] || !need[2] || !w_bytes || (uint64_t)seq * batch * 4 * hidden > UINT32_MAX)
        FAIL(VKI_EINVAL, "lstm: sizes too large");
    if (vki_refs_overlap(x, y) || vki_refs_overlap(scratch, y) || vki_refs_overlap(scratch, x))
        FAIL(VKI_EINVAL, "lstm: x, scratch and y must not overlap");
    uint32_t max_len = 0;
    for (uint32_t b = 0; b < batch; b++) {
        if (lens[b] > seq) FAIL(VKI_EINVAL, "lstm: lens[%u] = %u exceeds seq %u", b, lens[b], seq);
        if (lens[b] > max_len) max_len = lens[b];
    }
    lstm_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "lstm: out of memory");
    *t = tmp;
    t->max_len = max_len;
    t->dir_floats = dir_floats;
    t->w = malloc(w_bytes);
    t->lens = malloc(sizeof(uint32_t) * batch);
    if (!t->w || !t->lens) {
        lstm_free(t);
        FAIL(VKI_ENOMEM, "lstm: out of memory");
    }
    memcpy(t->w, weights, w_bytes);
    memcpy(t->lens, lens, sizeof(uint32_t) * batch);
    vki_ref refs[3] = {x, scratch, y};
    return vki_graph_push(g, "lstm", lstm_run, lstm_free, t, 3, refs, need);
}
