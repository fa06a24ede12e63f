#version 450
// QLinearMatMul of two activations over packed tensors (vkinfer/vulkan/qlinear_matmul.py): attention's
// Q x K^T and P x V, batched with numpy-broadcast batch axes. One invocation per output word (up to 4
// outputs of a packed row); each output's element index, unravelled over the output's form dimensions
// D0..D3, gives its A and B base offsets (byte strides per output form dimension: a batch axis moves both,
// the row axis A only, the column axis B only), then K steps of AK and BK bytes. Exact int32 sums (wrapping)
// and qcommon.glsl's integer requantization: the same bits as the CPU's vki_requant_scalar.
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const int WORDS = 1;  // output words
layout(constant_id = 1) const int C4 = 1;     // words per packed output row
layout(constant_id = 2) const int C = 1;      // real bytes per packed output row
layout(constant_id = 3) const int K = 1;
layout(constant_id = 4) const int AK = 1;
layout(constant_id = 5) const int BK = 1;
layout(constant_id = 6) const bool A_SIGNED = false;
layout(constant_id = 7) const bool B_SIGNED = false;
layout(constant_id = 8) const int D0 = 1;
layout(constant_id = 9) const int D1 = 1;
layout(constant_id = 10) const int D2 = 1;
layout(constant_id = 11) const int D3 = 1;
layout(constant_id = 12) const int AS0 = 0;
layout(constant_id = 13) const int AS1 = 0;
layout(constant_id = 14) const int AS2 = 0;
layout(constant_id = 15) const int AS3 = 0;
layout(constant_id = 16) const int BS0 = 0;
layout(constant_id = 17) const int BS1 = 0;
layout(constant_id = 18) const int BS2 = 0;
layout(constant_id = 19) const int BS3 = 0;

layout(std430, binding = 0) readonly buffer A_ { uint A[]; };
layout(std430, binding = 1) readonly buffer B_ { uint B[]; };
layout(std430, binding = 2) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int a_zp; int b_zp; int y_zp; int lo; int hi; int mant; int mexp; } pc;

int a_at(int o)
{
    int w = int(A[o >> 2]);
    return A_SIGNED ? bitfieldExtract(w, 8 * (o & 3), 8) : int(bitfieldExtract(uint(w), 8 * (o & 3), 8));
}

int b_at(int o)
{
    int w = int(B[o >> 2]);
    return B_SIGNED ? bitfieldExtract(w, 8 * (o & 3), 8) : int(bitfieldExtract(uint(w), 8 * (o & 3), 8));
}

void main()
{
    int i = int(gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u);
    if (i >= WORDS) return;
    int ch0 = (i - (i / C4) * C4) * 4;
    int e0 = (i / C4) * C + ch0;
    uint y = 0u;
    for (int j = 0; j < 4; j++) {
        if (ch0 + j >= C) break;
        int e = e0 + j;
        int i3 = e % D3; e /= D3;
        int i2 = e % D2; e /= D2;
        int i1 = e % D1; e /= D1;
        int i0 = e;
        int oa = i0 * AS0 + i1 * AS1 + i2 * AS2 + i3 * AS3;
        int ob = i0 * BS0 + i1 * BS1 + i2 * BS2 + i3 * BS3;
        int acc = 0;
        for (int k = 0; k < K; k++) acc += (a_at(oa + k * AK) - pc.a_zp) * (b_at(ob + k * BK) - pc.b_zp);
        y |= (uint(requantize(acc, pc.mant, pc.mexp, pc.y_zp, pc.lo, pc.hi)) & 0xffu) << uint(8 * j);
    }
    Y[i] = y;
}
