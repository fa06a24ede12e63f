"""TFLite (int8/uint8) -> vkinfer Graph, mapped onto the ONNX-style ops the session already runs.

TFLite activations are NHWC; vkinfer's convolutions are NCHW. Every tensor is kept in the layouts asked of it:
a convolution's output exists as NCHW, and a Transpose to NHWC is inserted only when an NHWC consumer (RESHAPE,
a graph output, ...) needs it, so a chain of convolutions, ADDs and MEANs runs without transposes between them.

    CONV_2D            -> QLinearConv (OHWI -> OIHW, SAME/VALID -> explicit pads, per-axis scales on axis 0)
    DEPTHWISE_CONV_2D  -> QLinearConv, group = C (1HW(C*mult) -> (C*mult)1HW: depth multiplier mult >= 1)
    FULLY_CONNECTED    -> com.microsoft:QGemm, transB = 1
    ADD                -> vkinfer:TFLiteAdd (XNNPACK's fixed-point add; numpy broadcasting; constant operands
                          allowed), com.microsoft:QLinearAdd where XNNPACK would not take it (scale ratios)
    MUL                -> com.microsoft:QLinearMul (numpy broadcasting; constant operands allowed)
    MEAN               -> vkinfer:TFLiteMean (any constant axes, keep_dims or not; XNNPACK's float32 mean)
    AVERAGE_POOL_2D    -> vkinfer:TFLiteAveragePool (NCHW; TFLite's integer average, fused activation included)
    MAX_POOL_2D        -> MaxPool (SAME/VALID -> explicit pads; padding never wins, as in TFLite)
    RESHAPE            -> Reshape (to the output tensor's static shape)
    CONCATENATION      -> Concat when every input has the output's scale and zero point (TFLite's int8 kernel
                          requires it), else com.microsoft:QLinearConcat; NHWC axis -> NCHW axis in NCHW
    PAD                -> Pad (constant mode, value = the zero point), pads permuted in NCHW
    SOFTMAX            -> vkinfer:TFLiteSoftmax (TFLite's float32 exp table, over the last axis)
    LOGISTIC           -> com.microsoft:QLinearSigmoid
    QUANTIZE           -> vkinfer:TFLiteQuantize (float input; 8-bit input of the same type where XNNPACK runs
                          it), else DequantizeLinear -> QuantizeLinear (int8 <-> uint8 requantization)
    DEQUANTIZE         -> DequantizeLinear
    RESIZE_BILINEAR    -> vkinfer:TFLiteResizeBilinear (NCHW; XNNPACK's 11-bit fixed-point interpolation)
    BATCH_MATMUL       -> vkinfer:TFLiteBatchMatMul (int8; XNNPACK's float32 or TFLite's fixed-point requantization)
    TRANSPOSE_CONV     -> ZeroInsert + QLinearConv (int8, per-channel weights; vkinfer:QLinearConvTranspose expanded),
                          vkinfer:TFLiteTransposeConv on the host where XNNPACK refuses the geometry
Fused activations (RELU, RELU6, RELU_N1_TO_1) narrow the output clamp to TFLite's bounds (zero point +
round-half-away(value / scale), CalculateActivationRangeQuantized), given as a ("clip", lo, hi) that quantizes to
exactly those bounds: a convolution (or fully connected layer) becomes vkinfer:QLinearConvClamp (or
vkinfer:QGemmClamp); MUL, MAX_POOL_2D and a QLinearAdd are followed by an identity 1x1 vkinfer:QLinearConvClamp
(weight 1, input scale = output scale: multiplier 1.0, only the clamp acts), left out where the bounds are the
type's range;
vkinfer:TFLiteAveragePool and vkinfer:TFLiteAdd take the bounds as attributes.
CONCATENATION ignores its fused activation, as TFLite does. Pooling and PAD need equal input and output
parameters (TFLite's 8-bit kernels do not rescale; other models are refused).

Numerics: vkinfer follows ONNX Runtime (float32 requantization multipliers, round half to even). ai-edge-litert's
default kernels (XNNPACK) do the same for CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, MAX_POOL_2D,
CONCATENATION, PAD, LOGISTIC: identical results on the test models (tests/importers/test_tflite.py). Where they differ:
  - QUANTIZE of float32: TFLite multiplies by float32(1 / scale), ONNX QuantizeLinear divides by the scale; the
    importer emits vkinfer:TFLiteQuantize (vkinfer/reference/tflite_quantize.py), identical to TFLite.
  - QUANTIZE int8 -> int8 / uint8 -> uint8: XNNPACK requantizes with an 8-bit-fraction multiplier (round
    half up), which vkinfer:TFLiteQuantize follows exactly when 2**-8 <= ratio <= 2**7 (ORT's DequantizeLinear
    -> QuantizeLinear differs by one step on ~2.5% of values); other ratios and int8 <-> uint8 go through float
    (TFLite's builtin fixed-point kernel: identical on the measured cases, <= 1 step in principle).
  - ADD: XNNPACK turns each scale ratio float32(x_scale / y_scale) into a ~21-bit fixed-point multiplier (shift
    20 - exponent of the larger ratio) and rounds ties up; ORT's QLinearAdd works in float32, ties to even: one
    step on a few of the 65536 input pairs of some parameter sets, which a deep network amplifies (MobileNetV2
    0.35/224, seeded: 1 of 25088 values of block2/add, then up to 39 steps on conv_last, 2 on the logits).
    vkinfer:TFLiteAdd (vkinfer/reference/tflite_add.py) is identical to TFLite on all pairs; used when both
    ratios lie in [2**-10, 2**8), XNNPACK's range (outside it TFLite's builtin kernel runs; QLinearAdd kept).
  - MUL: TFLite adds the output zero point after rounding, ORT in float32 before: one step on rare values near .5
    (4 of 524288 uint8 input pairs over 8 parameter sets, 0 int8).
  - AVERAGE_POOL_2D: XNNPACK takes float pools only, so TFLite's builtin kernel runs 8-bit ones: the integer sum
    of the raw values over the in-image window, divided by that count rounding half away from zero (ORT averages
    x - zero point in float32, half to even: one step on ~1-10% of values, ties being common, and a following
    FULLY_CONNECTED amplified it to 5 steps). vkinfer:TFLiteAveragePool (vkinfer/reference/
    tflite_average_pool.py) is identical to TFLite (SAME/VALID, activations, windows past 16 x 16).
  - MEAN: XNNPACK sums raw values, converts the sum to float32 and adds the zero points in float32 before
    rounding (ORT's QLinearGlobalAveragePool adds the output zero point after): vkinfer:TFLiteMean
    (vkinfer/reference/tflite_mean.py), identical to litert on any axes.
  - SOFTMAX: XNNPACK takes float only; TFLite's builtin kernel looks up expf(-x_scale * beta * (max - x)) in a
    float32 table and normalises in float32. vkinfer:TFLiteSoftmax (vkinfer/reference/tflite_softmax.py) does the
    same, identical on the tested cases (the float path it replaced agreed there too; it differs at float ties).
  - RESIZE_BILINEAR: XNNPACK interpolates raw values with 11-bit weights (float32 source coordinates rounded
    to 1/2048) and rounds the 22-bit fraction half up: vkinfer:TFLiteResizeBilinear (vkinfer/reference/
    tflite_resize_bilinear.py), identical to litert (align_corners, half_pixel_centers, up and down).
  - BATCH_MATMUL: XNNPACK takes it when the second operand's zero point is 0 (float32 requantization, the
    convolution contract), else TFLite's builtin kernel (QuantizeMultiplier, gemmlowp's two roundings):
    vkinfer:TFLiteBatchMatMul (vkinfer/reference/tflite_batch_matmul.py) follows both, identical to litert.
  - TRANSPOSE_CONV: XNNPACK's deconvolution requantizes as the convolution contract (identical); where it refuses
    the geometry (a kernel below the stride) TFLite's builtin kernel runs: vkinfer:TFLiteTransposeConv
    (vkinfer/reference/tflite_transpose_conv.py), gemmlowp's fixed point, one step off on rare near-halves.
Without the XNNPACK delegate (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, BUILTIN_REF) TFLite's builtin
kernels requantize with fixed-point multipliers: one step on about 0.8% of MUL values and 0.05-0.1% of
convolution outputs (measured on the test models); the tests compare with the default interpreter.

The package: reader.py (the flatbuffer: tensors, buffers, quantization, names, metadata, signatures; bulkread.py
reads a subgraph's fields column by column with numpy, fastread.py table by table with struct), builder.py
(the graph being built: layouts, constants, quantization parameters, fused activations, and `Op`, one op's
entry), ops.py (the op table: builtin op -> options class, minimum inputs, vkinfer ops it may produce, check,
build; the entries live beside their functions in ops_quantized.py, ops_moves.py and ops_xnnpack.py),
subgraphs.py (CALL_ONCE, resource variables, streaming state) and importer.py (`import_tflite`).
"""

from .importer import import_tflite
from .reader import is_tflite
from .subgraphs import StateVariable

__all__ = ["StateVariable", "import_tflite", "is_tflite"]
