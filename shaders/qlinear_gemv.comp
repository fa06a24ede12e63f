#version 450
// Quantized GEMM for few rows (classifier layers, batch-1 matmuls): the 32-row tile of
// qlinear_gemm would compute 31 wasted rows. Each invocation streams K for one row and 4 columns
// (one output word); a workgroup's 64 invocations cover 256 columns, so each A word is read by
// all of them at the same address. Same data layout, zero-point folding and requantization as
// qlinear_gemm (rows of A at stride K4, B packed [column][K/4]).
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const int K4 = 1;
layout(constant_id = 1) const int N4 = 1;
layout(constant_id = 2) const int ROWS = 1;
layout(constant_id = 3) const int A_BATCH = 0;
layout(constant_id = 4) const int B_BATCH = 0;
layout(constant_id = 5) const bool A_SIGNED = false;
layout(constant_id = 6) const bool B_SIGNED = false;
layout(constant_id = 7) const int N = 1;
layout(constant_id = 8) const int Q_BATCH = 0;

layout(std430, binding = 0) readonly buffer A_ { uint A[]; };
layout(std430, binding = 1) readonly buffer B_ { uint B[]; };
layout(std430, binding = 2) readonly buffer Q_ { ivec4 Q[]; };
layout(std430, binding = 3) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int a_zp; int y_zp; int lo; int hi; } pc;

void main()
{
    int cw = int(gl_GlobalInvocationID.x);
    int r = int(gl_WorkGroupID.y);
    int batch = int(gl_WorkGroupID.z);
    if (cw >= N4) return;
    int abase = batch * A_BATCH + r * K4;
    int bbase = batch * B_BATCH + cw * 4 * K4;
    ivec4 acc = ivec4(0);
    int rsum = 0;
    for (int k = 0; k < K4; k++) {
#ifdef VK_DOT
        uint a = A[abase + k];
        acc += ivec4(dot8(a, B[bbase + k], A_SIGNED, B_SIGNED), dot8(a, B[bbase + K4 + k], A_SIGNED, B_SIGNED),
                     dot8(a, B[bbase + 2 * K4 + k], A_SIGNED, B_SIGNED),
                     dot8(a, B[bbase + 3 * K4 + k], A_SIGNED, B_SIGNED));
        rsum += lanesum8(a, A_SIGNED);
#else
        ivec4 a = unpack8(A[abase + k], A_SIGNED);
        acc += ivec4(idot4(a, unpack8(B[bbase + k], B_SIGNED)), idot4(a, unpack8(B[bbase + K4 + k], B_SIGNED)),
                     idot4(a, unpack8(B[bbase + 2 * K4 + k], B_SIGNED)),
                     idot4(a, unpack8(B[bbase + 3 * K4 + k], B_SIGNED)));
        rsum += a.x + a.y + a.z + a.w;
#endif
    }
    int qb = batch * Q_BATCH + cw * 4;
    ivec4 y = ivec4(0);
    for (int j = 0; j < 4; j++) {
        ivec4 q = Q[qb + j];
        if (cw * 4 + j < N) y[j] = requantize(acc[j] - q.y * rsum + q.x, q.z, q.w, pc.y_zp, pc.lo, pc.hi);
    }
    Y[(batch * ROWS + r) * N4 + cw] = pack8(y);
}
