#version 450
// com.microsoft QLinearGlobalAveragePool over packed NHWC, bit-exact with ONNX Runtime:
//     acc = sum(x over H*W) - x_zp * H*W          (int32, wrapping like ORT's int32 accumulator)
//     y   = requantize(acc, m)  with m = x_scale / (y_scale * H*W) in float32, split on the host
// One invocation computes 4 channels of one image.
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const int C4 = 1;
layout(constant_id = 1) const int C = 1;
layout(constant_id = 2) const int HW = 1;
layout(constant_id = 3) const bool X_SIGNED = false;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int x_zp; int mant; int mexp; int y_zp; int lo; int hi; } pc;

void main()
{
    int cw = int(gl_GlobalInvocationID.x);
    int n = int(gl_GlobalInvocationID.y);
    if (cw >= C4) return;
    int base = n * HW * C4 + cw;
    ivec4 acc = ivec4(0);
    for (int p = 0; p < HW; p++) acc += unpack8(X[base + p * C4], X_SIGNED);
    acc -= ivec4(pc.x_zp * HW);
    ivec4 y;
    for (int j = 0; j < 4; j++)
        y[j] = cw * 4 + j < C ? requantize(acc[j], pc.mant, pc.mexp, pc.y_zp, pc.lo, pc.hi) : 0;
    Y[n * C4 + cw] = pack8(y);
}
