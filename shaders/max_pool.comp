#version 450
// ONNX MaxPool on 8-bit packed NHWC tensors: the largest value in each window (padding positions
// do not take part). One invocation computes 4 channels of one output pixel.
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x = 4, local_size_y = 16) in;
layout(constant_id = 0) const int C4 = 1;
layout(constant_id = 1) const int IH = 1;
layout(constant_id = 2) const int IW = 1;
layout(constant_id = 3) const int OH = 1;
layout(constant_id = 4) const int OW = 1;
layout(constant_id = 5) const int KH = 1;
layout(constant_id = 6) const int KW = 1;
layout(constant_id = 7) const int SH = 1;
layout(constant_id = 8) const int SW = 1;
layout(constant_id = 9) const int DH = 1;
layout(constant_id = 10) const int DW = 1;
layout(constant_id = 11) const int PT = 0;
layout(constant_id = 12) const int PL = 0;
layout(constant_id = 13) const bool X_SIGNED = false;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) writeonly buffer Y_ { uint Y[]; };

void main()
{
    int cw = int(gl_GlobalInvocationID.x);
    int ow = int(gl_GlobalInvocationID.y);
    int noh = int(gl_GlobalInvocationID.z);
    if (cw >= C4 || ow >= OW) return;
    int n = noh / OH, oh = noh - (noh / OH) * OH;
    ivec4 m = ivec4(X_SIGNED ? -128 : 0);
    for (int kh = 0; kh < KH; kh++) {
        int ih = oh * SH - PT + kh * DH;
        if (ih < 0 || ih >= IH) continue;
        for (int kw = 0; kw < KW; kw++) {
            int iw = ow * SW - PL + kw * DW;
            if (iw < 0 || iw >= IW) continue;
            m = max(m, unpack8(X[((n * IH + ih) * IW + iw) * C4 + cw], X_SIGNED));
        }
    }
    Y[(noh * OW + ow) * C4 + cw] = pack8(m);
}
