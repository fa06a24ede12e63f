#version 450
// TFLite's 8-bit AVERAGE_POOL_2D over packed NHWC (vkinfer/reference/tflite_average_pool.py): the raw
// values of the window's in-image part are summed, divided by their count rounding half away from
// zero (integers only), and clamped to the fused activation's bounds. One invocation: 4 channels of
// one output pixel; padding channels are written as 0.
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
layout(constant_id = 9) const int PT = 0;
layout(constant_id = 10) const int PL = 0;
layout(constant_id = 11) const bool X_SIGNED = false;
layout(constant_id = 12) const int C = 1;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int lo; int hi; } pc;

void main()
{
    int cw = int(gl_GlobalInvocationID.x);
    int ow = int(gl_GlobalInvocationID.y);
    int noh = int(gl_GlobalInvocationID.z);
    if (cw >= C4 || ow >= OW) return;
    int n = noh / OH, oh = noh - (noh / OH) * OH;
    int y0 = oh * SH - PT, x0 = ow * SW - PL;
    int ys = max(y0, 0), ye = min(y0 + KH, IH), xs = max(x0, 0), xe = min(x0 + KW, IW);
    ivec4 acc = ivec4(0);
    for (int ih = ys; ih < ye; ih++)
        for (int iw = xs; iw < xe; iw++)
            acc += unpack8(X[((n * IH + ih) * IW + iw) * C4 + cw], X_SIGNED);
    int cnt = (ye - ys) * (xe - xs);
    int half_ = cnt / 2;
    ivec4 q;
    for (int j = 0; j < 4; j++) {
        int a = acc[j];
        int r = a > 0 ? (a + half_) / cnt : -((half_ - a) / cnt);
        q[j] = cw * 4 + j < C ? clamp(r, pc.lo, pc.hi) : 0;
    }
    Y[(noh * OW + ow) * C4 + cw] = pack8(q);
}
