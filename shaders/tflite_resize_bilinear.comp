#version 450
// TFLite's 8-bit RESIZE_BILINEAR over packed NHWC with XNNPACK's bits (vkinfer/reference/
// tflite_resize_bilinear.py): per output row and column the host's taps (i0, i1, the 11-bit weight of i1),
//     top = (tl << 11) + (tr - tl) * wx,  bottom = (bl << 11) + (br - bl) * wx
//     y   = ((top << 11) + (bottom - top) * wy + 2^21) >> 22        (arithmetic shift; integers only)
// One invocation: 4 channels of one output pixel. Padding channels read 0 and so write 0.
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x = 4, local_size_y = 16) in;
layout(constant_id = 0) const int C4 = 1;
layout(constant_id = 1) const int IH = 1;
layout(constant_id = 2) const int IW = 1;
layout(constant_id = 3) const int OH = 1;
layout(constant_id = 4) const int OW = 1;
layout(constant_id = 5) const bool X_SIGNED = false;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer T_ { int T[]; };  // 3 * OH row taps, then 3 * OW column taps
layout(std430, binding = 2) writeonly buffer Y_ { uint Y[]; };

void main()
{
    int cw = int(gl_GlobalInvocationID.x);
    int ox = int(gl_GlobalInvocationID.y);
    int noy = int(gl_GlobalInvocationID.z);
    if (cw >= C4 || ox >= OW) return;
    int n = noy / OH, oy = noy - n * OH;
    int y0 = T[3 * oy], y1 = T[3 * oy + 1], wy = T[3 * oy + 2];
    int x0 = T[3 * OH + 3 * ox], x1 = T[3 * OH + 3 * ox + 1], wx = T[3 * OH + 3 * ox + 2];
    int r0 = (n * IH + y0) * IW, r1 = (n * IH + y1) * IW;
    ivec4 tl = unpack8(X[(r0 + x0) * C4 + cw], X_SIGNED), tr = unpack8(X[(r0 + x1) * C4 + cw], X_SIGNED);
    ivec4 bl = unpack8(X[(r1 + x0) * C4 + cw], X_SIGNED), br = unpack8(X[(r1 + x1) * C4 + cw], X_SIGNED);
    ivec4 top = (tl << 11) + (tr - tl) * wx;
    ivec4 bot = (bl << 11) + (br - bl) * wx;
    ivec4 acc = (top << 11) + (bot - top) * wy;
    Y[(noy * OW + ox) * C4 + cw] = pack8((acc + (1 << 21)) >> 22);
}
