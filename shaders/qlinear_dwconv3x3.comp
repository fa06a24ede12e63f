#version 450
// Depthwise 3x3 quantized convolution, stride 1 or 2, dilation 1 (MobileNet's workhorse), with
// fused requantization. One invocation computes 4 channels (one packed word) for OPX adjacent
// output pixels of a row, loading each input word of the 3 rows once into registers and keeping
// the 9 weight words in registers (QNNPACK's unipass depthwise, on a GPU).
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x = 8, local_size_y = 8) in;
layout(constant_id = 0) const int C4 = 1;
layout(constant_id = 1) const int IH = 1;
layout(constant_id = 2) const int IW = 1;
layout(constant_id = 3) const int OH = 1;
layout(constant_id = 4) const int OW = 1;
layout(constant_id = 5) const int C = 1;
layout(constant_id = 6) const int S = 1;    // stride, both axes: 1 or 2 [spec]: sizes xv[]
layout(constant_id = 7) const int PT = 0;
layout(constant_id = 8) const int PL = 0;
layout(constant_id = 9) const bool X_SIGNED = false;
layout(constant_id = 10) const bool W_SIGNED = false;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer W_ { uint W[]; };
layout(std430, binding = 2) readonly buffer Q_ { ivec4 Q[]; };
layout(std430, binding = 3) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int x_zp; int y_zp; int lo; int hi; } pc;

const int OPX = 4;                       // output pixels per invocation
const int SPAN = (OPX - 1) * S + 3;      // input columns they read

void main()
{
    int c4 = int(gl_GlobalInvocationID.x);
    int ow0 = int(gl_GlobalInvocationID.y) * OPX;
    int noh = int(gl_GlobalInvocationID.z);
    if (c4 >= C4 || ow0 >= OW) return;
    int n = noh / OH, oh = noh - (noh / OH) * OH;

    ivec4 q[4];
    for (int j = 0; j < 4; j++) q[j] = Q[c4 * 4 + j];
    // Depthwise: each channel has its own weights, so subtract the weight zero point once here
    // and accumulate (x - x_zp) * (w - w_zp) directly (no input sums, fewer live registers).
    ivec4 wzp = ivec4(q[0].y, q[1].y, q[2].y, q[3].y);
    ivec4 w[9];
    for (int t = 0; t < 9; t++) w[t] = unpack8(W[c4 * 9 + t], W_SIGNED) - wzp;

    ivec4 acc[OPX];
    for (int p = 0; p < OPX; p++) acc[p] = ivec4(0);
    int iw0 = ow0 * S - PL;
    for (int kh = 0; kh < 3; kh++) {
        int ih = oh * S - PT + kh;
        if (ih < 0 || ih >= IH) continue;
        int rowbase = (n * IH + ih) * IW;
        ivec4 xv[SPAN];
        for (int t = 0; t < SPAN; t++) {
            int iw = iw0 + t;
            // Taps outside the image are padding: zero real value, so (x - x_zp) = 0.
            xv[t] = (iw >= 0 && iw < IW) ? unpack8(X[(rowbase + iw) * C4 + c4], X_SIGNED) - pc.x_zp : ivec4(0);
        }
        for (int p = 0; p < OPX; p++) {
            for (int kw = 0; kw < 3; kw++) {
                acc[p] += xv[p * S + kw] * w[kh * 3 + kw];
            }
        }
    }
    for (int p = 0; p < OPX; p++) {
        int ow = ow0 + p;
        if (ow >= OW) break;
        ivec4 y = ivec4(0);
        for (int j = 0; j < 4; j++) {
            if (c4 * 4 + j < C) y[j] = requantize(acc[p][j] + q[j].x, q[j].z, q[j].w, pc.y_zp, pc.lo, pc.hi);
        }
        Y[((n * OH + oh) * OW + ow) * C4 + c4] = pack8(y);
    }
}
