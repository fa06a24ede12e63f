#version 450
// A permutation of the channels of a packed tensor: y[row, c] = x[row, P[c]]. Serves Transpose on the
// channel axes of ShuffleNet's channel shuffle (Reshape (N,g,C/g,H,W) -> Transpose (0,2,1,3,4) -> Reshape,
// where both reshapes keep the packed bytes). One invocation writes one output word; padding bytes are 0.
layout(local_size_x = 64) in;
layout(constant_id = 0) const int ROWS = 1;
layout(constant_id = 1) const int C = 1;
layout(constant_id = 2) const int C4 = 1;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer P_ { int P[]; };
layout(std430, binding = 2) writeonly buffer Y_ { uint Y[]; };

void main()
{
    int w = int(gl_GlobalInvocationID.x);
    int r = int(gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y);
    if (w >= C4 || r >= ROWS) return;
    uint y = 0u;
    for (int j = 0; j < 4; j++) {
        int c = 4 * w + j;
        if (c >= C) break;
        int src = P[c];
        y |= ((X[r * C4 + src / 4] >> uint(8 * (src & 3))) & 0xffu) << uint(8 * j);
    }
    Y[r * C4 + w] = y;
}
