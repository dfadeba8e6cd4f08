"""Writes the ONNX models the deploy tests import (run with /usr/bin/python3,
which sees Debian's python3-onnx). Usage: make_models.py OUT_DIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(0)


def init(name, shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def positive(name, shape):  # BatchNorm variances
    return numpy_helper.from_array(rng.uniform(0.5, 1.5, shape).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def save(name, nodes, inputs, outputs, inits, opset=13, ir=7, check=True):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    if check:
        onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, name + ".onnx"))


def tensor(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# A small CNN: conv+BN+relu, a repeated conv, a residual block, maxpool, a
# strided conv with SiLU, global pooling, a shape subgraph and a dense layer.
tiny = [
    helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
    helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["n1"], name="bn1"),
    helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
    helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
    helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
    helper.make_node("Conv", ["r2", "w3"], ["c3"], pads=[1, 1, 1, 1], name="conv3"),
    helper.make_node("Add", ["c3", "r1"], ["a3"], name="add3"),
    helper.make_node("Relu", ["a3"], ["r3"], name="relu3"),
    helper.make_node("Conv", ["r3", "w2"], ["c4"], pads=[1, 1, 1, 1], name="conv2_again"),
    helper.make_node("Relu", ["c4"], ["r4"], name="relu4"),
    helper.make_node("MaxPool", ["r4"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
    helper.make_node("Conv", ["p", "w4"], ["c5"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv5"),
    helper.make_node("Sigmoid", ["c5"], ["s5"], name="sig5"),
    helper.make_node("Mul", ["c5", "s5"], ["m5"], name="silu5"),
    helper.make_node("GlobalAveragePool", ["m5"], ["g"], name="gap"),
    helper.make_node("Shape", ["g"], ["gs"], name="shape"),
    helper.make_node("Gather", ["gs", "zero"], ["n"], axis=0, name="gather"),
    helper.make_node("Concat", ["n", "minus1"], ["newshape"], axis=0, name="concat"),
    helper.make_node("Reshape", ["g", "newshape"], ["f"], name="reshape"),
    helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1, name="fc"),
]
tiny_inits = [init("w1", (16, 3, 3, 3)), init("b1", (16,)), init("s", (16,)), init("b", (16,)),
              init("m", (16,)), positive("v", (16,)), init("w2", (16, 16, 3, 3)),
              init("w3", (16, 16, 3, 3)), init("w4", (32, 16, 3, 3)), init("fc_w", (10, 32)),
              init("fc_b", (10,)), ints("zero", [0]), ints("minus1", [-1])]
save("tiny", tiny, [tensor("x", [1, 3, 16, 16])], [tensor("y", [1, 10])], tiny_inits)
save("tiny_dynamic", tiny, [tensor("x", ["N", 3, 16, 16])], [tensor("y", ["N", 10])], tiny_inits)

# Pooling in ceil mode where a last window would start in the right padding
# (ONNX Runtime drops it), then a convolution that compiles, pooled again.
pool_ceil = [
    helper.make_node("MaxPool", ["x"], ["p1"], kernel_shape=[2, 2], strides=[2, 2],
                     pads=[0, 0, 1, 1], ceil_mode=1, name="maxpool_ceil"),
    helper.make_node("Conv", ["p1", "wp"], ["c1"], pads=[1, 1, 1, 1], name="conv"),
    helper.make_node("AveragePool", ["c1"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=0, name="avgpool_ceil"),
]
# A convolution with a sigmoid activation, then a residual add (the
# sigmoid is an activation here, not the gate of a SiLU).
sig_residual = [
    helper.make_node("Conv", ["x", "ws", "bs"], ["c1"], pads=[1, 1, 1, 1], name="conv"),
    helper.make_node("Sigmoid", ["c1"], ["s1"], name="sig"),
    helper.make_node("Add", ["s1", "x"], ["y"], name="residual"),
]
save("sig_residual", sig_residual, [tensor("x", [1, 4, 8, 8])], [tensor("y", [1, 4, 8, 8])],
     [init("ws", (4, 4, 3, 3)), init("bs", (4,))])

# Element-wise nodes no convolution fuses, as kernels of their own: a 5-D
# sigmoid and the chain after it (broadcast constants of rank 5 and 1 and a
# scalar, an operand that is a runtime value, HardSwish and Clip) as one
# program, a 3-D Relu; and a 5-D product whose broadcast no 4-D form keeps
# (it stays a native step). Nodes with no kernel op of their own (Tanh, Pow
# by a constant, Neg) become copies whose program does the work, one of them
# reading an input another reads too; a 6-element Exp stays native.
alone = [
    helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
    helper.make_node("Mul", ["s", "k"], ["m"], name="scale"),
    helper.make_node("Add", ["m", "t"], ["a"], name="shift"),
    helper.make_node("Sub", ["a", "x"], ["d"], name="diff"),
    helper.make_node("Div", ["d", "c"], ["q"], name="half"),
    helper.make_node("HardSwish", ["q"], ["h"], name="hswish"),
    helper.make_node("Clip", ["h", "lo", "hi"], ["y"], name="clip"),
    helper.make_node("Relu", ["z"], ["yz"], name="relu3d"),
    helper.make_node("Mul", ["xa", "xb"], ["yab"], name="outer"),
    helper.make_node("Tanh", ["w"], ["tw"], name="tanh"),
    helper.make_node("Pow", ["tw", "three"], ["yw"], name="cube"),
    helper.make_node("Neg", ["w"], ["nw"], name="negate"),
    helper.make_node("Exp", ["v"], ["yv"], name="tiny_exp"),
]
save("alone", alone,
     [tensor("x", [1, 3, 16, 16, 6]), tensor("z", [4, 32, 40]), tensor("xa", [8, 1, 8, 1, 8]),
      tensor("xb", [1, 8, 1, 8, 1]), tensor("w", [2, 48]), tensor("v", [2, 3])],
     [tensor("y", [1, 3, 16, 16, 6]), tensor("yz", [4, 32, 40]), tensor("yab", [8, 8, 8, 8, 8]),
      tensor("yw", [2, 48]), tensor("nw", [2, 48]), tensor("yv", [2, 3])],
     [init("k", (1, 3, 1, 1, 6)), init("t", (6,)),
      numpy_helper.from_array(np.array(3.0, dtype=np.float32), "three"),
      numpy_helper.from_array(np.array([2.0], dtype=np.float32), "c"),
      numpy_helper.from_array(np.array(-0.5, dtype=np.float32), "lo"),
      numpy_helper.from_array(np.array(0.8, dtype=np.float32), "hi")], opset=14)

# A 5-D Tanh then a per-channel scale: the copy kernel's input and the
# program's constant take one 4-D form together ([2,4,4,8,8] alone would
# merge N and C; with the [1,4,1,1,1] scale C stays apart).
alone5d = [helper.make_node("Tanh", ["x"], ["t"], name="tanh5d"),
           helper.make_node("Mul", ["t", "s"], ["y"], name="scale5d")]
save("alone5d", alone5d, [tensor("x", [2, 4, 4, 8, 8])], [tensor("y", [2, 4, 4, 8, 8])],
     [init("s", (1, 4, 1, 1, 1))])

# Elementwise DAGs written out as ONNX exporters write them, each to come
# out of the fuser as one program: a scale and offset by scalars then
# hard-swish as x*clip(x+3,0,6)/6 (the scaled value also a model output, so
# the program after the convolution stops there and the rest is a kernel
# of its own that reads it), Mish as x*tanh(softplus(x)), GELU as
# x*(1+erf(x/sqrt 2))/2, and x^2 - sqrt(|x|) with a per-channel scale.
def scalar(name, v):
    return numpy_helper.from_array(np.array(v, dtype=np.float32), name)


dags = [
    helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
    helper.make_node("Mul", ["c1", "s"], ["m"], name="scale"),
    helper.make_node("Add", ["m", "t"], ["a"], name="offset"),
    helper.make_node("Add", ["a", "three"], ["a3"], name="hs_add"),
    helper.make_node("Clip", ["a3", "zero", "six"], ["cl"], name="hs_clip"),
    helper.make_node("Mul", ["a", "cl"], ["hm"], name="hs_mul"),
    helper.make_node("Div", ["hm", "six"], ["hs"], name="hs_div"),
    helper.make_node("Conv", ["hs", "w2", "b2"], ["c2"], name="conv2"),
    helper.make_node("Softplus", ["c2"], ["sp"], name="mish_sp"),
    helper.make_node("Tanh", ["sp"], ["th"], name="mish_tanh"),
    helper.make_node("Mul", ["c2", "th"], ["mish"], name="mish_mul"),
    helper.make_node("Conv", ["mish", "w3"], ["c3"], pads=[1, 1, 1, 1], name="conv3"),
    helper.make_node("Div", ["c3", "sqrt2"], ["g1"], name="gelu_div"),
    helper.make_node("Erf", ["g1"], ["g2"], name="gelu_erf"),
    helper.make_node("Add", ["g2", "one"], ["g3"], name="gelu_add"),
    helper.make_node("Mul", ["c3", "g3"], ["g4"], name="gelu_mul"),
    helper.make_node("Mul", ["g4", "half"], ["gelu"], name="gelu_half"),
    helper.make_node("Conv", ["gelu", "w4", "b4"], ["c4"], name="conv4"),
    helper.make_node("Pow", ["c4", "two"], ["sq"], name="square"),
    helper.make_node("Abs", ["c4"], ["ab"], name="abs"),
    helper.make_node("Sqrt", ["ab"], ["rt"], name="root"),
    helper.make_node("Sub", ["sq", "rt"], ["df"], name="diff"),
    helper.make_node("Mul", ["df", "pc"], ["y"], name="per_channel"),
]
save("dags", dags, [tensor("x", [1, 8, 24, 40])],
     [tensor("y", [1, 16, 24, 40]), tensor("a", [1, 8, 24, 40])],
     [init("w1", (8, 8, 3, 3)), init("b1", (8,)), scalar("s", [0.7]), scalar("t", [0.3]),
      scalar("three", 3.0), scalar("zero", 0.0), scalar("six", 6.0),
      init("w2", (16, 8, 1, 1)), init("b2", (16,)), init("w3", (16, 16, 3, 3)),
      scalar("sqrt2", 1.4142135), scalar("one", 1.0), scalar("half", 0.5),
      init("w4", (16, 16, 1, 1)), init("b4", (16,)), scalar("two", 2.0), init("pc", (16, 1, 1))],
     opset=13)

# Softmax as exporters write it: over channels of NCHW (a strided axis),
# LogSoftmax over the last axis, and an opset-11 Softmax that coerces its
# input to 2-D at axis 1 (a row of 8 x 24 x 40).
softmax = [
    helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
    helper.make_node("Softmax", ["c"], ["p"], axis=1, name="over_channels"),
    helper.make_node("LogSoftmax", ["c"], ["lp"], axis=-1, name="over_rows"),
]
save("softmax", softmax, [tensor("x", [1, 4, 24, 40])],
     [tensor("p", [1, 8, 24, 40]), tensor("lp", [1, 8, 24, 40])], [init("w", (8, 4, 1, 1))],
     opset=13)
softmax_old = [helper.make_node("Softmax", ["x"], ["p"], axis=1, name="coerced")]
save("softmax_old", softmax_old, [tensor("x", [1, 8, 24, 40])], [tensor("p", [1, 8, 24, 40])],
     [], opset=11)

# Reductions as exporters write them (opset 13: ReduceSum takes its axes as
# an input, the others as an attribute), over rows (40 wide: two 16-wide
# slices and a padded one), over a strided axis,
# over neighbouring axes, over everything, with and without keepdims; a
# decomposed LayerNorm whose variance branch ends in Add eps -> Sqrt; a
# product; reductions over axes apart (a reduction per run, the op of
# the passes after the first where partials combine differently); and a
# GlobalMaxPool, a max over each channel's pixels.
N = helper.make_node
reduce = [
    N("Conv", ["x", "w"], ["c"], name="conv"),
    N("ReduceMean", ["c"], ["mean_rows"], axes=[-1], name="mean_rows"),
    N("ReduceSum", ["c", "hw"], ["sum_hw"], keepdims=0, name="sum_hw"),
    N("ReduceMax", ["c"], ["max_ch"], axes=[1], name="max_ch"),
    N("ReduceMin", ["c"], ["min_ch_h"], axes=[1, 2], keepdims=0, name="min_ch_h"),
    N("ReduceL2", ["c"], ["l2_rows"], axes=[3], keepdims=0, name="l2_rows"),
    N("ReduceL1", ["c"], ["l1_h"], axes=[2], name="l1_h"),
    N("ReduceLogSumExp", ["c"], ["lse_ch"], axes=[1], name="lse_ch"),
    N("ReduceSumSquare", ["c"], ["ss_all"], name="ss_all"),
    N("Mul", ["c", "c"], ["sq"], name="square"),
    N("ReduceLogSum", ["sq"], ["ls_rows"], axes=[3], name="ls_rows"),
    N("ReduceMean", ["c"], ["ln_mean"], axes=[3], name="ln_mean"),
    N("Sub", ["c", "ln_mean"], ["ln_d"], name="ln_sub"),
    N("Pow", ["ln_d", "two"], ["ln_d2"], name="ln_pow"),
    N("ReduceMean", ["ln_d2"], ["ln_var"], axes=[3], name="ln_var"),
    N("Add", ["ln_var", "eps"], ["ln_ve"], name="ln_add"),
    N("Sqrt", ["ln_ve"], ["ln_std"], name="ln_sqrt"),
    N("Div", ["ln_d", "ln_std"], ["ln"], name="ln_div"),
    N("ReduceMax", ["c"], ["max_rows"], axes=[-1], keepdims=0, name="max_rows"),
    N("ReduceMin", ["c"], ["min_rows"], axes=[-1], keepdims=0, name="min_rows"),
    N("ReduceLogSumExp", ["c"], ["lse_rows"], axes=[-1], keepdims=0, name="lse_rows"),
    N("ReduceSum", ["c", "apart"], ["sum_apart"], name="sum_apart"),
    N("ReduceProd", ["c"], ["prod_w"], axes=[3], name="prod_w"),
    N("ReduceL1", ["c"], ["l1_apart"], axes=[1, 3], keepdims=0, name="l1_apart"),
    N("ReduceLogSum", ["sq"], ["ls_apart"], axes=[1, 3], keepdims=0, name="ls_apart"),
    N("ReduceSumSquare", ["c"], ["ss_apart"], axes=[0, 1, 3], name="ss_apart"),
    N("ReduceLogSumExp", ["c"], ["lse_apart"], axes=[1, 3], name="lse_apart"),
    N("ReduceL2", ["c"], ["l2_apart"], axes=[1, 3], keepdims=0, name="l2_apart"),
    N("GlobalMaxPool", ["c"], ["gmp"], name="gmp"),
]
save("reduce", reduce, [tensor("x", [1, 4, 24, 40])],
     [tensor("mean_rows", [1, 8, 24, 1]), tensor("sum_hw", [1, 8]), tensor("max_ch", [1, 1, 24, 40]),
      tensor("min_ch_h", [1, 40]), tensor("l2_rows", [1, 8, 24]), tensor("l1_h", [1, 8, 1, 40]),
      tensor("lse_ch", [1, 1, 24, 40]), tensor("ss_all", [1, 1, 1, 1]),
      tensor("ls_rows", [1, 8, 24, 1]), tensor("ln", [1, 8, 24, 40]),
      tensor("max_rows", [1, 8, 24]), tensor("min_rows", [1, 8, 24]),
      tensor("lse_rows", [1, 8, 24]),
      tensor("sum_apart", [1, 1, 24, 1]), tensor("prod_w", [1, 8, 24, 1]),
      tensor("l1_apart", [1, 24]), tensor("ls_apart", [1, 24]), tensor("ss_apart", [1, 1, 24, 1]),
      tensor("lse_apart", [1, 1, 24, 1]), tensor("l2_apart", [1, 24]), tensor("gmp", [1, 8, 1, 1])],
     [init("w", (8, 4, 1, 1)), ints("hw", [2, 3]), ints("apart", [1, 3]), scalar("two", 2.0),
      scalar("eps", 1e-5)],
     opset=13)

# Reductions of a value written channels-last (a 1x1 conv to 16 channels),
# keeping their dimensions: a squeeze-and-excite mean over H, W scaling the
# conv's output, a max over channels, a sum over H, and an L2 over C and W
# (apart in NCHW, neighbours in NHWC, two passes after import), and a
# GlobalMaxPool.
reduce_nhwc = [
    N("Conv", ["x", "w"], ["c"], name="conv"),
    N("ReduceMean", ["c"], ["se"], axes=[2, 3], name="se_mean"),
    N("Mul", ["c", "se"], ["scaled"], name="se_mul"),
    N("Conv", ["scaled", "w2"], ["y"], name="conv2"),
    N("ReduceMax", ["c"], ["max_c"], axes=[1], name="max_c"),
    N("ReduceSum", ["c", "h"], ["sum_h"], name="sum_h"),
    N("ReduceL2", ["c"], ["l2_cw"], axes=[1, 3], name="l2_cw"),
    N("GlobalMaxPool", ["c"], ["gmp"], name="gmp"),
]
save("reduce_nhwc", reduce_nhwc, [tensor("x", [1, 4, 24, 40])],
     [tensor("y", [1, 8, 24, 40]), tensor("max_c", [1, 1, 24, 40]), tensor("sum_h", [1, 16, 1, 40]),
      tensor("l2_cw", [1, 1, 24, 1]), tensor("gmp", [1, 16, 1, 1])],
     [init("w", (16, 4, 1, 1)), init("w2", (8, 16, 1, 1)), ints("h", [2])],
     opset=13)

# Normalizations (opset 17): LayerNormalization over the last axis with a
# bias, over the last two without one, and with a scale that repeats along
# the row; InstanceNormalization of one image.
norm = [
    N("Conv", ["x", "w"], ["c"], name="conv"),
    N("LayerNormalization", ["c", "g40", "b40"], ["ln_rows"], axis=-1, name="ln_rows"),
    N("LayerNormalization", ["c", "g960"], ["ln_hw"], axis=2, epsilon=1e-3, name="ln_hw"),
    N("InstanceNormalization", ["c", "s8", "t8"], ["inorm"], name="inorm"),
    N("LayerNormalization", ["c", "g40"], ["ln_bcast"], axis=2, name="ln_bcast"),
]
save("norm", norm, [tensor("x", [1, 4, 24, 40])],
     [tensor("ln_rows", [1, 8, 24, 40]), tensor("ln_hw", [1, 8, 24, 40]),
      tensor("inorm", [1, 8, 24, 40]), tensor("ln_bcast", [1, 8, 24, 40])],
     [init("w", (8, 4, 1, 1)), init("g40", (40,)), init("b40", (40,)), init("g960", (24, 40)),
      init("s8", (8,)), init("t8", (8,))],
     opset=17)

# Normalizations of a batch of two: InstanceNormalization (per channel of
# each image), LayerNormalization over [C, H, W] with a scale [1, W] (leading
# 1s), and one with a scale over the rows [H, 1] that stays native.
norm_batch = [
    N("Conv", ["x", "w"], ["c"], name="conv"),
    N("InstanceNormalization", ["c", "s8", "t8"], ["inorm"], name="inorm"),
    N("LayerNormalization", ["c", "g1w", "b1w"], ["ln_lead1"], axis=1, name="ln_lead1"),
    N("LayerNormalization", ["c", "gh1"], ["ln_rows_scale"], axis=2, name="ln_rows_scale"),
]
save("norm_batch", norm_batch, [tensor("x", [2, 4, 16, 20])],
     [tensor("inorm", [2, 8, 16, 20]), tensor("ln_lead1", [2, 8, 16, 20]),
      tensor("ln_rows_scale", [2, 8, 16, 20])],
     [init("w", (8, 4, 1, 1)), init("s8", (8,)), init("t8", (8,)), init("g1w", (1, 20)),
      init("b1w", (1, 20)), init("gh1", (16, 1))],
     opset=17)

# Linear resizes between convolutions: x2 by scales (half pixel, the
# default), to a size with align_corners, and a downsampling by sizes with
# pytorch_half_pixel.
resize_linear = [
    N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
    N("Resize", ["c", "", "x2"], ["up"], mode="linear", name="up_half_pixel"),
    N("Resize", ["c", "", "", "size"], ["ac"], mode="linear",
      coordinate_transformation_mode="align_corners", name="up_align_corners"),
    N("Resize", ["c", "", "", "down"], ["dn"], mode="linear",
      coordinate_transformation_mode="pytorch_half_pixel", name="down_pytorch"),
    N("Conv", ["up", "w2"], ["y"], name="conv2"),
]
save("resize_linear", resize_linear, [tensor("x", [1, 3, 20, 24])],
     [tensor("y", [1, 8, 40, 48]), tensor("ac", [1, 8, 37, 45]), tensor("dn", [1, 8, 8, 10])],
     [init("w", (8, 3, 3, 3)), init("w2", (8, 8, 1, 1)),
      numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "x2"),
      ints("size", [1, 8, 37, 45]), ints("down", [1, 8, 8, 10])],
     opset=13)

# Upsampling by a transposed convolution (kernel = stride 2, bias, ReLU),
# as text detectors' heads do, between two convolutions.
upsample = [
    helper.make_node("Conv", ["x", "wc"], ["c"], pads=[1, 1, 1, 1], name="conv"),
    helper.make_node("ConvTranspose", ["c", "wt", "bt"], ["u"], kernel_shape=[2, 2],
                     strides=[2, 2], name="up"),
    helper.make_node("Relu", ["u"], ["r"], name="relu"),
    helper.make_node("Conv", ["r", "wo"], ["y"], name="head"),
]
save("upsample", upsample, [tensor("x", [1, 4, 10, 12])], [tensor("y", [1, 2, 20, 24])],
     [init("wc", (6, 4, 3, 3)), init("wt", (6, 5, 2, 2)), init("bt", (5,)), init("wo", (2, 5, 1, 1))])

# The same channels-last: a 1x1 conv of whole channel vectors, the
# upsampling (16 -> 8 channels, BatchNorm folded into it), a narrow 1x1 conv
# (4 channels) read only by a convolution, and a 2-channel head.
upsample_nhwc = [
    helper.make_node("Conv", ["x", "wc"], ["c"], name="conv"),
    helper.make_node("Relu", ["c"], ["cr"], name="conv_relu"),
    helper.make_node("ConvTranspose", ["cr", "wt", "bt"], ["u"], kernel_shape=[2, 2],
                     strides=[2, 2], name="up"),
    helper.make_node("BatchNormalization", ["u", "bn_s", "bn_b", "bn_m", "bn_v"], ["ub"],
                     name="up_bn"),
    helper.make_node("Relu", ["ub"], ["r"], name="relu"),
    helper.make_node("Conv", ["r", "wn"], ["n"], name="narrow"),
    helper.make_node("Conv", ["n", "wo"], ["y"], name="head"),
]
save("upsample_nhwc", upsample_nhwc, [tensor("x", [1, 4, 10, 12])], [tensor("y", [1, 2, 20, 24])],
     [init("wc", (16, 4, 1, 1)), init("wt", (16, 8, 2, 2)), init("bt", (8,)),
      init("bn_s", (8,)), init("bn_b", (8,)), init("bn_m", (8,)), positive("bn_v", (8,)),
      init("wn", (4, 8, 1, 1)), init("wo", (2, 4, 1, 1))])

save("pool_ceil", pool_ceil, [tensor("x", [1, 4, 10, 11])], [tensor("y", [1, 8, 3, 4])], [init("wp", (8, 4, 3, 3))])

# Opset 9 forms: Clip with attributes, Slice with attributes, Upsample with
# a scales input; a 1-D convolution with asymmetric pads; Unsqueeze axes as
# an attribute.
old = [
    helper.make_node("Conv", ["x", "w"], ["c"], pads=[2, 1], name="conv1d"),
    helper.make_node("Clip", ["c"], ["r6"], min=0.0, max=6.0, name="relu6"),
    helper.make_node("Unsqueeze", ["r6"], ["u"], axes=[2], name="unsq"),
    helper.make_node("Upsample", ["u", "scales"], ["up"], mode="nearest", name="up"),
    helper.make_node("Slice", ["up"], ["y"], starts=[1], ends=[15], axes=[3], name="slice"),
]
save("opset9", old, [tensor("x", [1, 4, 12])], [tensor("y", [1, 8, 2, 14])],
     [init("w", (8, 4, 3)),
      numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")], opset=9,
     ir=4)

# 1-D convolutions a channels-last build must leave NCHW (3-D values): a
# 1x1 one with whole channel vectors, then a wide one.
conv1d = [helper.make_node("Conv", ["x", "w1"], ["a"], name="pointwise1d"),
          helper.make_node("Relu", ["a"], ["r"], name="relu1d"),
          helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1], name="wide1d")]
save("conv1d", conv1d, [tensor("x", [1, 8, 900])], [tensor("y", [1, 16, 900])],
     [init("w1", (16, 8, 1)), init("w2", (16, 16, 3))])

# Native steps after channels-last 1x1 convs (16 channels: whole vectors
# for AVX2 and AVX-512): a Concat, a Resize, elementwise ops with a
# per-channel and a per-column constant (as their first operand, so not
# kernels).
nhwc_native = [
    helper.make_node("Conv", ["x", "w1"], ["a"], name="pw_a"),
    helper.make_node("Conv", ["x", "w2"], ["b"], name="pw_b"),
    helper.make_node("Concat", ["a", "b"], ["ab"], axis=1, name="cat"),
    helper.make_node("Resize", ["ab", "", "scales"], ["up"], mode="nearest", name="up2"),
    helper.make_node("Max", ["per_channel", "up"], ["m"], name="floor"),
    helper.make_node("Min", ["per_column", "m"], ["y"], name="ceiling"),
]
save("nhwc_native", nhwc_native, [tensor("x", [1, 8, 8, 8])], [tensor("y", [1, 32, 16, 16])],
     [init("w1", (16, 8, 1, 1)), init("w2", (16, 8, 1, 1)), init("per_channel", (1, 32, 1, 1)),
      init("per_column", (16,)),
      numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")])

# Steps that only select a contiguous part of a value (views the package
# places inside it): a channel Split, a Gather of one channel, one-channel
# Slices at 64-byte and at 4-byte places; a Slice along the last axis is
# not one.
views = [
    helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
    helper.make_node("Split", ["c", "parts"], ["s1", "s2"], axis=1, name="split"),
    helper.make_node("Relu", ["s1"], ["y1"], name="relu1"),
    helper.make_node("Neg", ["s2"], ["y2"], name="neg2"),
    helper.make_node("Gather", ["c", "three"], ["g"], axis=1, name="gather"),
    helper.make_node("Slice", ["c", "one", "two", "one"], ["sl"], name="channel"),
    helper.make_node("Reshape", ["c", "flat_shape"], ["flat"], name="flatten"),
    helper.make_node("Slice", ["flat", "one", "five", "one"], ["row"], name="row"),
    helper.make_node("Slice", ["c", "one", "three_i", "last"], ["cols"], name="columns"),
]
save("views", views, [tensor("x", [1, 8, 4, 4])],
     [tensor("y1", [1, 2, 4, 4]), tensor("y2", [1, 6, 4, 4]), tensor("g", [1, 4, 4]),
      tensor("sl", [1, 1, 4, 4]), tensor("row", [1, 4]), tensor("cols", [1, 8, 4, 2])],
     [init("w", (8, 8, 1, 1)), ints("parts", [2, 6]), ints("three", 3), ints("one", [1]),
      ints("two", [2]), ints("three_i", [3]), ints("last", [-1]), ints("five", [5]),
      ints("flat_shape", [1, 128])], opset=13)

# TopK with k from a constant input: values and indices.
topk = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("TopK", ["c", "k"], ["y", "i"], name="the_topk")]
save("topk", topk, [tensor("x", [1, 2, 4, 4])], [tensor("y", [1, 2, 4, 2])],
     [init("w", (2, 2, 1, 1)), ints("k", [2])])

unsupported = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
               helper.make_node("Unique", ["c"], ["y"], name="the_unique")]
save("unsupported", unsupported, [tensor("x", [1, 2, 4, 4])],
     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [init("w", (2, 2, 1, 1))],
     check=False)

many = [helper.make_node("Log", ["x"], ["l"], name="log1"),
        helper.make_node("GreaterOrEqual", ["l", "x"], ["g1"], name="ge1"),
        helper.make_node("GreaterOrEqual", ["x", "l"], ["g2"], name="ge2"),
        helper.make_node("And", ["g1", "g2"], ["y"], name="both")]
save("many_unsupported", many, [tensor("x", [2, 3])],
     [helper.make_tensor_value_info("y", TensorProto.BOOL, [2, 3])], [], check=False)

# An If on a runtime condition whose branches give outputs of different
# shapes (2 and 4): both branches cannot run and be selected between.
then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [tensor("t", None)])
twice = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], "twice", [],
                          [tensor("t", None)])
save("control_flow",
     [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=twice, name="branch")],
     [helper.make_tensor_value_info("cond", TensorProto.BOOL, [1]), tensor("x", [2])],
     [tensor("y", None)], [], check=False)

# An If on a condition computed from the data (a wake-word verifier's
# form): 2 sigmoid(x) where x sums above 0, else -3 x. The branches name
# their values alike ("t") and their initializers alike ("k": 2 and 3).
pos_g = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["s"]),
                           helper.make_node("Mul", ["s", "k"], ["t"])], "pos", [],
                          [tensor("t", None)], [numpy_helper.from_array(np.float32(2.0), "k")])
neg_g = helper.make_graph([helper.make_node("Neg", ["x"], ["n"]),
                           helper.make_node("Mul", ["n", "k"], ["t"])], "neg", [],
                          [tensor("t", None)], [numpy_helper.from_array(np.float32(3.0), "k")])
save("runtime_branch",
     [helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
      helper.make_node("Greater", ["sum", "zero"], ["positive"]),
      helper.make_node("If", ["positive"], ["y"], then_branch=pos_g, else_branch=neg_g,
                       name="by_sign")],
     [tensor("x", [2, 3])], [tensor("y", [2, 3])],
     [numpy_helper.from_array(np.float32(0.0), "zero")], check=False)

# A decoder's attention step over a key/value cache of P past tokens (P a
# dynamic dimension: 0 on the first step): the cache grows by a Concat,
# scores, Softmax and the weighted values.
save("kv_step",
     [helper.make_node("Concat", ["past_k", "k"], ["present_k"], axis=2),
      helper.make_node("Concat", ["past_v", "v"], ["present_v"], axis=2),
      helper.make_node("Transpose", ["present_k"], ["kt"], perm=[0, 1, 3, 2]),
      helper.make_node("MatMul", ["q", "kt"], ["s0"]),
      helper.make_node("Mul", ["s0", "scale"], ["s"]),
      helper.make_node("Softmax", ["s"], ["a"], axis=-1),
      helper.make_node("MatMul", ["a", "present_v"], ["y"])],
     [tensor("q", [1, 2, 1, 4]), tensor("k", [1, 2, 1, 4]), tensor("v", [1, 2, 1, 4]),
      tensor("past_k", [1, 2, "P", 4]), tensor("past_v", [1, 2, "P", 4])],
     [tensor("y", [1, 2, 1, 4]), tensor("present_k", None), tensor("present_v", None)],
     [numpy_helper.from_array(np.float32(0.5), "scale")], check=False)

# Rows of a batch N (0 allowed) through a dense layer: an output of N rows.
save("rows_dense",
     [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
     [tensor("x", ["N", 4])], [tensor("y", None)], [init("w", (4, 3))], check=False)

# An If on a runtime sample rate (as Silero VAD's): imports once `rate` is
# fixed with ImportOptions::input_values; 16000 takes Relu, others Neg.
relu_g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "relu", [], [tensor("r", None)])
neg_g = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "neg", [], [tensor("n", None)])
save("rate_branch",
     [helper.make_node("Equal", ["rate", "r16k"], ["is16k"]),
      helper.make_node("If", ["is16k"], ["y"], then_branch=relu_g, else_branch=neg_g,
                       name="by_rate")],
     [helper.make_tensor_value_info("rate", TensorProto.INT64, []), tensor("x", [2, 3])],
     [tensor("y", [2, 3])], [ints("r16k", 16000)], check=False)

cycle = [helper.make_node("Relu", ["x2"], ["x1"], name="a"),
         helper.make_node("Relu", ["x1"], ["x2"], name="b")]
save("cycle", cycle, [tensor("x", [2])], [tensor("x2", [2])], [], check=False)

save("opset19", [helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])],
     [], opset=19, ir=9, check=False)


# PRelu as face-embedding and pruned networks use it: after a convolution
# and its BatchNorm (slope per channel, [C, 1, 1]), after a depthwise
# convolution with an odd channel count, with one slope for every channel,
# and on a graph input that no convolution produces (a kernel of its own).
prelu = [
    helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2],
                     name="conv1"),
    helper.make_node("BatchNormalization", ["c1", "g1", "be1", "mu1", "var1"], ["n1"],
                     name="bn1"),
    helper.make_node("PRelu", ["n1", "a1"], ["p1"], name="prelu_bn"),
    helper.make_node("Conv", ["p1", "wdw"], ["c2"], pads=[1, 1, 1, 1], group=21, name="dw"),
    helper.make_node("PRelu", ["c2", "a2"], ["p2"], name="prelu_dw"),
    helper.make_node("Conv", ["p2", "w3", "b3"], ["c3"], name="pw_odd"),
    helper.make_node("PRelu", ["c3", "a3"], ["y"], name="prelu_shared"),
    helper.make_node("PRelu", ["x", "a0"], ["yx"], name="prelu_input"),
]
save("prelu", prelu, [tensor("x", [1, 8, 24, 40])],
     [tensor("y", [1, 13, 12, 20]), tensor("yx", [1, 8, 24, 40])],
     [init("w1", (21, 8, 3, 3)), init("g1", (21,)), init("be1", (21,)), init("mu1", (21,)),
      positive("var1", (21,)), init("a1", (21, 1, 1)), init("wdw", (21, 1, 3, 3)),
      init("a2", (21, 1, 1)), init("w3", (13, 21, 1, 1)), init("b3", (13,)),
      scalar("a3", [0.25]), init("a0", (8, 1, 1))],
     opset=13)

# A model exported in float16 with float32 inputs and outputs (as converters
# that keep the I/O types write it): initializers in float16 (raw data and,
# for the bias, int32_data bit patterns), Casts at both ends and one inside
# (to bfloat16 and back). Weights scaled so the values stay within float16.
fp16 = np.random.default_rng(16)
w16 = numpy_helper.from_array((fp16.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float16), "w16")
b16 = helper.make_tensor("b16", TensorProto.FLOAT16, [16],
                         (fp16.standard_normal(16) * 0.1).astype(np.float16).tolist())
w16b = numpy_helper.from_array((fp16.standard_normal((8, 16, 1, 1)) * 0.3).astype(np.float16),
                               "w16b")
half = [
    helper.make_node("Cast", ["x"], ["xh"], to=TensorProto.FLOAT16, name="to_half"),
    helper.make_node("Conv", ["xh", "w16", "b16"], ["c1"], pads=[1, 1, 1, 1], name="conv_h"),
    helper.make_node("Relu", ["c1"], ["r1"], name="relu_h"),
    helper.make_node("Cast", ["r1"], ["rb"], to=TensorProto.BFLOAT16, name="to_bf16"),
    helper.make_node("Cast", ["rb"], ["rh"], to=TensorProto.FLOAT16, name="back_h"),
    helper.make_node("Conv", ["rh", "w16b"], ["c2"], name="conv_h2"),
    helper.make_node("Cast", ["c2"], ["y"], to=TensorProto.FLOAT, name="to_float"),
]
save("fp16_io32", half, [tensor("x", [1, 8, 16, 16])], [tensor("y", [1, 8, 16, 16])],
     [w16, b16, w16b], opset=13)

# BatchNorm that no convolution absorbs, as DenseNet-style and
# post-activation networks place it: after a concatenation (pre-activation
# BN + ReLU before each convolution of a dense block), and after a ReLU.
dn = np.random.default_rng(21)


def dn_init(name, shape, positive_values=False):
    v = dn.uniform(0.5, 1.5, shape) if positive_values else dn.standard_normal(shape)
    return numpy_helper.from_array(v.astype(np.float32), name)


def dn_bn(prefix, c):
    return [dn_init(prefix + "_g", (c,)), dn_init(prefix + "_b", (c,)),
            dn_init(prefix + "_m", (c,)), dn_init(prefix + "_v", (c,), True)]


dense = [
    helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
    helper.make_node("Concat", ["x", "c1"], ["cat1"], axis=1, name="cat1"),
    helper.make_node("BatchNormalization", ["cat1", "bn1_g", "bn1_b", "bn1_m", "bn1_v"], ["n1"],
                     name="bn1"),
    helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
    helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
    helper.make_node("Concat", ["cat1", "c2"], ["cat2"], axis=1, name="cat2"),
    helper.make_node("BatchNormalization", ["cat2", "bn2_g", "bn2_b", "bn2_m", "bn2_v"], ["n2"],
                     name="bn2"),
    helper.make_node("Relu", ["n2"], ["r2"], name="relu2"),
    helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], name="conv3"),
    helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
    helper.make_node("BatchNormalization", ["r3", "bn3_g", "bn3_b", "bn3_m", "bn3_v"], ["y"],
                     name="bn_after_relu"),
]
save("dense_bn", dense, [tensor("x", [1, 8, 16, 16])], [tensor("y", [1, 16, 16, 16])],
     [dn_init("w1", (12, 8, 3, 3)), *dn_bn("bn1", 20), dn_init("w2", (12, 20, 1, 1)),
      *dn_bn("bn2", 32), dn_init("w3", (16, 32, 3, 3)), dn_init("b3", (16,)), *dn_bn("bn3", 16)],
     opset=13)

# A dense layer's BatchNorm + ReLU after a concatenation of channels-last
# values (two 1x1 convolutions of 16 channels, whole vectors): one
# channels-last kernel for the concatenation and its BatchNorm + ReLU.
dense_cl = [
    helper.make_node("Conv", ["x", "w1"], ["a"], name="pw_a"),
    helper.make_node("Conv", ["a", "w2"], ["b"], name="pw_b"),
    helper.make_node("Concat", ["a", "b"], ["cat"], axis=1, name="cat"),
    helper.make_node("BatchNormalization", ["cat", "bn_g", "bn_b", "bn_m", "bn_v"], ["n"],
                     name="bn"),
    helper.make_node("Relu", ["n"], ["r"], name="relu"),
    helper.make_node("Conv", ["r", "w3"], ["y"], name="pw_y"),
]
save("dense_nhwc", dense_cl, [tensor("x", [1, 8, 6, 10])], [tensor("y", [1, 16, 6, 10])],
     [dn_init("w1", (16, 8, 1, 1)), dn_init("w2", (16, 16, 1, 1)), *dn_bn("bn", 32),
      dn_init("w3", (16, 32, 1, 1))], opset=13)

# The same concatenation with a runtime 3-D value added after it (a model
# input broadcast over the batch): the program would read it channels-last,
# which a 3-D value has no form for, so the Concat stays a step of its own.
concat_3d = [
    helper.make_node("Conv", ["x", "w1"], ["a"], name="pw_a"),
    helper.make_node("Conv", ["a", "w2"], ["b"], name="pw_b"),
    helper.make_node("Concat", ["a", "b"], ["cat"], axis=1, name="cat"),
    helper.make_node("Add", ["cat", "z"], ["s"], name="add_z"),
    helper.make_node("Relu", ["s"], ["r"], name="relu"),
    helper.make_node("Conv", ["r", "w3"], ["y"], name="pw_y"),
]
save("concat_add_3d", concat_3d,
     [tensor("x", [1, 8, 6, 10]), tensor("z", [32, 6, 10])], [tensor("y", [1, 16, 6, 10])],
     [dn_init("w1", (16, 8, 1, 1)), dn_init("w2", (16, 16, 1, 1)),
      dn_init("w3", (16, 32, 1, 1))], opset=13)

# tf2onnx's "SAME" stride-2 convolution: a Pad of zeros on the bottom and
# right, then a Conv without pads (the Pad folds into the Conv's pads); a
# Pad of another value stays an operator.
pad_conv = [
    helper.make_node("Pad", ["x", "pads1"], ["p1"], mode="constant", name="pad_zero"),
    helper.make_node("Conv", ["p1", "pw1"], ["c1"], strides=[2, 2], name="conv_s2"),
    helper.make_node("Pad", ["c1", "pads2", "half"], ["p2"], mode="constant", name="pad_half"),
    helper.make_node("Conv", ["p2", "pw2"], ["y"], name="conv_after_half"),
]
save("pad_conv", pad_conv, [tensor("x", [1, 8, 15, 15])], [tensor("y", [1, 16, 7, 7])],
     [ints("pads1", [0, 0, 0, 0, 0, 0, 1, 1]), dn_init("pw1", (12, 8, 3, 3)),
      ints("pads2", [0, 0, 1, 1, 0, 0, 1, 1]),
      numpy_helper.from_array(np.asarray(0.5, dtype=np.float32), "half"),
      dn_init("pw2", (16, 12, 3, 3))],
     opset=13)

# NCHW 1x1 convolutions: the first (shallow, 32 outputs, rows of 20) reads
# its pixels as one row, with a per-pixel residual and a per-channel PRelu
# fused after it; the second's bias varies along the row only, so it keeps
# its rows; the third's rows (12) are too short.
pointwise = [
    helper.make_node("Conv", ["x", "pw_w1", "pw_b1"], ["c1"], name="pw_flat"),
    helper.make_node("Add", ["c1", "r"], ["a1"], name="pw_residual"),
    helper.make_node("PRelu", ["a1", "pw_slope"], ["p1"], name="pw_prelu"),
    helper.make_node("Conv", ["p1", "pw_w2"], ["c2"], name="pw_rowwise"),
    helper.make_node("Add", ["c2", "pw_row"], ["a2"], name="pw_row_bias"),
    helper.make_node("MaxPool", ["a2"], ["m2"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
                     name="pw_pool"),
    helper.make_node("Conv", ["m2", "pw_w3"], ["y"], name="pw_short"),
]
save("pointwise", pointwise, [tensor("x", [1, 24, 20, 22]), tensor("r", [1, 32, 20, 22])],
     [tensor("y", [1, 16, 11, 12])],
     [init("pw_w1", (32, 24, 1, 1)), init("pw_b1", (32,)), init("pw_slope", (32, 1, 1)),
      init("pw_w2", (16, 32, 1, 1)), init("pw_row", (1, 22)), init("pw_w3", (16, 16, 1, 1))])

# An initializer of an element type the importer does not read (strings).
save("string_init", [helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])],
     [tensor("y", [2])], [helper.make_tensor("labels", TensorProto.STRING, [2], [b"a", b"b"])],
     check=False)

# A dynamically quantized network as ONNX Runtime's quantize_dynamic writes
# it: each activation quantized at run time (DynamicQuantizeLinear), 8-bit
# weights with their zero points (per tensor for the convolution, per
# column for the dense layer), ConvInteger and MatMulInteger, their int32
# sums cast to float and scaled; and a QDQ weight (int8, per output
# channel) that folds into the float convolution after it.
q8 = np.random.default_rng(8)


def u8(name, shape):
    return numpy_helper.from_array(q8.integers(0, 256, shape).astype(np.uint8), name)


def f32(name, v):
    return numpy_helper.from_array(np.asarray(v, dtype=np.float32), name)


quant = [
    helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="quant_x"),
    helper.make_node("ConvInteger", ["xq", "wq", "xz", "wz"], ["ci"], pads=[1, 1, 1, 1],
                     name="conv_int"),
    helper.make_node("Cast", ["ci"], ["cf"], to=TensorProto.FLOAT, name="conv_cast"),
    helper.make_node("Mul", ["xs", "ws"], ["cs"], name="conv_scale"),
    helper.make_node("Mul", ["cf", "cs"], ["cm"], name="conv_rescale"),
    helper.make_node("Add", ["cm", "cb"], ["cba"], name="conv_bias"),
    helper.make_node("Relu", ["cba"], ["cr"], name="conv_relu"),
    helper.make_node("DequantizeLinear", ["w8", "w8s", "w8z"], ["wd"], axis=0, name="dq_w"),
    helper.make_node("Conv", ["cr", "wd"], ["c2"], name="conv_qdq"),
    helper.make_node("Flatten", ["c2"], ["fl"], axis=1, name="flatten"),
    helper.make_node("DynamicQuantizeLinear", ["fl"], ["fq", "fs", "fz"], name="quant_f"),
    helper.make_node("MatMulInteger", ["fq", "bq", "fz", "bz"], ["mi"], name="matmul_int"),
    helper.make_node("Cast", ["mi"], ["mf"], to=TensorProto.FLOAT, name="matmul_cast"),
    helper.make_node("Mul", ["fs", "bs"], ["ms"], name="matmul_scale"),
    helper.make_node("Mul", ["mf", "ms"], ["y"], name="matmul_rescale"),
]
save("quant_dynamic", quant, [tensor("x", [1, 4, 12, 12])], [tensor("y", [1, 10])],
     [u8("wq", (8, 4, 3, 3)), numpy_helper.from_array(np.array(131, dtype=np.uint8), "wz"),
      f32("ws", 0.004), f32("cb", q8.standard_normal((8, 1, 1)) * 0.1),
      numpy_helper.from_array(q8.integers(-127, 128, (6, 8, 1, 1)).astype(np.int8), "w8"),
      f32("w8s", q8.uniform(0.005, 0.02, 6)),
      numpy_helper.from_array(np.zeros(6, dtype=np.int8), "w8z"),
      u8("bq", (6 * 12 * 12, 10)), u8("bz", (10,)), f32("bs", 0.003)],
     opset=13)

# A QDQ model as ONNX Runtime's static quantization writes it: activations
# quantized and dequantized around each layer (int8 before the
# convolution, uint8 after), the weight int8 per output channel and
# dequantized (a DequantizeLinear of constants, folded at import).
qdq = [
    helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q_in"),
    helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq_in"),
    helper.make_node("DequantizeLinear", ["qw", "qws", "qwz"], ["wd"], axis=0, name="dq_w"),
    helper.make_node("Conv", ["xd", "wd", "qb"], ["c"], pads=[1, 1, 1, 1], name="qdq_conv"),
    helper.make_node("Relu", ["c"], ["r"], name="qdq_relu"),
    helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"], name="q_out"),
    helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dq_out"),
]
save("quant_qdq", qdq, [tensor("x", [1, 3, 10, 10])], [tensor("y", [1, 8, 10, 10])],
     [f32("xs", 0.01), numpy_helper.from_array(np.array(-3, dtype=np.int8), "xz"),
      numpy_helper.from_array(q8.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8), "qw"),
      f32("qws", q8.uniform(0.002, 0.01, 8)), numpy_helper.from_array(np.zeros(8, dtype=np.int8), "qwz"),
      f32("qb", q8.standard_normal(8) * 0.1), f32("ys", 0.02),
      numpy_helper.from_array(np.array(7, dtype=np.uint8), "yz")],
     opset=13)

# Pads as PyTorch's F.pad exports them: [left, right] of the last dimension
# joined with zeros, reshaped to pairs, the pairs reversed (a slice of step
# -1), transposed and flattened, then cast; every step folds at import.
chain = [
    helper.make_node("ConstantOfShape", ["zeros_len"], ["zeros"],
                     value=helper.make_tensor("v", TensorProto.INT64, [1], [0]), name="zeros"),
    helper.make_node("Concat", ["lr", "zeros"], ["pads6"], axis=0, name="pads_concat"),
    helper.make_node("Reshape", ["pads6", "pairs"], ["pads32"], name="pads_pairs"),
    helper.make_node("Slice", ["pads32", "s_start", "s_end", "s_axes", "s_step"], ["rev"],
                     name="pads_reverse"),
    helper.make_node("Transpose", ["rev"], ["revt"], perm=[1, 0], name="pads_transpose"),
    helper.make_node("Reshape", ["revt", "flat"], ["pads"], name="pads_flat"),
    helper.make_node("Cast", ["pads"], ["pads64"], to=TensorProto.INT64, name="pads_cast"),
    helper.make_node("Pad", ["x", "pads64"], ["y"], mode="reflect", name="pad"),
]
save("pad_chain", chain, [tensor("x", [1, 4, 64])], [tensor("y", [1, 4, 67])],
     [ints("zeros_len", [4]), ints("lr", [1, 2]), ints("pairs", [-1, 2]), ints("s_start", [-1]),
      ints("s_end", [-9223372036854775807]), ints("s_axes", [0]), ints("s_step", [-1]),
      ints("flat", [-1])], opset=13)

# A dense block as torchvision's DenseNet exports it: every layer
# concatenates all the features before it (the block's input and each
# layer's output), BatchNorm + ReLU + convolution after each concatenation.
tv = np.random.default_rng(121)


def tv_init(name, shape, positive_values=False):
    v = tv.uniform(0.5, 1.5, shape) if positive_values else tv.standard_normal(shape) * 0.3
    return numpy_helper.from_array(v.astype(np.float32), name)


block, block_inits = [helper.make_node("Conv", ["x", "w0"], ["f0"], pads=[1, 1, 1, 1],
                                       name="stem"),
                      helper.make_node("Relu", ["f0"], ["x0"], name="stem_relu")], \
    [tv_init("w0", (8, 3, 3, 3))]
features, channels = ["x0"], 8
for layer in range(3):
    cat = f"cat{layer}"
    block.append(helper.make_node("Concat", list(features), [cat], axis=1, name=cat))
    bn = [f"bn{layer}_{p}" for p in "gbmv"]
    block_inits += [tv_init(bn[0], (channels,)), tv_init(bn[1], (channels,)),
                    tv_init(bn[2], (channels,)), tv_init(bn[3], (channels,), True),
                    tv_init(f"w{layer + 1}", (4, channels, 3, 3))]
    block += [helper.make_node("BatchNormalization", [cat] + bn, [f"n{layer}"], name=f"bn{layer}"),
              helper.make_node("Relu", [f"n{layer}"], [f"r{layer}"], name=f"relu{layer}"),
              helper.make_node("Conv", [f"r{layer}", f"w{layer + 1}"], [f"f{layer + 1}"],
                               pads=[1, 1, 1, 1], name=f"conv{layer + 1}")]
    features.append(f"f{layer + 1}")
    channels += 4
block.append(helper.make_node("Concat", list(features), ["block_out"], axis=1, name="cat3"))
block.append(helper.make_node("AveragePool", ["block_out"], ["y"], kernel_shape=[2, 2],
                              strides=[2, 2], name="transition"))
save("dense_block", block, [tensor("x", [1, 3, 16, 16])], [tensor("y", [1, 20, 8, 8])],
     block_inits, opset=13)
