#version 450
// General quantized convolution (any kernel, stride, dilation, padding, groups) with fused
// requantization, read straight from the packed NHWC input through computed offsets (no im2col).
// One invocation computes 4 output channels (one packed word) of 4 adjacent output pixels.
// Weights are packed once as [M/4][kH][kW][CG/4][4 output channels] words of 4 input channels,
// input channels past the group padded with the channel's weight zero point: such taps then add
// (x - x_zp) * w_zp to the raw sum and (x - x_zp) to the input sum, which cancel in
// acc - w_zp * xsum, so whole words can be read even where a group ends mid-word.
#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

layout(local_size_x = 4, local_size_y = 16) in;
// [spec]: stays a specialization constant where shapes are pushed (CPU implementations, vkinfer/_glsl.py): the
// kernel geometry and channels per group bound the tap and channel loops, which unroll only when constant.
// All pushed, lavapipe ran a 3x3 32->32 conv on 56x56 in 19.1 ms against 10.7 specialized; so, 12.2 ms.
layout(constant_id = 0) const int C4 = 1;   // input words per pixel
layout(constant_id = 1) const int IH = 1;
layout(constant_id = 2) const int IW = 1;
layout(constant_id = 3) const int OH = 1;
layout(constant_id = 4) const int OW = 1;
layout(constant_id = 5) const int M = 1;    // output channels
layout(constant_id = 6) const int KH = 1;  // [spec]
layout(constant_id = 7) const int KW = 1;  // [spec]
layout(constant_id = 8) const int SH = 1;  // [spec]
layout(constant_id = 9) const int SW = 1;  // [spec]
layout(constant_id = 10) const int DH = 1;  // [spec]
layout(constant_id = 11) const int DW = 1;  // [spec]
layout(constant_id = 12) const int PT = 0;
layout(constant_id = 13) const int PL = 0;
layout(constant_id = 14) const int CG = 1;  // input channels per group [spec]
layout(constant_id = 15) const int MG = 1;  // output channels per group [spec]
layout(constant_id = 16) const bool X_SIGNED = false;
layout(constant_id = 17) const bool W_SIGNED = false;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer W_ { uint W[]; };
layout(std430, binding = 2) readonly buffer Q_ { ivec4 Q[]; };  // bias, w_zp, mant, exp per channel
layout(std430, binding = 3) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int x_zp; int y_zp; int lo; int hi; } pc;

const int M4 = (M + 3) / 4;
const int CG4 = (CG + 3) / 4;

// Input channels cbase + 4*ci4 .. +3 of one pixel, minus x_zp; channels past the group read as 0.
ivec4 load_x4(int pix, int cbase, int ci4)
{
    if ((cbase & 3) == 0) return unpack8(X[pix + cbase / 4 + ci4], X_SIGNED) - pc.x_zp;
    ivec4 v;
    for (int t = 0; t < 4; t++) {
        int c = cbase + ci4 * 4 + t;
        v[t] = c < cbase + CG ? unpack8(X[pix + c / 4], X_SIGNED)[c & 3] - pc.x_zp : 0;
    }
    return v;
}

const int OPX = 4;  // output pixels per invocation, along W: each weight word loaded feeds 4 pixels

void main()
{
    int oc4 = int(gl_GlobalInvocationID.x);
    int ow0 = int(gl_GlobalInvocationID.y) * OPX;
    int noh = int(gl_GlobalInvocationID.z);
    if (oc4 >= M4 || ow0 >= OW) return;
    int n = noh / OH, oh = noh - (noh / OH) * OH;
    int oc0 = oc4 * 4;

    ivec4 acc[OPX], xs[OPX];
    for (int p = 0; p < OPX; p++) { acc[p] = ivec4(0); xs[p] = ivec4(0); }
    int g0 = oc0 / MG;
    if (min(oc0 + 3, M - 1) / MG == g0) {
        // Common case: the word's 4 channels share a group; 4 weight words feed 4 pixels x 16 MACs.
        int cbase = g0 * CG;
#ifdef VK_DOT
        // Dot products of raw packed words (vkinfer/vulkan/qlinear_conv.py compiles this variant only when every
        // group starts on a word, CG % 4 == 0 or one group, so no word straddles groups). Taps in the padding
        // read a word of four x_zp bytes (real value 0) instead of being skipped, so every pixel sums the same
        // weights and the host folds x_zp * sum(w) into Q's term: acc - w_zp * sum(x) + term.
        uint xzw = (uint(pc.x_zp) & 0xffu) * 0x01010101u;
        for (int kh = 0; kh < KH; kh++) {
            int ih = oh * SH - PT + kh * DH;
            bool row_in = ih >= 0 && ih < IH;
            int rowbase = (n * IH + ih) * IW;
            for (int kw = 0; kw < KW; kw++) {
                int wbase = ((oc4 * KH + kh) * KW + kw) * CG4 * 4;
                for (int ci4 = 0; ci4 < CG4; ci4++) {
                    uint w0 = W[wbase + ci4 * 4], w1 = W[wbase + ci4 * 4 + 1];
                    uint w2 = W[wbase + ci4 * 4 + 2], w3 = W[wbase + ci4 * 4 + 3];
                    for (int p = 0; p < OPX; p++) {
                        int iw = (ow0 + p) * SW - PL + kw * DW;
                        uint x = row_in && iw >= 0 && iw < IW ? X[(rowbase + iw) * C4 + cbase / 4 + ci4] : xzw;
                        acc[p] += ivec4(dot8(x, w0, X_SIGNED, W_SIGNED), dot8(x, w1, X_SIGNED, W_SIGNED),
                                        dot8(x, w2, X_SIGNED, W_SIGNED), dot8(x, w3, X_SIGNED, W_SIGNED));
                        xs[p] += ivec4(lanesum8(x, X_SIGNED));
                    }
                }
            }
        }
#else

        for (int kh = 0; kh < KH; kh++) {
            int ih = oh * SH - PT + kh * DH;
            if (ih < 0 || ih >= IH) continue;
            int rowbase = (n * IH + ih) * IW;
            for (int kw = 0; kw < KW; kw++) {
                int wbase = ((oc4 * KH + kh) * KW + kw) * CG4 * 4;
                for (int ci4 = 0; ci4 < CG4; ci4++) {
                    ivec4 w0 = unpack8(W[wbase + ci4 * 4], W_SIGNED), w1 = unpack8(W[wbase + ci4 * 4 + 1], W_SIGNED);
                    ivec4 w2 = unpack8(W[wbase + ci4 * 4 + 2], W_SIGNED), w3 = unpack8(W[wbase + ci4 * 4 + 3], W_SIGNED);
                    for (int p = 0; p < OPX; p++) {
                        int iw = (ow0 + p) * SW - PL + kw * DW;
                        if (iw < 0 || iw >= IW) continue;  // padding: zero real value
                        ivec4 x = load_x4((rowbase + iw) * C4, cbase, ci4);
                        acc[p] += ivec4(idot4(x, w0), idot4(x, w1), idot4(x, w2), idot4(x, w3));
                        xs[p] += ivec4(x.x + x.y + x.z + x.w);
                    }
                }
            }
        }
#endif
    } else {
        // The word straddles groups (MG not a multiple of 4): one channel at a time. Loops over
        // j and p unroll, so acc/xs are indexed by constants (no scratch memory).
        for (int j = 0; j < 4; j++) {
            int cbase = (min(oc0 + j, M - 1) / MG) * CG;
            for (int kh = 0; kh < KH; kh++) {
                int ih = oh * SH - PT + kh * DH;
                if (ih < 0 || ih >= IH) continue;
                int rowbase = (n * IH + ih) * IW;
                for (int kw = 0; kw < KW; kw++) {
                    int wbase = ((oc4 * KH + kh) * KW + kw) * CG4 * 4;
                    for (int ci4 = 0; ci4 < CG4; ci4++) {
                        ivec4 w = unpack8(W[wbase + ci4 * 4 + j], W_SIGNED);
                        for (int p = 0; p < OPX; p++) {
                            int iw = (ow0 + p) * SW - PL + kw * DW;
                            if (iw < 0 || iw >= IW) continue;
                            ivec4 x = load_x4((rowbase + iw) * C4, cbase, ci4);
                            acc[p][j] += idot4(x, w);
                            xs[p][j] += x.x + x.y + x.z + x.w;
                        }
                    }
                }
            }
        }
    }

    ivec4 q[4];
    for (int j = 0; j < 4; j++) q[j] = Q[oc0 + j];  // Q is padded to M4 * 4 entries
    for (int p = 0; p < OPX; p++) {
        if (ow0 + p >= OW) break;
        ivec4 y = ivec4(0);
        for (int j = 0; j < 4; j++) {
            if (oc0 + j < M) y[j] = requantize(acc[p][j] - q[j].y * xs[p][j] + q[j].x, q[j].z, q[j].w, pc.y_zp, pc.lo, pc.hi);
        }
        Y[((n * OH + oh) * OW + ow0 + p) * M4 + oc4] = pack8(y);
    }
}
