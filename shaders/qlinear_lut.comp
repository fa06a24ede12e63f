#version 450
// Elementwise 8-bit ops as table lookups, bit-exact by construction: the host fills the table by
// running the numpy reference (vkinfer/reference/) on every possible input, so the shader does no
// arithmetic that a driver could round differently.
//   BINARY = false: y = T[x]          (QLinearLeakyRelu, QLinearSigmoid: 256-byte table)
//   BINARY = true:  y = T[x * 256 + z] (QLinearAdd, QLinearMul: 64 KiB table; z of equal shape, or
//                   Z_ROW: one row of channels broadcast over every row, as a per-channel bias)
// Bytes index the table raw (int8 as two's complement). Tensors are packed 4 bytes per word with
// each row of C channels padded to C4 words; padding bytes are written as 0.
layout(local_size_x = 64) in;
layout(constant_id = 0) const int WORDS = 1;   // words in the tensor
layout(constant_id = 1) const int C4 = 1;      // words per row (pixel)
layout(constant_id = 2) const int C = 1;       // real channels per row
layout(constant_id = 3) const bool BINARY = false;
layout(constant_id = 4) const bool Z_ROW = false;  // Z is one row (C4 words) broadcast over every row

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer Z_ { uint Z[]; };  // second operand (bound to X when unary)
layout(std430, binding = 2) readonly buffer T_ { uint T[]; };
layout(std430, binding = 3) writeonly buffer Y_ { uint Y[]; };

uint lookup(uint i) { return (T[i >> 2] >> ((i & 3u) * 8u)) & 0xffu; }

void main()
{
    int i = int(gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u);
    if (i >= WORDS) return;
    int ch0 = (i - (i / C4) * C4) * 4;
    uint x = X[i];
    uint z = BINARY ? Z[Z_ROW ? i - (i / C4) * C4 : i] : 0u;
    uint y = 0u;
    for (int j = 0; j < 4; j++) {
        if (ch0 + j >= C) break;
        uint a = (x >> uint(8 * j)) & 0xffu;
        uint idx = BINARY ? (a << 8) | ((z >> uint(8 * j)) & 0xffu) : a;
        y |= lookup(idx) << uint(8 * j);
    }
    Y[i] = y;
}
