#version 450
// The byte gather (vkinfer/model/moves.py): every data-movement op on 8-bit tensors (Slice, Split, Concat on any
// axis, Transpose, Pad, Gather, DepthToSpace, SpaceToDepth, Tile, Expand, nearest Resize) as one table made on
// the host. The output's elements, in the packed form's order without the channel padding, are rows of L; row d
// (R[5d..5d+4] = input, lo, hi, start, stride) copies input `input`'s elements start, start + stride, ... into
// its positions [lo, hi) and the fill byte into the others. One dispatch per input K (barriers between them):
// an invocation owns one output word; the FIRST dispatch writes the fill bytes, zero padding and bytes of other
// inputs as 0, the later ones keep what is there and write their own input's bytes.
layout(local_size_x = 64) in;
// [spec]: the two divisors stay specialization constants where shapes are pushed (CPU implementations,
// vkinfer/_glsl.py): a division by a pushed value is a real one per lane, and on lavapipe each of tiny_conv's
// two Transposes took ~110 us against ~50 us specialized; with these two kept, ~70 us.
layout(constant_id = 0) const int ROWS = 1;     // packed rows of the output
layout(constant_id = 1) const int C_OUT = 1;    // its width (elements per packed row)
layout(constant_id = 2) const int C4_OUT = 1;
layout(constant_id = 3) const int L = 1;        // elements per table row [spec]
layout(constant_id = 4) const int K = 0;        // the input this dispatch reads
layout(constant_id = 5) const int C_IN = 1;     // that input's packed width [spec]
layout(constant_id = 6) const int C4_IN = 1;
layout(constant_id = 7) const bool FIRST = true;
layout(constant_id = 8) const int FILL = 0;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer R_ { int R[]; };
layout(std430, binding = 2) buffer Y_ { uint Y[]; };

uint byte_at(uint w, int j) { return (w >> uint(8 * j)) & 0xffu; }

void main()
{
    int w = int(gl_GlobalInvocationID.x);
    int r = int(gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y);
    if (w >= C4_OUT || r >= ROWS) return;
    uint old = FIRST ? 0u : Y[r * C4_OUT + w];
    uint y = 0u;
    for (int j = 0; j < 4; j++) {
        int c = 4 * w + j;
        uint b = byte_at(old, j);
        if (c < C_OUT) {
            int e = r * C_OUT + c;
            int d = e / L;
            int p = e - d * L;
            int k = R[5 * d], lo = R[5 * d + 1], hi = R[5 * d + 2];
            if (p >= lo && p < hi) {
                if (k == K) {
                    int s = R[5 * d + 3] + (p - lo) * R[5 * d + 4];
                    int sr = s / C_IN, sc = s - sr * C_IN;
                    b = byte_at(X[sr * C4_IN + sc / 4], sc & 3);
                }
            } else if (FIRST) {
                b = uint(FILL);
            }
        }
        y |= b << uint(8 * j);
    }
    Y[r * C4_OUT + w] = y;
}
