#version 450
// One input of a channel concatenation (com.microsoft QLinearConcat / Concat on the channel axis)
// over packed tensors: input channels [0, C_IN) go to output channels [OFF, OFF + C_IN) of every
// row, through a 256-entry requantization table unless IDENT (the table is filled on the host by
// the numpy reference, so it is exact). One dispatch per input, a barrier between them: an
// invocation owns one output word, keeps the bytes of other inputs, and (LAST) zeroes padding.
// ROW4 > 0: a concatenation along an axis stored outside the packed row (vkinfer/vulkan/qlinear_concat.py):
// "channels" are the bytes of whole padded rows (ROW4 words, ROW_W real bytes each), and a padding byte
// stays 0 instead of going through the table.
layout(local_size_x = 64) in;
layout(constant_id = 0) const int ROWS = 1;
layout(constant_id = 1) const int C_IN = 1;
layout(constant_id = 2) const int C4_IN = 1;
layout(constant_id = 3) const int C_OUT = 1;
layout(constant_id = 4) const int C4_OUT = 1;
layout(constant_id = 5) const int OFF = 0;
layout(constant_id = 6) const bool IDENT = true;
layout(constant_id = 7) const bool LAST = false;
layout(constant_id = 8) const int ROW4 = 0;
layout(constant_id = 9) const int ROW_W = 0;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer T_ { uint T[]; };
layout(std430, binding = 2) buffer Y_ { uint Y[]; };

const int W0 = OFF / 4;                                    // first output word this input touches
const int NW = (LAST ? C4_OUT : (OFF + C_IN + 3) / 4) - W0;  // words per row this dispatch owns

uint byte_at(uint w, int j) { return (w >> uint(8 * j)) & 0xffu; }

void main()
{
    int k = int(gl_GlobalInvocationID.x);
    int r = int(gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y);
    if (k >= NW || r >= ROWS) return;
    int w = W0 + k;
    uint old = Y[r * C4_OUT + w];
    uint y = 0u;
    for (int j = 0; j < 4; j++) {
        int ch = 4 * w + j;
        uint b;
        if (ch >= OFF && ch < OFF + C_IN) {
            int ci = ch - OFF;
            b = byte_at(X[r * C4_IN + ci / 4], ci & 3);
            bool pad = ROW4 > 0 && ci - (ci / (4 * ROW4)) * (4 * ROW4) >= ROW_W;
            if (!IDENT && !pad) b = byte_at(T[b >> 2], int(b & 3u));
        } else if (ch >= C_OUT) {
            b = 0u;
        } else {
            b = byte_at(old, j);
        }
        y |= b << uint(8 * j);
    }
    Y[r * C4_OUT + w] = y;
}
