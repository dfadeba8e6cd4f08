"""Writes whole CNNs with random weights for the build/run tests and the
models benchmark: ResNet-18, MobileNetV2 and a YOLOv5s-shaped network (SiLU,
C3 blocks, SPPF, nearest upsampling and concat, three detection heads).
Run with /usr/bin/python3 (Debian's python3-onnx).
Usage: make_zoo.py OUT_DIR [--yolo-size N]"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Net:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def const(self, arr, p="c"):
        nm = self.name(p)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), nm))
        return nm

    def node(self, op, ins, **attrs):
        out = self.name(op.lower() + "_")
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, s=1, p=None, groups=1, bias=False):
        p = k // 2 if p is None else p
        fan_in = cin // groups * k * k
        w = self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / fan_in)
        ins = [x, self.const(w.astype(np.float32), "w")]
        if bias:
            ins.append(self.const((self.rng.standard_normal(cout) * 0.1).astype(np.float32), "b"))
        return self.node("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                         group=groups)

    def bn(self, x, c):
        r = self.rng
        ins = [x] + [self.const(a.astype(np.float32), "bn") for a in (
            r.uniform(0.5, 1.5, c), r.standard_normal(c) * 0.1, r.standard_normal(c) * 0.1,
            r.uniform(0.5, 1.5, c))]
        return self.node("BatchNormalization", ins, epsilon=1e-5)

    def relu6(self, x):
        return self.node("Clip", [x, self.const(np.float32(0)), self.const(np.float32(6))])

    def silu(self, x):
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def gemm(self, x, cin, cout):
        w = (self.rng.standard_normal((cout, cin)) / np.sqrt(cin)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        return self.node("Gemm", [x, self.const(w, "fc"), self.const(b, "fcb")], transB=1)

    def save(self, path, name, inp, shape, outs, opset=13):
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info(inp, TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        # Output shapes from ONNX's own shape inference.
        model = onnx.shape_inference.infer_shapes(model)
        del model.graph.value_info[:]
        onnx.checker.check_model(model)
        onnx.save(model, path)


def resnet18(path):
    g = Net(18)
    x = g.node("Relu", [g.bn(g.conv("input", 3, 64, 7, 2, 3), 64)])
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for b in range(2):
            s = stride if b == 0 else 1
            y = g.node("Relu", [g.bn(g.conv(x, cin, cout, 3, s), cout)])
            y = g.bn(g.conv(y, cout, cout, 3), cout)
            short = x if (s == 1 and cin == cout) else g.bn(g.conv(x, cin, cout, 1, s, 0), cout)
            x = g.node("Relu", [g.node("Add", [y, short])])
            cin = cout
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    g.save(path, "resnet18", "input", [1, 3, 224, 224], [g.gemm(x, 512, 1000)])


def mobilenet_v2(path):
    g = Net(2)
    x = g.relu6(g.bn(g.conv("input", 3, 32, 3, 2), 32))
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = g.relu6(g.bn(g.conv(y, cin, hidden, 1, 1, 0), hidden))
            y = g.relu6(g.bn(g.conv(y, hidden, hidden, 3, stride, 1, groups=hidden), hidden))
            y = g.bn(g.conv(y, hidden, c, 1, 1, 0), c)
            x = g.node("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = g.relu6(g.bn(g.conv(x, cin, 1280, 1, 1, 0), 1280))
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    g.save(path, "mobilenet_v2", "input", [1, 3, 224, 224], [g.gemm(x, 1280, 1000)])


def yolov5s(path, size):
    g = Net(5)

    def cbs(x, cin, cout, k, s=1, p=None):  # Conv + BN + SiLU
        return g.silu(g.bn(g.conv(x, cin, cout, k, s, p), cout))

    def c3(x, cin, cout, n, shortcut=True):
        h = cout // 2
        a = cbs(x, cin, h, 1)
        for _ in range(n):
            y = cbs(cbs(a, h, h, 1), h, h, 3)
            a = g.node("Add", [a, y]) if shortcut else y
        b = cbs(x, cin, h, 1)
        return cbs(g.node("Concat", [a, b], axis=1), 2 * h, cout, 1)

    def sppf(x, cin, cout):
        h = cin // 2
        x = cbs(x, cin, h, 1)
        pool = dict(kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])
        y1 = g.node("MaxPool", [x], **pool)
        y2 = g.node("MaxPool", [y1], **pool)
        y3 = g.node("MaxPool", [y2], **pool)
        return cbs(g.node("Concat", [x, y1, y2, y3], axis=1), 4 * h, cout, 1)

    def up(x):
        scales = g.const(np.array([1, 1, 2, 2], dtype=np.float32), "scales")
        return g.node("Resize", [x, "", scales], mode="nearest")

    x = cbs("images", 3, 32, 6, 2, 2)
    x = c3(cbs(x, 32, 64, 3, 2), 64, 64, 1)
    p3 = c3(cbs(x, 64, 128, 3, 2), 128, 128, 2)
    p4 = c3(cbs(p3, 128, 256, 3, 2), 256, 256, 3)
    p5 = sppf(c3(cbs(p4, 256, 512, 3, 2), 512, 512, 1), 512, 512)
    h5 = cbs(p5, 512, 256, 1)
    h4 = c3(g.node("Concat", [up(h5), p4], axis=1), 512, 256, 1, False)
    h4r = cbs(h4, 256, 128, 1)
    o3 = c3(g.node("Concat", [up(h4r), p3], axis=1), 256, 128, 1, False)
    o4 = c3(g.node("Concat", [cbs(o3, 128, 128, 3, 2), h4r], axis=1), 256, 256, 1, False)
    o5 = c3(g.node("Concat", [cbs(o4, 256, 256, 3, 2), h5], axis=1), 512, 512, 1, False)
    outs = []
    for feat, c, stride in ((o3, 128, 8), (o4, 256, 16), (o5, 512, 32)):
        d = size // stride
        y = g.conv(feat, c, 255, 1, 1, 0, bias=True)
        y = g.node("Reshape", [y, g.const(np.array([1, 3, 85, d, d], dtype=np.int64), "shape")])
        outs.append(g.node("Sigmoid", [g.node("Transpose", [y], perm=[0, 1, 3, 4, 2])]))
    g.save(path, "yolov5s", "images", [1, 3, size, size], outs)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--yolo-size", type=int, default=320)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    resnet18(os.path.join(a.out, "resnet18.onnx"))
    mobilenet_v2(os.path.join(a.out, "mobilenet_v2.onnx"))
    yolov5s(os.path.join(a.out, f"yolov5s_{a.yolo_size}.onnx"), a.yolo_size)
