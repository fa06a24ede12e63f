#version 450
// Depthwise quantized convolution (group == C == M), any kernel, stride, dilation and padding,
// with fused requantization. Channels are packed 4 per word, so one invocation computes 4
// channels of one output pixel from whole input words. Weights: [C/4][kH][kW] words.
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x = 4, local_size_y = 16) in;
layout(constant_id = 0) const int C4 = 1;
layout(constant_id = 1) const int IH = 1;
layout(constant_id = 2) const int IW = 1;
layout(constant_id = 3) const int OH = 1;
layout(constant_id = 4) const int OW = 1;
layout(constant_id = 5) const int C = 1;
layout(constant_id = 6) const int KH = 1;
layout(constant_id = 7) const int KW = 1;
layout(constant_id = 8) const int SH = 1;
layout(constant_id = 9) const int SW = 1;
layout(constant_id = 10) const int DH = 1;
layout(constant_id = 11) const int DW = 1;
layout(constant_id = 12) const int PT = 0;
layout(constant_id = 13) const int PL = 0;
layout(constant_id = 14) const bool X_SIGNED = false;
layout(constant_id = 15) const bool W_SIGNED = false;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer W_ { uint W[]; };
layout(std430, binding = 2) readonly buffer Q_ { ivec4 Q[]; };
layout(std430, binding = 3) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int x_zp; int y_zp; int lo; int hi; } pc;

void main()
{
    int c4 = int(gl_GlobalInvocationID.x);
    int ow = int(gl_GlobalInvocationID.y);
    int noh = int(gl_GlobalInvocationID.z);
    if (c4 >= C4 || ow >= OW) return;
    int n = noh / OH, oh = noh - (noh / OH) * OH;

    ivec4 q[4];
    for (int j = 0; j < 4; j++) q[j] = Q[c4 * 4 + j];
    ivec4 wzp = ivec4(q[0].y, q[1].y, q[2].y, q[3].y);  // per-channel weights: subtract w_zp per load
    ivec4 acc = ivec4(0);
    for (int kh = 0; kh < KH; kh++) {
        int ih = oh * SH - PT + kh * DH;
        if (ih < 0 || ih >= IH) continue;
        for (int kw = 0; kw < KW; kw++) {
            int iw = ow * SW - PL + kw * DW;
            if (iw < 0 || iw >= IW) continue;
            ivec4 x = unpack8(X[((n * IH + ih) * IW + iw) * C4 + c4], X_SIGNED) - pc.x_zp;
            acc += x * (unpack8(W[(c4 * KH + kh) * KW + kw], W_SIGNED) - wzp);
        }
    }
    ivec4 y = ivec4(0);
    for (int j = 0; j < 4; j++) {
        if (c4 * 4 + j < C) y[j] = requantize(acc[j] + q[j].x, q[j].z, q[j].w, pc.y_zp, pc.lo, pc.hi);
    }
    Y[((n * OH + oh) * OW + ow) * C4 + c4] = pack8(y);
}
