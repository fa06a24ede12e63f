#version 450
// Quantized GEMM with fused requantization: Y[r, n] = requant(sum_k A[r, k] * B[n, k] + fold terms).
// Serves QLinearMatMul and 1x1 convolution (any stride, no padding, group 1): row r of A is
// output pixel (r / OW, r % OW) read at input pixel (oh * SH, ow * SW), so no im2col copy.
// A is 4 bytes per word along K (NHWC with channels padded to 4 with zero bytes); B is packed once
// at prepare time as [column][K/4] words. Zero points are folded: the shader accumulates raw
// products and row sums, and Q holds bias - a_zp * sum_k B + K * a_zp * b_zp per column.
// A workgroup computes a 32-row x 32-column tile; each invocation 4 rows x 4 columns.
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x = 8, local_size_y = 8) in;
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

layout(std430, binding = 0) readonly buffer A_ { uint A[]; };
layout(std430, binding = 1) readonly buffer B_ { uint B[]; };
layout(std430, binding = 2) readonly buffer Q_ { ivec4 Q[]; };  // term, b_zp, mant, exp per column
layout(std430, binding = 3) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int a_zp; int y_zp; int lo; int hi; } pc;

#define DOT(a, b) dot8(a, b, A_SIGNED, B_SIGNED)

const int TM = 32;  // rows per tile
const int TN = 32;  // columns per tile
const int KB = 4;   // K words per step
shared uint sA[TM * KB];
shared uint sB[TN * KB];

int a_row_base(int batch, int r)
{
    int oh = r / OW, ow = r - (r / OW) * OW;
    return batch * A_BATCH + ((oh * SH) * IW + ow * SW) * K4;
}

void main()
{
    int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y);
    int tid = ty * 8 + tx;
    int batch = int(gl_WorkGroupID.z);
    int row0 = int(gl_WorkGroupID.y) * TM;
    int col0 = int(gl_WorkGroupID.x) * TN;
    int bbase = batch * B_BATCH;

    ivec4 acc[4] = ivec4[4](ivec4(0), ivec4(0), ivec4(0), ivec4(0));
    ivec4 rsum = ivec4(0);

    if (SHARED_TILE) {
        for (int k0 = 0; k0 < K4; k0 += KB) {
            for (int i = 0; i < 2; i++) {
                int idx = tid + 64 * i;
                int rr = idx / KB, kk = idx - (idx / KB) * KB;
                int r = row0 + rr, k = k0 + kk;
                sA[idx] = (r < ROWS && k < K4) ? A[a_row_base(batch, r) + k] : 0u;
                int c = col0 + rr;
                sB[idx] = (c < N4 * 4 && k < K4) ? B[bbase + c * K4 + k] : 0u;
            }
            barrier();
            for (int kk = 0; kk < KB; kk++) {
#ifdef VK_DOT
                uint a[4], b[4];
                for (int i = 0; i < 4; i++) {
                    a[i] = sA[(ty * 4 + i) * KB + kk];
                    b[i] = sB[(tx * 4 + i) * KB + kk];
                }
                for (int i = 0; i < 4; i++) {
                    acc[i] += ivec4(DOT(a[i], b[0]), DOT(a[i], b[1]), DOT(a[i], b[2]), DOT(a[i], b[3]));
                    if (HAS_BZP) rsum[i] += lanesum8(a[i], A_SIGNED);
                }
#else
                ivec4 a[4], b[4];
                for (int i = 0; i < 4; i++) {
                    a[i] = unpack8(sA[(ty * 4 + i) * KB + kk], A_SIGNED);
                    b[i] = unpack8(sB[(tx * 4 + i) * KB + kk], B_SIGNED);
                }
                for (int i = 0; i < 4; i++) {
                    acc[i] += ivec4(idot4(a[i], b[0]), idot4(a[i], b[1]), idot4(a[i], b[2]), idot4(a[i], b[3]));
                    if (HAS_BZP) rsum[i] += a[i].x + a[i].y + a[i].z + a[i].w;
                }
#endif
            }
            barrier();
        }
    } else {
        // Rows and columns past the edge are clamped to valid addresses; their results are dropped.
        int rbase[4];
        for (int i = 0; i < 4; i++) rbase[i] = a_row_base(batch, min(row0 + ty * 4 + i, ROWS - 1));
        int cb = bbase + min(col0 + tx * 4, N4 * 4 - 4) * K4;
        for (int k = 0; k < K4; k++) {
#ifdef VK_DOT
            uint a[4], b[4];
            for (int i = 0; i < 4; i++) {
                a[i] = A[rbase[i] + k];
                b[i] = B[cb + i * K4 + k];
            }
            for (int i = 0; i < 4; i++) {
                acc[i] += ivec4(DOT(a[i], b[0]), DOT(a[i], b[1]), DOT(a[i], b[2]), DOT(a[i], b[3]));
                if (HAS_BZP) rsum[i] += lanesum8(a[i], A_SIGNED);
            }
#else
            ivec4 a[4], b[4];
            for (int i = 0; i < 4; i++) {
                a[i] = unpack8(A[rbase[i] + k], A_SIGNED);
                b[i] = unpack8(B[cb + i * K4 + k], B_SIGNED);
            }
            for (int i = 0; i < 4; i++) {
                acc[i] += ivec4(idot4(a[i], b[0]), idot4(a[i], b[1]), idot4(a[i], b[2]), idot4(a[i], b[3]));
                if (HAS_BZP) rsum[i] += a[i].x + a[i].y + a[i].z + a[i].w;
            }
#endif
        }
    }

    int cw = col0 / 4 + tx;
    if (cw >= N4) return;
    int qb = batch * Q_BATCH + cw * 4;
    ivec4 q[4] = ivec4[4](Q[qb], Q[qb + 1], Q[qb + 2], Q[qb + 3]);
    for (int i = 0; i < 4; i++) {
        int r = row0 + ty * 4 + i;
        if (r >= ROWS) break;
        ivec4 y;
        for (int j = 0; j < 4; j++) {
            int v = acc[i][j] - q[j].y * rsum[i] + q[j].x;
            // Padding columns hold zero bytes: the next layer's row sums rely on it.
            y[j] = cw * 4 + j < N ? requantize(v, q[j].z, q[j].w, pc.y_zp, pc.lo, pc.hi) : 0;
        }
        Y[(batch * ROWS + r) * N4 + cw] = pack8(y);
    }
}
