/* The convolution operator: argument checks, one-time weight packing for the chosen ISA, the
 * indirection buffer (QNNPACK: pointers to input pixels instead of an im2col copy; padding taps
 * point at a row of x_zp), and the parallel loop over output tiles that calls the microkernels.
 * A convolution whose whole indirection buffer would pass a bound is run by tiles of output pixels,
 * each tile's pointers built into one bounded buffer just before its microkernels read them (into the
 * merged rows' padded copy where it has one). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "threadpool.h"
#include "vkinfer_cpu.h"

struct vki_conv {
    vki_conv_desc d;         /* scalars only: the pointers are not kept */
    const vki_isa* isa;
    uint32_t oh, ow, cg, mg, ks;
    uint32_t kc;             /* bytes per indirection row: cg, or kw * c in merged-row mode */
    /* Merged-row mode (small c, group 1, horizontal dilation 1, e.g. a network's RGB stem): the kw
     * taps of one kernel row are adjacent pixels, so with a copy of the input padded left and right
     * one row pointer covers kw * c contiguous bytes: ks = kh taps of kw * c bytes instead of kh * kw
     * taps of c bytes (3-byte rows waste most of a SIMD kernel's work). */
    bool merged;
    uint8_t* xpad;           /* merged mode: n x h x (pl + w + pr) x c, refreshed every run */
    size_t wpad;
    bool depthwise;          /* group == c == m: one dw kernel call per output pixel */
    vki_dw_fn dw;
    vki_dwp_fn dwp;          /* isa->dw_u8s8 when the weights fit its range (then dw is unused) */
    vki_dwp2_fn dwp2;        /* isa->dw_u8s8_rows2 with dwp on 3x3 layers of vertical stride and dilation 1 */
    uint32_t mr, nr;         /* the igemm tile of the chosen kernel */
    void* packed;            /* igemm: [groups][nblocks] blocks; dw: one block */
    vki_igemm_fn igemm;      /* isa->igemm, or isa->igemm_u8s8 for 7-bit weights (see pack_igemm) */
    const char* kernel;      /* vki_conv_kernel(): isa->name or isa->name_u8s8 */
    size_t block_bytes;
    uint32_t nblocks;        /* NR blocks per group */
    bool blocks_outer;       /* igemm items: blocks of output channels outermost (see igemm_item) */
    uint8_t* zero;           /* kc (and at least c) bytes of x_zp: what padding taps read */
    const uint8_t** indir;   /* [pixel][tap] */
    const uint8_t* indir_x;  /* the input address the indirection was built for */
    bool tiled;              /* the indirection built per tile of tile_pixels output pixels at each run */
    size_t tile_pixels;
    vki_qparams q;
    pthread_mutex_t lock;    /* one run at a time per convolution (the indirection is shared) */
};

#define MERGE_MAX_BYTES 64  /* merged-row mode for kw * c up to this many bytes */
/* ... and for layers of at most MERGE_SMALL_C channels up to MERGE_SMALL_C_BYTES: a 1-D convolution as an STFT
 * (openWakeWord's melspectrogram: 1 channel, kernel 512, stride 160) ran its 512 one-byte taps at 81 us per
 * layer, one k step each. */
#define MERGE_SMALL_C 4
#define MERGE_SMALL_C_BYTES 4096
#define MAX_TAPS 1024  /* per-item pointer tiles live on the stack: MAX_MR * MAX_TAPS pointers */
#define MAX_MR 16
#define FAIL(code, ...) do { vki_set_error(__VA_ARGS__); return code; } while (0)

/* Tiling. One pointer per tap of every output pixel is 72 bytes a pixel for a 3x3 layer: a legal 1 GiB
 * 1x8x8x16777216 input to a 3x3 convolution asked for 9.6 GB of them (fuzz memory/e4986fdbbe). Past
 * TILE_BOUND bytes for the whole buffer, a convolution keeps one buffer of TILE_BYTES and fills it per
 * tile of output pixels at every run (the same pointers, so the same bits). 64 MiB: a 3x3 layer over
 * 932k output pixels (a 960x960 map at stride 1), well past every layer of the real models measured (the
 * largest, a 640x640 YOLO stem: 7.4 MB), which keep the buffer built once per input address. 16 MiB a
 * tile: 233k pixels of a 3x3 layer, enough work per tile that its parallel build and one fork-join per
 * tile cost little, and the pointers are still in L2/L3 when read. The test hook vki_conv_set_tiling
 * lowers both, so that small layers take the tiled path in the tests. */
#define TILE_BOUND ((uint64_t)64 << 20)
#define TILE_BYTES ((uint64_t)16 << 20)
#define BUILD_PIXELS 4096  /* output pixels per work item of a tile's parallel build */
static _Atomic uint64_t tile_bound = TILE_BOUND, tile_bytes = TILE_BYTES;

void vki_conv_set_tiling(uint64_t bound, uint64_t bytes)
{
    atomic_store(&tile_bound, bound ? bound : TILE_BOUND);
    atomic_store(&tile_bytes, bytes ? bytes : TILE_BYTES);
}

static size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

static vki_status check(const vki_conv_desc* d, uint32_t* oh, uint32_t* ow)
{
    if (!d) FAIL(VKI_EINVAL, "desc is NULL");
    if (!d->n || !d->h || !d->w || !d->c || !d->m || !d->kh || !d->kw)
        FAIL(VKI_EINVAL, "n, h, w, c, m, kh and kw must be positive");
    if (!d->sh || !d->sw || !d->dh || !d->dw) FAIL(VKI_EINVAL, "strides and dilations must be >= 1");
    if (!d->groups || d->c % d->groups || d->m % d->groups)
        FAIL(VKI_EINVAL, "groups=%u must divide c=%u and m=%u", d->groups, d->c, d->m);
    if (!d->weights || !d->w_zp || !d->bias || !d->scale) FAIL(VKI_EINVAL, "weights, w_zp, bias and scale are required");
    if (d->x_zp < 0 || d->x_zp > 255) FAIL(VKI_EINVAL, "x_zp=%d outside [0, 255]", d->x_zp);
    if (d->y_lo > d->y_hi || d->y_lo < -128 || d->y_hi > 255 || d->y_zp < -128 || d->y_zp > 255)
        FAIL(VKI_EINVAL, "y_zp/y_lo/y_hi out of range");
    uint64_t ekh = (uint64_t)(d->kh - 1) * d->dh + 1, ekw = (uint64_t)(d->kw - 1) * d->dw + 1;
    uint64_t ph = (uint64_t)d->h + d->pt + d->pb, pw = (uint64_t)d->w + d->pl + d->pr;
    if (ekh > ph || ekw > pw) FAIL(VKI_EINVAL, "kernel (dilated %llux%llu) larger than padded input %llux%llu",
                                   (unsigned long long)ekh, (unsigned long long)ekw, (unsigned long long)ph,
                                   (unsigned long long)pw);
    /* The output size in 64 bits first: a padded input of up to 3 * 2^32 rows would wrap a uint32 quotient into
     * a small, meaningless output (pads of 2^62 once reached here narrowed to 32 bits, 2026-11). */
    uint64_t oh64 = (ph - ekh) / d->sh + 1, ow64 = (pw - ekw) / d->sw + 1;
    if (oh64 > INT32_MAX || ow64 > INT32_MAX)
        FAIL(VKI_EINVAL, "output %llux%llu does not fit the kernels' 32-bit counts", (unsigned long long)oh64,
             (unsigned long long)ow64);
    *oh = (uint32_t)oh64;
    *ow = (uint32_t)ow64;
    /* First: it bounds kh * kw, so kh * kw * c below cannot overflow. */
    if ((uint64_t)d->kh * d->kw > MAX_TAPS)
        FAIL(VKI_EINVAL, "kernel %ux%u has more than %d taps", d->kh, d->kw, MAX_TAPS);
    /* Keep every byte offset well inside size_t and every count inside int32 for the kernels (each factor is
     * below 2^32, so the products are checked two at a time and cannot overflow 64 bits). */
    uint64_t in = (uint64_t)d->n * d->h, out = (uint64_t)d->n * *oh;
    in = in > (1ull << 31) ? in : in * d->w;
    in = in > (1ull << 31) ? in : in * d->c;
    out = out > (1ull << 31) ? out : out * *ow;
    out = out > (1ull << 31) ? out : out * d->m;
    if (in > (1ull << 31) || out > (1ull << 31) || (uint64_t)d->kh * d->kw * d->c > (1ull << 24))
        FAIL(VKI_EINVAL, "tensor too large for the CPU fallback (input %ux%ux%ux%u, output %ux%ux%ux%u)", d->n, d->h,
             d->w, d->c, d->n, *oh, *ow, d->m);
    for (uint32_t i = 0; i < d->m; i++) {
        int32_t z = d->w_zp[i];
        if (d->w_signed ? (z < -128 || z > 127) : (z < 0 || z > 255))
            FAIL(VKI_EINVAL, "w_zp[%u]=%d out of range for %s weights", i, z, d->w_signed ? "int8" : "uint8");
        float s = d->scale[i];
        if (!(s >= 0.0f) || s > 3.4e38f) FAIL(VKI_EINVAL, "scale[%u] is not finite and >= 0", i);
    }
    return VKI_OK;
}

static int32_t weight(const vki_conv_desc* d, uint32_t m, uint32_t ci, uint32_t cg, uint32_t t)
{
    size_t i = ((size_t)m * cg + ci) * d->kh * d->kw + t;
    int32_t v = d->w_signed ? (int32_t)(int8_t)d->weights[i] : (int32_t)d->weights[i];
    return v - d->w_zp[m];
}

/* The u8s8 path (internal.h) applies when the variant has one for this kind of layer, every (w - w_zp)
 * lies in the variant's [u8s8_wmin, u8s8_wmax] and $VKINFER_CPU_U8S8 is not "0" (a switch for A/B
 * measurements). */
static bool use_u8s8(const vki_conv* cv, const vki_conv_desc* d)
{
    const vki_isa* isa = cv->isa;
    if (cv->depthwise ? !(isa->dw_u8s8 && isa->dw_u8s8_pack) : !isa->igemm_u8s8) return false;
    const char* env = getenv("VKINFER_CPU_U8S8");
    if (env && strcmp(env, "0") == 0) return false;
    int32_t lo = isa->u8s8_wmin, hi = isa->u8s8_wmax;
    if (lo == 0 && hi == 0) lo = -VKI_U8S8_WMAX, hi = VKI_U8S8_WMAX;
    size_t per_m = (size_t)cv->cg * d->kh * d->kw;
    for (uint32_t m = 0; m < d->m; m++)
        for (size_t i = 0; i < per_m; i++) {
            size_t j = (size_t)m * per_m + i;
            int32_t v = (d->w_signed ? (int32_t)(int8_t)d->weights[j] : (int32_t)d->weights[j]) - d->w_zp[m];
            if (v < lo || v > hi) return false;
        }
    return true;
}

/* bias - (x_zp - xoff) * wsum modulo 2^32, as the u8s8 kernels' wrapping int32 sums need it. */
static int32_t u8s8_bias(int32_t bias, int32_t x_zp, int32_t xoff, int64_t wsum)
{
    return (int32_t)(uint32_t)((uint64_t)(uint32_t)bias - (uint64_t)((int64_t)(x_zp - xoff) * wsum));
}

static vki_status pack_igemm(vki_conv* cv, const vki_conv_desc* d)
{
    const vki_isa* isa = cv->isa;
    const bool u8s8 = use_u8s8(cv, d);
    /* At most 16 output channels per group: the variant's narrow u8s8 tile, if it has one (AVX-512 VNNI: 14 x 16
     * where 7 x 32 leaves half its accumulators on zero weights). */
    const bool narrow = u8s8 && isa->igemm_u8s8_narrow && isa->u8s8_mr_narrow && cv->mg <= 16;
    cv->mr = narrow ? isa->u8s8_mr_narrow : u8s8 && isa->u8s8_mr ? isa->u8s8_mr : isa->mr;
    cv->nr = u8s8 && isa->u8s8_nr ? isa->u8s8_nr : isa->nr;
    if (cv->mr > MAX_MR) FAIL(VKI_EINVAL, "variant %s has MR > %d", isa->name, MAX_MR);
    size_t nr = cv->nr, kr = u8s8 ? VKI_U8S8_KR : isa->kr, kcg = round_up(cv->kc, kr) / kr;
    size_t wbytes = u8s8 ? 1 : 2;
    cv->igemm = narrow ? isa->igemm_u8s8_narrow : u8s8 ? isa->igemm_u8s8 : isa->igemm;
    cv->kernel = u8s8 ? isa->name_u8s8 : isa->name;
    cv->nblocks = (uint32_t)((cv->mg + nr - 1) / nr);
    cv->block_bytes = round_up(nr * 8 + (size_t)cv->ks * kcg * nr * kr * wbytes, 64);
    size_t total = cv->block_bytes * cv->nblocks * d->groups;
    cv->blocks_outer = total > (size_t)d->n * cv->oh * cv->ow * d->m + (size_t)d->n * d->h * d->w * d->c;
    cv->packed = aligned_alloc(64, total);
    if (!cv->packed) FAIL(VKI_ENOMEM, "out of memory packing %zu bytes of weights", total);
    memset(cv->packed, 0, total);
    for (uint32_t g = 0; g < d->groups; g++)
        for (uint32_t b = 0; b < cv->nblocks; b++) {
            char* blk = (char*)cv->packed + ((size_t)g * cv->nblocks + b) * cv->block_bytes;
            int32_t* bias = (int32_t*)blk;
            float* scale = (float*)(bias + nr);
            int16_t* wt = (int16_t*)(scale + nr);
            int8_t* wt8 = (int8_t*)(scale + nr);
            for (size_t n = 0; n < nr; n++) {
                uint32_t mo = b * (uint32_t)nr + (uint32_t)n;  /* channel within group */
                if (mo >= cv->mg) break;
                uint32_t m = g * cv->mg + mo;
                scale[n] = d->scale[m];
                int64_t wsum = 0;
                for (uint32_t t = 0; t < cv->ks; t++)
                    for (uint32_t k = 0; k < cv->kc; k++) {  /* [ks][kc/KR][NR][KR] */
                        /* Merged rows: tap t is kernel row t and byte k is (kw = k / c, channel k % c). */
                        uint32_t ci = cv->merged ? k % d->c : k, tap = cv->merged ? t * d->kw + k / d->c : t;
                        int32_t v = weight(d, m, ci, cv->cg, tap);
                        size_t at = ((t * kcg + k / kr) * nr + n) * kr + k % kr;
                        if (u8s8) wt8[at] = (int8_t)v;
                        else wt[at] = (int16_t)v;
                        wsum += v;
                    }
                bias[n] = u8s8 ? u8s8_bias(d->bias[m], d->x_zp, isa->u8s8_xoff, wsum) : d->bias[m];
            }
        }
    return VKI_OK;
}

/* The u8s8 depthwise block: the variant packs its own layout from plain arrays made here. */
static vki_status pack_dw_u8s8(vki_conv* cv, const vki_conv_desc* d)
{
    const vki_isa* isa = cv->isa;
    size_t c = d->c, ks = cv->ks;
    int16_t* wt = malloc(ks * c * sizeof(*wt));
    int32_t* bias = malloc(c * sizeof(*bias));
    if (!wt || !bias) {
        free(wt), free(bias);
        FAIL(VKI_ENOMEM, "out of memory packing depthwise weights");
    }
    for (uint32_t ch = 0; ch < c; ch++) {
        int64_t wsum = 0;
        for (uint32_t t = 0; t < ks; t++) wsum += wt[t * c + ch] = (int16_t)weight(d, ch, 0, 1, t);
        bias[ch] = u8s8_bias(d->bias[ch], d->x_zp, isa->u8s8_xoff, wsum);
    }
    cv->block_bytes = isa->dw_u8s8_pack(c, ks, wt, bias, d->scale, NULL);
    cv->packed = aligned_alloc(64, round_up(cv->block_bytes, 64));
    if (cv->packed) {
        memset(cv->packed, 0, round_up(cv->block_bytes, 64));
        isa->dw_u8s8_pack(c, ks, wt, bias, d->scale, cv->packed);
    }
    free(wt), free(bias);
    if (!cv->packed) FAIL(VKI_ENOMEM, "out of memory packing depthwise weights");
    cv->dwp = isa->dw_u8s8;
    /* Two rows at once on 3x3 stride-1 layers of 64 channels or more (in L1, Zen 5: 144 channels 61 -> 67-71
     * GMAC/s, 960 67 -> 74-79; 32 channels, all in 2-pixel vectors, measured 20% slower that way). */
    if (isa->dw_u8s8_rows2 && d->kh == 3 && d->kw == 3 && d->sh == 1 && d->dh == 1 && c >= 64 && !cv->tiled)
        cv->dwp2 = isa->dw_u8s8_rows2;
    cv->kernel = isa->name_u8s8;
    return VKI_OK;
}

static vki_status pack_dw(vki_conv* cv, const vki_conv_desc* d)
{
    if (use_u8s8(cv, d)) return pack_dw_u8s8(cv, d);
    size_t cp = round_up(d->c, cv->isa->cr);
    cv->block_bytes = cp * 8 + (size_t)cv->ks * cp * 2;
    cv->packed = aligned_alloc(64, round_up(cv->block_bytes, 64));
    if (!cv->packed) FAIL(VKI_ENOMEM, "out of memory packing depthwise weights");
    memset(cv->packed, 0, round_up(cv->block_bytes, 64));
    int32_t* bias = (int32_t*)cv->packed;
    float* scale = (float*)(bias + cp);
    int16_t* wt = (int16_t*)(scale + cp);
    for (uint32_t ch = 0; ch < d->c; ch++) {
        bias[ch] = d->bias[ch];
        scale[ch] = d->scale[ch];
        for (uint32_t t = 0; t < cv->ks; t++) wt[t * cp + ch] = (int16_t)weight(d, ch, 0, 1, t);
    }
    return VKI_OK;
}

vki_status vki_conv_create(const vki_conv_desc* desc, vki_conv** out)
{
    uint32_t oh, ow;
    if (!out) FAIL(VKI_EINVAL, "out is NULL");
    *out = NULL;
    vki_status st = check(desc, &oh, &ow);
    if (st != VKI_OK) return st;
    if (desc->isa < -1) FAIL(VKI_EINVAL, "isa must be -1 (best available) or a variant index, got %d", desc->isa);
    int32_t index = desc->isa == -1 ? vki_isa_default() : desc->isa;
    if (index < 0) return VKI_EUNSUPPORTED;  /* vki_isa_default set the message */
    const vki_isa* isa = vki_isa_get(index);
    if (isa && isa->mr > MAX_MR) FAIL(VKI_EINVAL, "variant %s has MR > %d", isa->name, MAX_MR);
    if (!isa) FAIL(VKI_EINVAL, "isa index %d out of range (0..%d)", desc->isa, vki_isa_count() - 1);
    if (!isa->available()) FAIL(VKI_EUNSUPPORTED, "this CPU cannot run the %s variant", isa->name);

    vki_conv* cv = calloc(1, sizeof(*cv));
    if (!cv) FAIL(VKI_ENOMEM, "out of memory");
    cv->d = *desc;
    cv->d.weights = NULL, cv->d.w_zp = NULL, cv->d.bias = NULL, cv->d.scale = NULL;
    cv->d.isa = index;
    cv->isa = isa;
    cv->oh = oh, cv->ow = ow;
    cv->cg = desc->c / desc->groups, cv->mg = desc->m / desc->groups, cv->ks = desc->kh * desc->kw;
    cv->depthwise = desc->groups == desc->c && desc->groups == desc->m;
    cv->merged = !cv->depthwise && desc->groups == 1 && desc->dw == 1 && desc->kw > 1 &&
                 ((size_t)desc->c * desc->kw <= MERGE_MAX_BYTES ||
                  (desc->c <= MERGE_SMALL_C && (size_t)desc->c * desc->kw <= MERGE_SMALL_C_BYTES));
    /* Merged rows only while their padded copy of the whole input stays within TILE_BOUND (merged is a faster layout
     * of the same sums: e4986fdbbe's 1 GiB input would take 1 GiB more); then tiled past the bound (read once, at
     * creation). A merged layer may be tiled too: a 4K RGB stem (25 MB copy, 199 MB of row pointers). */
    const uint64_t bound = atomic_load(&tile_bound), pixels = (uint64_t)desc->n * oh * ow;
    const uint64_t xpad_bytes = (uint64_t)desc->n * desc->h * ((uint64_t)desc->pl + desc->w + desc->pr) * desc->c;
    if (cv->merged && xpad_bytes > TILE_BOUND) cv->merged = false;
    cv->kc = cv->merged ? desc->kw * desc->c : cv->cg;
    if (cv->merged) cv->ks = desc->kh;
    cv->tiled = pixels * cv->ks * sizeof(*cv->indir) > bound;
    if (cv->tiled) {
        size_t tp = (size_t)(atomic_load(&tile_bytes) / (cv->ks * sizeof(*cv->indir)));
        cv->tile_pixels = tp >= 64 ? tp / 64 * 64 : tp ? tp : 1;  /* whole igemm chunks where it can */
    }
    cv->dw = cv->ks == 9 ? isa->dw9 : cv->ks == 25 ? isa->dw25 : isa->dw_any;
    cv->q.x_zp = desc->x_zp;
    cv->q.y_zp = desc->y_zp;
    cv->q.fmin = (float)(desc->y_lo - desc->y_zp);
    cv->q.fmax = (float)(desc->y_hi - desc->y_zp);
    pthread_mutex_init(&cv->lock, NULL);
    size_t zero_bytes = cv->kc > desc->c ? cv->kc : desc->c;
    cv->zero = malloc(zero_bytes);
    st = cv->zero ? (cv->depthwise ? pack_dw(cv, desc) : pack_igemm(cv, desc)) : VKI_ENOMEM;
    if (st != VKI_OK) {
        if (!cv->zero) vki_set_error("out of memory");
        vki_conv_destroy(cv);
        return st;
    }
    memset(cv->zero, desc->x_zp, zero_bytes);
    if (cv->merged) {
        cv->wpad = (size_t)desc->pl + desc->w + desc->pr;
        size_t bytes = (size_t)desc->n * desc->h * cv->wpad * desc->c;
        cv->xpad = malloc(bytes);
        if (!cv->xpad) {
            vki_conv_destroy(cv);
            FAIL(VKI_ENOMEM, "out of memory for the padded input");
        }
        memset(cv->xpad, desc->x_zp, bytes);
    }
    *out = cv;
    return VKI_OK;
}

void vki_conv_output_shape(const vki_conv* cv, uint32_t* oh, uint32_t* ow)
{
    if (cv && oh) *oh = cv->oh;
    if (cv && ow) *ow = cv->ow;
}

const char* vki_conv_isa(const vki_conv* cv) { return cv ? cv->isa->name : NULL; }

uint64_t vki_conv_tile_pixels(const vki_conv* cv) { return cv && cv->tiled ? cv->tile_pixels : 0; }

const char* vki_conv_kernel(const vki_conv* cv) { return cv ? (cv->kernel ? cv->kernel : cv->isa->name) : NULL; }

void vki_conv_destroy(vki_conv* cv)
{
    if (!cv) return;
    free(cv->packed);
    free(cv->zero);
    free(cv->indir);
    free(cv->xpad);
    pthread_mutex_destroy(&cv->lock);
    free(cv);
}

/* Pointers to the input pixel under every tap of output pixels [p0, p1) into p (merged mode: x is the padded
 * copy, one pointer per kernel row, kw * c bytes from it). */
static void build_range(const vki_conv* cv, const uint8_t* x, size_t p0, size_t p1, const uint8_t** p)
{
    /* Everything in locals: the stores through p may alias any pointer-typed field as far as the compiler knows. */
    const int64_t h = cv->d.h, w = cv->d.w, sh = cv->d.sh, sw = cv->d.sw, dh = cv->d.dh, dw = cv->d.dw;
    const int64_t pt = cv->d.pt, pl = cv->d.pl;
    const uint32_t kh = cv->d.kh, kw = cv->d.kw;
    const size_t c = cv->d.c, ow = cv->ow, oh = cv->oh, row = cv->merged ? cv->wpad : (size_t)w;
    const uint8_t* const zero = cv->zero;
    size_t ox0 = p0 % ow, oy = p0 / ow % oh, n = p0 / ow / oh;
    const uint8_t* rows[MAX_TAPS];  /* this output row's input row under each kernel row, or NULL (padding) */
    for (size_t q = p0; q < p1; ox0 = 0) {  /* a run of one output row per step */
        const size_t ox1 = ow - ox0 < p1 - q ? ow : ox0 + (p1 - q);
        const uint8_t* const img = x + n * (size_t)h * row * c;
        for (uint32_t ky = 0; ky < kh; ky++) {
            int64_t iy = (int64_t)oy * sh - pt + (int64_t)ky * dh;
            rows[ky] = iy >= 0 && iy < h ? img + (size_t)iy * row * c : NULL;
        }
        if (cv->merged) {
            for (size_t ox = ox0; ox < ox1; ox++)
                for (uint32_t ky = 0; ky < kh; ky++) *p++ = rows[ky] ? rows[ky] + ox * (size_t)sw * c : zero;
        } else {
            for (size_t ox = ox0; ox < ox1; ox++) {
                const int64_t ix0 = (int64_t)ox * sw - pl;
                const bool inside = ix0 >= 0 && ix0 + (int64_t)(kw - 1) * dw < w;  /* every column reads input */
                for (uint32_t ky = 0; ky < kh; ky++) {
                    const uint8_t* r = rows[ky];
                    if (r && inside) {
                        const uint8_t* a = r + (size_t)ix0 * c;
                        for (uint32_t kx = 0; kx < kw; kx++) *p++ = a + (size_t)kx * dw * c;
                    } else {
                        for (uint32_t kx = 0; kx < kw; kx++) {
                            int64_t ix = ix0 + (int64_t)kx * dw;
                            *p++ = r && ix >= 0 && ix < w ? r + (size_t)ix * c : zero;
                        }
                    }
                }
            }
        }
        q += ox1 - ox0;
        if (++oy == oh) oy = 0, n++;
    }
}

/* The whole indirection buffer (untiled layers): built once per input address. */
static vki_status build_indirection(vki_conv* cv, const uint8_t* x)
{
    size_t pixels = (size_t)cv->d.n * cv->oh * cv->ow;
    if (!cv->indir) {
        cv->indir = malloc(pixels * cv->ks * sizeof(*cv->indir));
        if (!cv->indir) FAIL(VKI_ENOMEM, "out of memory for the indirection buffer");
    }
    build_range(cv, x, 0, pixels, cv->indir);
    cv->indir_x = x;
    return VKI_OK;
}

typedef struct {
    const vki_conv* cv;
    const uint8_t* x;
    size_t p0, p1;  /* the tile's output pixels; item i builds [p0 + i * BUILD_PIXELS, ...) */
} build_ctx;

static void build_item(void* arg, size_t item)
{
    const build_ctx* b = arg;
    size_t a = b->p0 + item * BUILD_PIXELS, e = a + BUILD_PIXELS < b->p1 ? a + BUILD_PIXELS : b->p1;
    build_range(b->cv, b->x, a, e, b->cv->indir + (a - b->p0) * b->cv->ks);
}

typedef struct {
    vki_conv* cv;
    uint8_t* y;
    size_t pixels, tiles;
    size_t run;  /* depthwise: output pixels per work item */
} run_ctx;

/* One work item of the igemm path: one NR block of one group over a chunk of MR-row tiles.
 * The thread pool gives each thread a contiguous range of items, so the outer index decides what a
 * thread reads. Chunks of rows outermost: each thread has a band of output rows, the same band it
 * wrote in the layer before (in its own L2), and reads all the weights. Blocks outermost: each reads
 * half the weights and all the rows. Layers whose packed weights outweigh their activations (the late
 * 7x7 and 14x14 ones of MobileNetV2) take blocks outermost; the rest rows. On one thread the two
 * orders measured the same on MobileNetV2. */
#define TILE_CHUNK_ROWS 64
static void igemm_item(void* arg, size_t item)
{
    run_ctx* r = arg;
    vki_conv* cv = r->cv;
    size_t mr = cv->mr, ks = cv->ks, chunk_tiles = (TILE_CHUNK_ROWS + mr - 1) / mr;
    size_t nb = cv->nblocks * cv->d.groups, nchunks = (r->tiles + chunk_tiles - 1) / chunk_tiles;
    size_t chunk = cv->blocks_outer ? item % nchunks : item / nb, gb = cv->blocks_outer ? item / nchunks : item % nb;
    size_t g = gb / cv->nblocks, b = gb % cv->nblocks;
    size_t n0 = b * cv->nr, nc = cv->mg - n0 < cv->nr ? cv->mg - n0 : cv->nr;
    size_t off = g * cv->cg;  /* this group's input channels within each pixel (zero row has c bytes) */
    const void* w = (const char*)cv->packed + (g * cv->nblocks + b) * cv->block_bytes;
    const uint8_t* ap[mr * ks];  /* sized to the layer: at most MAX_MR * MAX_TAPS pointers (128 KiB) */
    size_t t1 = (chunk + 1) * chunk_tiles < r->tiles ? (chunk + 1) * chunk_tiles : r->tiles;
    for (size_t tile = chunk * chunk_tiles; tile < t1; tile++) {
        size_t p0 = tile * mr, rows = r->pixels - p0 < mr ? r->pixels - p0 : mr;
        for (size_t t = 0; t < ks; t++)
            for (size_t i = 0; i < mr; i++)
                ap[t * mr + i] = cv->indir[(p0 + (i < rows ? i : rows - 1)) * ks + t] + off;
        cv->igemm(rows, nc, cv->kc, ks, ap, w, r->y + p0 * cv->d.m + g * cv->mg + n0, cv->d.m, &cv->q);
    }
}

/* One work item of the depthwise path: a run of output pixels, 16 at most, and on several threads
 * short enough for 16 items per thread (a multiple of 4: the u8s8 kernels put up to 4 pixels in a
 * vector). 16-pixel items left 7x7 and 14x14 layers with 4 and 13 items: 2 threads scaled 1.5x there. */
#define DW_PIXELS 16
static size_t dw_run_pixels(size_t pixels, uint32_t threads)
{
    if (threads <= 1) return DW_PIXELS;
    size_t run = (pixels + 16 * (size_t)threads - 1) / (16 * (size_t)threads);
    run = (run + 3) / 4 * 4;
    return run < 4 ? 4 : run > DW_PIXELS ? DW_PIXELS : run;
}

static void dw_item(void* arg, size_t item)
{
    run_ctx* r = arg;
    vki_conv* cv = r->cv;
    size_t p0 = item * r->run, p1 = (item + 1) * r->run < r->pixels ? (item + 1) * r->run : r->pixels;
    if (cv->dwp) {
        cv->dwp(p1 - p0, cv->d.c, cv->ks, cv->indir + p0 * cv->ks, cv->packed, r->y + p0 * cv->d.c, cv->d.c, &cv->q);
        return;
    }
    for (size_t p = p0; p < p1; p++)
        cv->dw(cv->d.c, cv->ks, cv->indir + p * cv->ks, cv->packed, r->y + p * cv->d.c, &cv->q);
}

/* One work item of a 3x3 stride-1 depthwise on the two-row kernel: a run of columns in a band of two output
 * rows (the last band of an odd height has one). Bands are the outer index (the pool's home ranges are
 * bands of rows, as in the other paths). */
static void dw2_item(void* arg, size_t item)
{
    run_ctx* r = arg;
    vki_conv* cv = r->cv;
    const size_t ow = cv->ow, oh = cv->oh, c = cv->d.c, runs = (ow + r->run - 1) / r->run;
    const size_t band = item / runs, x0 = item % runs * r->run, x1 = x0 + r->run < ow ? x0 + r->run : ow;
    const size_t bands = (oh + 1) / 2, n = band / bands, oy = band % bands * 2;
    const size_t p0 = ((size_t)n * oh + oy) * ow + x0;
    const uint8_t* const* a = cv->indir + p0 * 9;
    uint8_t* y = r->y + p0 * c;
    if (oy + 1 < oh) cv->dwp2(x1 - x0, c, a, ow * 9, cv->packed, y, c, ow * c, &cv->q);
    else cv->dwp(x1 - x0, c, 9, a, cv->packed, y, c, &cv->q);
}

/* The microkernels over output pixels [0, pixels) of r->y, reading cv->indir from its start: the whole output, or
 * one tile of a tiled layer (r->y and cv->indir then start at the tile's first pixel; no two-row depthwise). */
static void run_pixels(run_ctx* r, uint32_t threads)
{
    vki_conv* cv = r->cv;
    if (cv->depthwise && cv->dwp2) {
        const size_t bands = (size_t)cv->d.n * ((cv->oh + 1) / 2);
        r->run = dw_run_pixels(bands * cv->ow, threads);
        vki_parallel_for(bands * ((cv->ow + r->run - 1) / r->run), threads, dw2_item, r);
    } else if (cv->depthwise) {
        r->run = dw_run_pixels(r->pixels, threads);
        vki_parallel_for((r->pixels + r->run - 1) / r->run, threads, dw_item, r);
    } else {
        r->tiles = (r->pixels + cv->mr - 1) / cv->mr;
        size_t chunk_tiles = (TILE_CHUNK_ROWS + cv->mr - 1) / cv->mr;
        size_t nchunks = (r->tiles + chunk_tiles - 1) / chunk_tiles;
        vki_parallel_for(nchunks * cv->nblocks * cv->d.groups, threads, igemm_item, r);
    }
}

/* A tiled layer: each tile's pointers built (in parallel) into the one tile buffer, then its microkernels. */
static vki_status run_tiled(vki_conv* cv, const uint8_t* x, uint8_t* y, uint32_t threads)
{
    const size_t pixels = (size_t)cv->d.n * cv->oh * cv->ow, m = cv->d.m;
    if (!cv->indir) {
        cv->indir = malloc(cv->tile_pixels * cv->ks * sizeof(*cv->indir));
        if (!cv->indir) FAIL(VKI_ENOMEM, "out of memory for the indirection tile");
    }
    for (size_t p0 = 0; p0 < pixels; p0 += cv->tile_pixels) {
        size_t p1 = pixels - p0 < cv->tile_pixels ? pixels : p0 + cv->tile_pixels;
        build_ctx b = {cv, x, p0, p1};
        vki_parallel_for((p1 - p0 + BUILD_PIXELS - 1) / BUILD_PIXELS, threads, build_item, &b);
        run_ctx r = {cv, y + p0 * m, p1 - p0, 0, 0};
        run_pixels(&r, threads);
    }
    return VKI_OK;
}

vki_status vki_conv_run(vki_conv* cv, const uint8_t* x, uint8_t* y, uint32_t threads)
{
    if (!cv || !x || !y) FAIL(VKI_EINVAL, "conv, x and y must not be NULL");
    if (threads == 0) threads = vki_default_threads();
    pthread_mutex_lock(&cv->lock);
    vki_status st = VKI_OK;
    if (cv->merged) {
        /* Copy the rows into the padded buffer (its borders hold x_zp from creation); the
         * indirection then points into this buffer, so it is built only once. */
        const vki_conv_desc* d = &cv->d;
        size_t row = (size_t)d->w * d->c;
        for (size_t r = 0; r < (size_t)d->n * d->h; r++)
            memcpy(cv->xpad + (r * cv->wpad + d->pl) * d->c, x + r * row, row);
    }
    if (cv->tiled) {
        st = run_tiled(cv, cv->merged ? cv->xpad : x, y, threads);
        pthread_mutex_unlock(&cv->lock);
        return st;
    }
    if (cv->merged) {
        if (cv->indir_x != cv->xpad) st = build_indirection(cv, cv->xpad);
    } else if (cv->indir_x != x) {
        st = build_indirection(cv, x);
    }
    if (st == VKI_OK) {
        run_ctx r = {cv, y, (size_t)cv->d.n * cv->oh * cv->ow, 0, 0};
        run_pixels(&r, threads);
    }
    pthread_mutex_unlock(&cv->lock);
    return st;
}

/* The default when a run asks for 0 threads. It is not decided here: the Python package computes
 * it (vkinfer/cpu/threads.py: CPU affinity, fastest cluster, cgroup quota) and sets it once when it
 * loads the library, so there is one policy. 1 until then, for standalone C users: threads they
 * did not ask for could oversubscribe a core they share. Atomic: any thread may run or set it. */
static _Atomic uint32_t default_threads = 1;

vki_status vki_set_default_threads(uint32_t threads)
{
    if (threads < 1 || threads > VKI_MAX_THREADS)
        FAIL(VKI_EINVAL, "default threads=%u outside [1, %u]", threads, (unsigned)VKI_MAX_THREADS);
    atomic_store(&default_threads, threads);
    return VKI_OK;
}

uint32_t vki_get_default_threads(void) { return atomic_load(&default_threads); }

/* $VKINFER_CPU_THREADS is read on each call (the header's contract, so a value set at run time
 * takes effect); anything but a whole number in [1, VKI_MAX_THREADS] is ignored here, since C
 * cannot raise: the Python package rejects it with an error before it gets here. */
uint32_t vki_default_threads(void)
{
    const char* env = getenv("VKINFER_CPU_THREADS");
    if (env && *env) {
        char* end = NULL;
        long v = strtol(env, &end, 10);
        while (end && (*end == ' ' || *end == '\t' || *end == '\n')) end++;
        if (end != env && end && *end == '\0' && v >= 1 && v <= VKI_MAX_THREADS) return (uint32_t)v;
    }
    return vki_get_default_threads();
}
