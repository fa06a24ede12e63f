#version 450
// Reshape between two packed forms: the row-major element order of the logical tensor is kept, only the
// packing changes (for example (1, 1, 1, C) -> (1, C), which are C rows of 1 channel and 1 row of C).
// A form is (OUTER, CH, INNER): logical index L = (o * CH + c) * INNER + i lives at packed row
// o * INNER + i, channel c (4-D NCHW: N, C, H*W; 5-D: N, A*B, H*W; other ranks: rows, last axis, 1).
// One invocation writes one output word; padding bytes are 0.
layout(local_size_x = 64) in;
layout(constant_id = 0) const int O_OUTER = 1;
layout(constant_id = 1) const int O_CH = 1;
layout(constant_id = 2) const int O_INNER = 1;
layout(constant_id = 3) const int I_CH = 1;
layout(constant_id = 4) const int I_INNER = 1;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) writeonly buffer Y_ { uint Y[]; };

const int O_C4 = (O_CH + 3) / 4;
const int I_C4 = (I_CH + 3) / 4;

void main()
{
    int w = int(gl_GlobalInvocationID.x);
    int r = int(gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y);
    if (w >= O_C4 || r >= O_OUTER * O_INNER) return;
    int o = r / O_INNER, i = r - (r / O_INNER) * O_INNER;
    uint y = 0u;
    for (int j = 0; j < 4; j++) {
        int c = 4 * w + j;
        if (c >= O_CH) break;
        int L = (o * O_CH + c) * O_INNER + i;
        int t = L / I_INNER, ii = L - t * I_INNER;
        int cc = t - (t / I_CH) * I_CH, oo = t / I_CH;
        int src = (oo * I_INNER + ii) * I_C4 * 4 + cc;
        y |= ((X[src >> 2] >> uint(8 * (src & 3))) & 0xffu) << uint(8 * j);
    }
    Y[r * O_C4 + w] = y;
}
