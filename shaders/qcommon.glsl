// Shared by vkinfer's quantized shaders: 8-bit pack/unpack and the exact requantization.
//
// Requantization must equal ONNX Runtime bit for bit:
//     y = clamp(round_half_even(fl32(fl32(acc) * m)) + zp, lo, hi)
// Vulkan leaves float rounding modes undefined and compilers may contract multiply-adds, so by default
// we never use float here: both float32 roundings (int -> float, and the product) and the final
// round-half-to-even are emulated with integer arithmetic on m = mant * 2^exp (mant < 2^24,
// split on the host). Only core GLSL 4.50 integer ops are used (no Int64 capability needed).
// VK_FRQ (devices with shaderRoundingModeRTEFloat32) computes the same in float32 under RoundingModeRTE.

ivec4 unpack8(uint w, bool is_signed)
{
    if (is_signed) {
        int v = int(w);
        return ivec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8),
                     bitfieldExtract(v, 24, 8));
    }
    return ivec4(uvec4(w & 0xffu, (w >> 8) & 0xffu, (w >> 16) & 0xffu, w >> 24));
}

uint pack8(ivec4 v)
{
    uvec4 u = uvec4(v) & 0xffu;
    return u.x | (u.y << 8) | (u.z << 16) | (u.w << 24);
}

int idot4(ivec4 a, ivec4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// dot8(a, b): the exact int32 dot product of two words of four 8-bit lanes, each lane signed or not. With
// VK_DOT defined (the device was created with shaderIntegerDotProduct, vkinfer._vk Device.use_dot) it is one
// OpSDot / OpUDot / OpSUDot on the packed words (SPV_KHR_integer_dot_product, PackedVectorFormat4x8Bit);
// Debian 12's glslang has no GL_EXT_integer_dot_product, so the instructions are declared through
// GL_EXT_spirv_intrinsics (capabilities 6016 DotProductInputAll, 6018 DotProductInput4x8BitPacked, 6019
// DotProduct). Both forms give the same bits: |a.b| <= 4 * 128 * 128 fits any int32. The signedness arguments
// are specialization constants where they are used, so the untaken branches fold away.
#if defined(VK_DOT) || defined(VK_FRQ)
#extension GL_EXT_spirv_intrinsics : require
#endif
#ifdef VK_DOT
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6016, 6018, 6019], id = 4450)
int sdot_4x8(uint a, uint b, spirv_literal int fmt);
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6016, 6018, 6019], id = 4451)
uint udot_4x8(uint a, uint b, spirv_literal int fmt);
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6016, 6018, 6019], id = 4452)
int sudot_4x8(uint a, uint b, spirv_literal int fmt);

int dot8(uint a, uint b, bool a_signed, bool b_signed)
{
    if (a_signed && b_signed) return sdot_4x8(a, b, 0);
    if (!a_signed && !b_signed) return int(udot_4x8(a, b, 0));
    return a_signed ? sudot_4x8(a, b, 0) : sudot_4x8(b, a, 0);  // OpSUDot: the first operand is the signed one
}
#else
int dot8(uint a, uint b, bool a_signed, bool b_signed) { return idot4(unpack8(a, a_signed), unpack8(b, b_signed)); }
#endif

// The sum of a word's four lanes (a dot product with four unsigned ones).
int lanesum8(uint a, bool a_signed) { return dot8(a, 0x01010101u, a_signed, false); }

// q * 2^sh rounded to the nearest integer, ties to even, for 1 <= sh <= 31 and q < 2^32.
uint shr_rne(uint q, int sh)
{
    uint r = q >> uint(sh);
    uint rem = q & ((1u << uint(sh)) - 1u);
    uint half_ = 1u << uint(sh - 1);
    if (rem > half_ || (rem == half_ && (r & 1u) == 1u)) r += 1u;
    return r;
}

#ifdef VK_FRQ
// The float32 form, for devices that guarantee round-to-nearest-even (vkinfer/_vk.py float_rq_choice): the whole
// shader runs under RoundingModeRTE (SPV_KHR_float_controls), so float(acc) and the product are the contract's
// two float32 roundings; `precise` (NoContraction) keeps the product a product. m = mant * 2^mexp is rebuilt
// exactly (the host uses this form only where m is a normal float32: a denormal could be flushed). The clamp
// bounds are integers, so clamping before rounding equals ORT's order; an infinite product clamps like ORT's.
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4467], 4462, 32);

int requantize(int acc, int mant, int mexp, int zp, int lo, int hi)
{
    precise float f = float(acc) * ldexp(float(mant), mexp);
    f = clamp(f, float(lo - zp), float(hi - zp));
    return int(roundEven(f)) + zp;
}
#else
int requantize(int acc, int mant, int mexp, int zp, int lo, int hi)
{
    if (acc == 0 || mant == 0) return clamp(zp, lo, hi);
    bool neg = acc < 0;
    uint a = neg ? uint(-acc) : uint(acc);  // -INT_MIN wraps to 2^31 as uint: exact
    // fl32(acc): keep 24 significant bits, round half to even.
    int e = mexp;
    int msb = findMSB(a);
    if (msb > 23) {
        int sh = msb - 23;
        a = shr_rne(a, sh);  // may carry to 2^24: still exact
        e += sh;
    }
    // fl32(a * mant): the 48-bit product in (hi, lo), rounded to 24 significant bits.
    uint phi, plo;
    umulExtended(a, uint(mant), phi, plo);
    uint q;
    int pmsb = phi != 0u ? 32 + findMSB(phi) : findMSB(plo);
    if (pmsb > 23) {
        int sh = pmsb - 23;  // 1..25
        q = (plo >> uint(sh)) | (phi << uint(32 - sh));
        uint rem = plo & ((1u << uint(sh)) - 1u);
        uint half_ = 1u << uint(sh - 1);
        if (rem > half_ || (rem == half_ && (q & 1u) == 1u)) q += 1u;
        e += sh;
    } else {
        q = plo;
    }
    // round_half_even(q * 2^e); magnitudes >= 1024 saturate (every clamp range is narrower).
    uint mag;
    if (e >= 0) {
        mag = (e >= 10 || q >= 1024u) ? 1024u : min(q << uint(e), 1024u);
    } else if (-e >= 26) {
        mag = 0u;  // q <= 2^24, so q * 2^e <= 0.5 and a tie rounds to even 0
    } else {
        mag = min(shr_rne(q, -e), 1024u);
    }
    int r = neg ? -int(mag) : int(mag);
    return clamp(r + zp, lo, hi);
}
#endif
