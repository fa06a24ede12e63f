#version 450
// Quantized GEMM with fused requantization: Y[r, n] = requant(sum_k A[r, k] * B[n, k] + fold terms).
// Serves QLinearMatMul and 1x1 convolution (any stride, no padding, group 1): row r of A is
// output pixel (r / OW, r % OW) read at input pixel (oh * SH, ow * SW), so no im2col copy.
// A is 4 bytes per word along K (NHWC with channels padded to 4 with zero bytes); B is packed once
// at prepare time as [column][K/4] words. Zero points are folded: the shader accumulates raw
// products and row sums, and Q holds bias - a_zp * sum_k B + K * a_zp * b_zp per column.
// Tiles (vkinfer/vulkan/gemm_tiles.py TILES): a workgroup of WX x WY invocations computes WY * RI rows x
// WX * CW * 4 columns, each invocation RI rows x CW output words (register blocking); all four are
// specialization constants kept in the push-shapes variant, so one SPIR-V serves every tile.
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x_id = 15, local_size_y_id = 16) in;  // WX, WY
layout(constant_id = 0) const int K4 = 1;       // A words per row
layout(constant_id = 1) const int N4 = 1;       // output words per row (N padded to 4)
layout(constant_id = 2) const int ROWS = 1;     // rows per batch
layout(constant_id = 3) const int A_BATCH = 0;  // A words between batches
layout(constant_id = 4) const int B_BATCH = 0;  // B words between batches (0: one shared B)
layout(constant_id = 5) const int OW = 1;
layout(constant_id = 6) const int IW = 1;
layout(constant_id = 7) const int SH = 1;
layout(constant_id = 8) const int SW = 1;
layout(constant_id = 9) const bool A_SIGNED = false;
layout(constant_id = 10) const bool B_SIGNED = false;
layout(constant_id = 11) const bool HAS_BZP = true;
layout(constant_id = 12) const int N = 1;        // real columns
layout(constant_id = 13) const int Q_BATCH = 0;  // Q entries between batches (0: shared)
// Stage tiles through shared memory (desktop GPUs) or read A and B straight from the buffers
// (CPU implementations and mobile GPUs, where shared memory is ordinary cached memory and the
// barriers only cost): see gemm_shared_tile() in vkinfer/vulkan/qlinear_conv.py.
layout(constant_id = 14) const bool SHARED_TILE = true;
layout(constant_id = 17) const int RI = 4;  // rows per invocation [spec]
layout(constant_id = 18) const int CW = 1;  // output words (4 columns) per invocation [spec]

layout(std430, binding = 0) readonly buffer A_ { uint A[]; };
layout(std430, binding = 1) readonly buffer B_ { uint B[]; };
layout(std430, binding = 2) readonly buffer Q_ { ivec4 Q[]; };  // term, b_zp, mant, exp per column
layout(std430, binding = 3) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int a_zp; int y_zp; int lo; int hi; } pc;

#define DOT(a, b) dot8(a, b, A_SIGNED, B_SIGNED)

const int WX = int(gl_WorkGroupSize.x);
const int WY = int(gl_WorkGroupSize.y);
const int TM = WY * RI;      // rows per tile
const int TN = WX * CW * 4;  // columns per tile
const int KB = 4;            // K words per step
shared uint sA[TM * KB];
shared uint sB[TN * KB];

int a_row_base(int batch, int r)
{
    int oh = r / OW, ow = r - (r / OW) * OW;
    return batch * A_BATCH + ((oh * SH) * IW + ow * SW) * K4;
}

// One K word: a[i] of row i (A's bytes), b(j, jj) the word of column 4 * j + jj (B's bytes), summed into main's
// acc and rsum.
#ifdef VK_DOT
#define STEP(A_WORD, B_WORD)                                                                      \
    {                                                                                             \
        uint a[RI];                                                                               \
        for (int i = 0; i < RI; i++) {                                                            \
            a[i] = A_WORD(i);                                                                     \
            if (HAS_BZP) rsum[i] += lanesum8(a[i], A_SIGNED);                                     \
        }                                                                                         \
        for (int j = 0; j < CW; j++) {                                                            \
            uint b0 = B_WORD(j, 0), b1 = B_WORD(j, 1), b2 = B_WORD(j, 2), b3 = B_WORD(j, 3);      \
            for (int i = 0; i < RI; i++)                                                          \
                acc[j * RI + i] += ivec4(DOT(a[i], b0), DOT(a[i], b1), DOT(a[i], b2), DOT(a[i], b3)); \
        }                                                                                         \
    }
#else
#define STEP(A_WORD, B_WORD)                                                                      \
    {                                                                                             \
        ivec4 a[RI];                                                                              \
        for (int i = 0; i < RI; i++) {                                                            \
            a[i] = unpack8(A_WORD(i), A_SIGNED);                                                  \
            if (HAS_BZP) rsum[i] += a[i].x + a[i].y + a[i].z + a[i].w;                            \
        }                                                                                         \
        for (int j = 0; j < CW; j++) {                                                            \
            ivec4 b0 = unpack8(B_WORD(j, 0), B_SIGNED), b1 = unpack8(B_WORD(j, 1), B_SIGNED);     \
            ivec4 b2 = unpack8(B_WORD(j, 2), B_SIGNED), b3 = unpack8(B_WORD(j, 3), B_SIGNED);     \
            for (int i = 0; i < RI; i++)                                                          \
                acc[j * RI + i] += ivec4(idot4(a[i], b0), idot4(a[i], b1), idot4(a[i], b2), idot4(a[i], b3)); \
        }                                                                                         \
    }
#endif

void main()
{
    int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y);
    int tid = ty * WX + tx;
    int batch = int(gl_WorkGroupID.z);
    int row0 = int(gl_WorkGroupID.y) * TM;
    int col0 = int(gl_WorkGroupID.x) * TN;
    int bbase = batch * B_BATCH;
    ivec4 acc[CW * RI];  // [word j][row i], one lane per column
    int rsum[RI];
    for (int i = 0; i < CW * RI; i++) acc[i] = ivec4(0);
    for (int i = 0; i < RI; i++) rsum[i] = 0;

    if (SHARED_TILE) {
        for (int k0 = 0; k0 < K4; k0 += KB) {
            for (int idx = tid; idx < TM * KB; idx += WX * WY) {
                int rr = idx / KB, kk = idx - (idx / KB) * KB;
                int r = row0 + rr, k = k0 + kk;
                sA[idx] = (r < ROWS && k < K4) ? A[a_row_base(batch, r) + k] : 0u;
            }
            for (int idx = tid; idx < TN * KB; idx += WX * WY) {
                int cc = idx / KB, kk = idx - (idx / KB) * KB;
                int c = col0 + cc, k = k0 + kk;
                sB[idx] = (c < N4 * 4 && k < K4) ? B[bbase + c * K4 + k] : 0u;
            }
            barrier();
            for (int kk = 0; kk < KB; kk++) {
#define SA_WORD(i) sA[(ty * RI + (i)) * KB + kk]
#define SB_WORD(j, jj) sB[((tx * CW + (j)) * 4 + (jj)) * KB + kk]
                STEP(SA_WORD, SB_WORD)
            }
            barrier();
        }
    } else {
        // Rows and columns past the edge are clamped to valid addresses; their results are dropped.
        int rbase[RI];
        for (int i = 0; i < RI; i++) rbase[i] = a_row_base(batch, min(row0 + ty * RI + i, ROWS - 1));
        int cb[CW];
        for (int j = 0; j < CW; j++) cb[j] = bbase + min(col0 + (tx * CW + j) * 4, N4 * 4 - 4) * K4;
        for (int k = 0; k < K4; k++) {
#define A_WORD_(i) A[rbase[i] + k]
#define B_WORD_(j, jj) B[cb[j] + (jj) * K4 + k]
            STEP(A_WORD_, B_WORD_)
        }
    }

    // Requantize and store, one (word j, row i) at a time, always from acc[0] and rsum[0]: the arrays shift down
    // after each one instead of being indexed by the loop counters. A dynamically indexed array is kept in
    // scratch memory for the whole shader (the requantization is too large for the compilers to unroll these
    // loops): lavapipe ran this epilogue's indexed form 1.7-2.8x slower on MobileNetV2's 1x1 shapes.
    for (int j = 0; j < CW; j++) {
        int cw = col0 / 4 + tx * CW + j;
        if (cw >= N4) break;
        int qb = batch * Q_BATCH + cw * 4;
        ivec4 q[4] = ivec4[4](Q[qb], Q[qb + 1], Q[qb + 2], Q[qb + 3]);
        for (int i = 0; i < RI; i++) {
            int r = row0 + ty * RI + i;
            if (r < ROWS) {
                ivec4 y;
                for (int jj = 0; jj < 4; jj++) {
                    int v = acc[0][jj] - q[jj].y * rsum[0] + q[jj].x;
                    // Padding columns hold zero bytes: the next layer's row sums rely on it.
                    y[jj] = cw * 4 + jj < N ? requantize(v, q[jj].z, q[jj].w, pc.y_zp, pc.lo, pc.hi) : 0;
                }
                Y[(batch * ROWS + r) * N4 + cw] = pack8(y);
            }
            for (int t = 0; t < RI * CW - 1; t++) acc[t] = acc[t + 1];
            int r0 = rsum[0];
            for (int t = 0; t < RI - 1; t++) rsum[t] = rsum[t + 1];
            rsum[RI - 1] = r0;
        }
    }
}
