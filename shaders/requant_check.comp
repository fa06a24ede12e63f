#version 450
// Test shader: applies requantize() to a table of (acc, mant, exp, zp) so the tests can compare
// the integer emulation against numpy's float32 arithmetic on millions of edge cases.
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"
layout(local_size_x = 64) in;
layout(constant_id = 0) const int COUNT = 1;
layout(std430, binding = 0) readonly buffer In { ivec4 cases[]; };  // acc, mant, exp, zp
layout(std430, binding = 1) writeonly buffer Out { int y[]; };
layout(push_constant) uniform P { int lo; int hi; } pc;
void main()
{
    int i = int(gl_GlobalInvocationID.x);
    if (i >= COUNT) return;
    ivec4 c = cases[i];
    y[i] = requantize(c.x, c.y, c.z, c.w, pc.lo, pc.hi);
}
