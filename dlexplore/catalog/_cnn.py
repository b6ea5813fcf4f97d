"""Convolutional networks as layer lists, derived from their definitions (torchvision's).

Each builder walks the network in forward order, tracking the shape ``(channels, height, width)``
of one sample, and emits one :class:`~dlexplore.catalog.Layer` per convolution, batch norm, pooling,
linear, dropout and concatenation (plus one ``input`` layer for the image). Layer names are
torchvision's module names (``layer1.0.conv2``, ``Mixed_5b.branch1x1.conv``), so that a trace of a
real run can be matched layer by layer. In-place ReLUs and residual adds are not layers: they have
no parameters, count no FLOPs and keep no tensor of their own (see below).

Counting rules
--------------
Parameters
    Trainable parameters only (batch-norm running statistics are buffers, not parameters), exactly
    as ``sum(p.numel() for p in model.parameters())`` counts them for the torchvision model.
FLOPs (forward, per sample)
    Only multiply-accumulate work counts, 2 FLOPs per multiply-add: a convolution costs
    ``2 * (Cin / groups) * kh * kw * Cout * Hout * Wout``, a linear layer ``2 * in * out``. Bias
    adds, batch norm, ReLU, pooling, dropout, concatenation and residual adds count 0: together they
    are under 1% of these networks' arithmetic, their time is set by memory traffic rather than by
    FLOP rate, and leaving them out keeps the totals comparable with the published conv+linear
    figures (torchvision's model table, fvcore) and with Megatron's transformer formula.
Activations (bytes per sample, fp32)
    A tensor counts once, on the layer that creates it, if autograd keeps it for the backward pass
    (as PyTorch does in training mode); 4 bytes per value. So: the input image (kept by the first
    convolution); every convolution's output (kept by the batch norm after it, or by the in-place
    ReLU that overwrites it where there is no batch norm); every batch norm's output (kept by its
    in-place ReLU, and it is the next layer's input); every pooling, linear and concatenation output
    that a following layer keeps. Max pooling also keeps its argmax indices (int64, 8 bytes per
    output value) and dropout its mask (1 byte per value). Outputs that only feed a residual add, a
    concatenation or a dropout are freed in the forward pass and do not count (the batch norm of a
    ResNet downsample branch, the max-pool branch of Inception-v3's reduction blocks, the global
    average pool before a dropout). Batch-norm statistics (per channel) and cuDNN workspaces are
    left out. The memory model halves the total for 16-bit activations, which slightly undercounts
    the int64 indices and byte masks.

Kept whole: one builder per torchvision family (ResNet, VGG, Inception, ...), each counting its
layers by the same rules; split, the rules would be read away from the networks they count.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._types import Layer

__all__ = ["alexnet", "vgg", "resnet", "googlenet", "inception_v3"]

#: (channels, height, width) of one sample.
Shape = tuple[int, int, int]

_F32 = 4  # bytes per activation value
_INDEX = 8  # bytes per max-pooling argmax index (int64)
_MASK = 1  # bytes per dropout mask value (bool)


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else v


def _numel(x: Shape) -> int:
    return x[0] * x[1] * x[2]


def _out_size(size: int, k: int, stride: int, pad: int, ceil: bool = False) -> int:
    """Output length of a convolution or pooling window, as PyTorch computes it."""
    span = size + 2 * pad - k
    if span < 0:
        raise ValueError(f"window {k} larger than the padded input {size + 2 * pad}")
    if not ceil:
        return span // stride + 1
    out = -(-span // stride) + 1
    # PyTorch drops a last window that would start inside the right padding.
    if (out - 1) * stride >= size + pad:
        out -= 1
    return out


class _Net:
    """Collects layers in forward order; each method takes and returns a sample's shape."""

    def __init__(self, image: Shape):
        self.image = image
        self.layers: list[Layer] = [Layer("input", "input", 0, 0.0, float(_numel(image) * _F32))]

    def _add(
        self, name: str, kind: str, params: int, flops: float, act_bytes: float, **shapes: object
    ) -> None:
        self.layers.append(Layer(name, kind, int(params), float(flops), float(act_bytes), **shapes))

    def conv(
        self,
        name: str,
        x: Shape,
        cout: int,
        k: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        pad: int | tuple[int, int] = 0,
        *,
        bias: bool = False,
        groups: int = 1,
        tail: tuple[str, ...] = (),
    ) -> Shape:
        cin, h, w = x
        (kh, kw), (sh, sw), (ph, pw) = _pair(k), _pair(stride), _pair(pad)
        y = (cout, _out_size(h, kh, sh, ph), _out_size(w, kw, sw, pw))
        weights = (cin // groups) * kh * kw * cout
        self._add(
            name,
            "conv",
            weights + (cout if bias else 0),
            2.0 * weights * y[1] * y[2],
            _numel(y) * _F32,
            # implicit GEMM: one row per output position, one column per output channel
            gemm=(float(y[1] * y[2]), float(cout // groups), float((cin // groups) * kh * kw), float(groups)),
            values_in=float(_numel(x)),
            values_out=float(_numel(y)),
            tail=tail,
            winograd=(kh, kw, sh, sw, groups) == (3, 3, 1, 1, 1),
        )
        return y

    def bn(self, name: str, x: Shape, *, keep: bool = True, tail: tuple[str, ...] = ("relu",)) -> Shape:
        """Batch norm, followed (``tail``) by an in-place ReLU unless said otherwise."""
        self._add(
            name,
            "bn",
            2 * x[0],
            0.0,
            _numel(x) * _F32 if keep else 0,
            values_in=float(_numel(x)),
            values_out=float(_numel(x)),
            tail=tail,
        )
        return x

    def conv_bn(
        self,
        name: str,
        x: Shape,
        cout: int,
        k: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        pad: int | tuple[int, int] = 0,
    ) -> Shape:
        """torchvision's ``BasicConv2d``: a bias-free convolution, batch norm, in-place ReLU."""
        x = self.conv(f"{name}.conv", x, cout, k, stride, pad)
        return self.bn(f"{name}.bn", x)

    def maxpool(
        self,
        name: str,
        x: Shape,
        k: int,
        stride: int,
        pad: int = 0,
        *,
        ceil: bool = False,
        keep: bool = True,
    ) -> Shape:
        y = (x[0], _out_size(x[1], k, stride, pad, ceil), _out_size(x[2], k, stride, pad, ceil))
        self._add(
            name,
            "maxpool",
            0,
            0.0,
            _numel(y) * (_INDEX + (_F32 if keep else 0)),
            values_in=float(_numel(x)),
            values_out=float(_numel(y)),
        )
        return y

    def avgpool(self, name: str, x: Shape, k: int, stride: int, pad: int = 0) -> Shape:
        y = (x[0], _out_size(x[1], k, stride, pad), _out_size(x[2], k, stride, pad))
        self._add(
            name, "avgpool", 0, 0.0, _numel(y) * _F32, values_in=float(_numel(x)), values_out=float(_numel(y))
        )
        return y

    def adaptive_avgpool(self, name: str, x: Shape, out: tuple[int, int], *, keep: bool = True) -> Shape:
        y = (x[0], *out)
        self._add(
            name,
            "avgpool",
            0,
            0.0,
            _numel(y) * _F32 if keep else 0,
            values_in=float(_numel(x)),
            values_out=float(_numel(y)),
        )
        return y

    def linear(
        self, name: str, n_in: int, n_out: int, *, bias: bool = True, tail: tuple[str, ...] = ()
    ) -> int:
        self._add(
            name,
            "linear",
            n_in * n_out + (n_out if bias else 0),
            2.0 * n_in * n_out,
            n_out * _F32,
            gemm=(1.0, float(n_out), float(n_in), 1.0),
            values_in=float(n_in),
            values_out=float(n_out),
            tail=tail,
        )
        return n_out

    def dropout(self, name: str, n: int) -> int:
        self._add(name, "dropout", 0, 0.0, n * (_F32 + _MASK), values_in=float(n), values_out=float(n))
        return n

    def concat(self, name: str, parts: Sequence[Shape]) -> Shape:
        y = (sum(p[0] for p in parts), parts[0][1], parts[0][2])
        if any(p[1:] != y[1:] for p in parts):
            raise ValueError(f"{name}: cannot concatenate shapes {list(parts)}")
        self._add(
            name, "concat", 0, 0.0, _numel(y) * _F32, values_in=float(_numel(y)), values_out=float(_numel(y))
        )
        return y


def alexnet(*, image_size: int = 224, num_classes: int = 1000) -> tuple[Layer, ...]:
    """AlexNet as ``torchvision.models.alexnet`` (the one-tower variant of Krizhevsky 2014)."""
    net = _Net((3, image_size, image_size))
    x = net.conv("features.0", net.image, 64, 11, 4, 2, bias=True, tail=("relu",))
    x = net.maxpool("features.2", x, 3, 2)
    x = net.conv("features.3", x, 192, 5, 1, 2, bias=True, tail=("relu",))
    x = net.maxpool("features.5", x, 3, 2)
    x = net.conv("features.6", x, 384, 3, 1, 1, bias=True, tail=("relu",))
    x = net.conv("features.8", x, 256, 3, 1, 1, bias=True, tail=("relu",))
    x = net.conv("features.10", x, 256, 3, 1, 1, bias=True, tail=("relu",))
    x = net.maxpool("features.12", x, 3, 2)
    x = net.adaptive_avgpool("avgpool", x, (6, 6), keep=False)  # only a dropout reads it
    n = net.dropout("classifier.0", _numel(x))
    n = net.linear("classifier.1", n, 4096, tail=("relu",))
    n = net.dropout("classifier.3", n)
    n = net.linear("classifier.4", n, 4096, tail=("relu",))
    net.linear("classifier.6", n, num_classes)
    return tuple(net.layers)


_VGG_CFGS: dict[int, tuple[int | str, ...]] = {
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    13: (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        512,
        "M",
    ),
}


def vgg(
    *, depth: int, batch_norm: bool = False, image_size: int = 224, num_classes: int = 1000
) -> tuple[Layer, ...]:
    """VGG-11/13/16/19 as ``torchvision.models.vgg{depth}`` (the ``_bn`` variant with
    ``batch_norm``)."""
    if depth not in _VGG_CFGS:
        raise ValueError(f"VGG depth must be one of {sorted(_VGG_CFGS)}, got {depth}")
    net = _Net((3, image_size, image_size))
    x, i = net.image, 0  # i follows torchvision's index into model.features
    for v in _VGG_CFGS[depth]:
        if v == "M":
            x = net.maxpool(f"features.{i}", x, 2, 2)
            i += 1
        else:
            x = net.conv(f"features.{i}", x, int(v), 3, 1, 1, bias=True, tail=() if batch_norm else ("relu",))
            if batch_norm:
                x = net.bn(f"features.{i + 1}", x)
            i += 3 if batch_norm else 2
    x = net.adaptive_avgpool("avgpool", x, (7, 7))
    n = net.linear("classifier.0", _numel(x), 4096, tail=("relu",))
    n = net.dropout("classifier.2", n)
    n = net.linear("classifier.3", n, 4096, tail=("relu",))
    n = net.dropout("classifier.5", n)
    net.linear("classifier.6", n, num_classes)
    return tuple(net.layers)


# depth -> (bottleneck blocks?, blocks per stage)
_RESNET_CFGS: dict[int, tuple[bool, tuple[int, int, int, int]]] = {
    18: (False, (2, 2, 2, 2)),
    34: (False, (3, 4, 6, 3)),
    50: (True, (3, 4, 6, 3)),
    101: (True, (3, 4, 23, 3)),
    152: (True, (3, 8, 36, 3)),
    200: (True, (3, 24, 36, 3)),
}


def resnet(*, depth: int, image_size: int = 224, num_classes: int = 1000) -> tuple[Layer, ...]:
    """ResNet as ``torchvision.models.resnet{depth}``: v1.5, the stride of a downsampling bottleneck
    on its 3x3 convolution rather than its first 1x1 (He et al. 2016 put it on the 1x1)."""
    if depth not in _RESNET_CFGS:
        raise ValueError(f"ResNet depth must be one of {sorted(_RESNET_CFGS)}, got {depth}")
    bottleneck, counts = _RESNET_CFGS[depth]
    net = _Net((3, image_size, image_size))
    x = net.conv("conv1", net.image, 64, 7, 2, 3)
    x = net.bn("bn1", x)
    x = net.maxpool("maxpool", x, 3, 2, 1)
    stages = zip((64, 128, 256, 512), counts, strict=True)
    for stage, (planes, blocks) in enumerate(stages, start=1):
        for b in range(blocks):
            p = f"layer{stage}.{b}"
            stride = 2 if b == 0 and stage > 1 else 1
            if bottleneck:
                out = planes * 4
                y = net.bn(f"{p}.bn1", net.conv(f"{p}.conv1", x, planes, 1))
                y = net.bn(f"{p}.bn2", net.conv(f"{p}.conv2", y, planes, 3, stride, 1))
                y = net.bn(f"{p}.bn3", net.conv(f"{p}.conv3", y, out, 1), tail=("add", "relu"))
            else:
                out = planes
                y = net.bn(f"{p}.bn1", net.conv(f"{p}.conv1", x, planes, 3, stride, 1))
                y = net.bn(f"{p}.bn2", net.conv(f"{p}.conv2", y, planes, 3, 1, 1), tail=("add", "relu"))
            if stride != 1 or x[0] != out:
                d = net.conv(f"{p}.downsample.0", x, out, 1, stride)
                # Its output only feeds the residual add (done in place on bn3's output).
                net.bn(f"{p}.downsample.1", d, keep=False, tail=())
            x = y
    x = net.adaptive_avgpool("avgpool", x, (1, 1))
    net.linear("fc", _numel(x), num_classes)
    return tuple(net.layers)


def _googlenet_inception(
    net: _Net, name: str, x: Shape, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int
) -> Shape:
    b1 = net.conv_bn(f"{name}.branch1", x, c1, 1)
    b2 = net.conv_bn(f"{name}.branch2.0", x, c3r, 1)
    b2 = net.conv_bn(f"{name}.branch2.1", b2, c3, 3, 1, 1)
    b3 = net.conv_bn(f"{name}.branch3.0", x, c5r, 1)
    # torchvision uses 3x3 here where the paper has 5x5 ("a known bug", kept for its weights).
    b3 = net.conv_bn(f"{name}.branch3.1", b3, c5, 3, 1, 1)
    b4 = net.maxpool(f"{name}.branch4.0", x, 3, 1, 1, ceil=True)
    b4 = net.conv_bn(f"{name}.branch4.1", b4, cp, 1)
    return net.concat(f"{name}.cat", (b1, b2, b3, b4))


def _googlenet_aux(net: _Net, name: str, x: Shape, num_classes: int) -> None:
    x = net.adaptive_avgpool(f"{name}.avgpool", x, (4, 4))
    x = net.conv_bn(f"{name}.conv", x, 128, 1)
    n = net.linear(f"{name}.fc1", _numel(x), 1024, tail=("relu",))
    n = net.dropout(f"{name}.dropout", n)
    net.linear(f"{name}.fc2", n, num_classes)


def googlenet(*, aux: bool = False, image_size: int = 224, num_classes: int = 1000) -> tuple[Layer, ...]:
    """GoogLeNet (Inception v1) as ``torchvision.models.googlenet``, which adds batch norm.

    ``aux`` adds the two auxiliary classifiers (after inception4a and 4d) that torchvision builds
    for training from scratch and drops from its pretrained model; its published 6,624,904
    parameters are without them.
    """
    net = _Net((3, image_size, image_size))
    x = net.conv_bn("conv1", net.image, 64, 7, 2, 3)
    x = net.maxpool("maxpool1", x, 3, 2, ceil=True)
    x = net.conv_bn("conv2", x, 64, 1)
    x = net.conv_bn("conv3", x, 192, 3, 1, 1)
    x = net.maxpool("maxpool2", x, 3, 2, ceil=True)
    x = _googlenet_inception(net, "inception3a", x, 64, 96, 128, 16, 32, 32)
    x = _googlenet_inception(net, "inception3b", x, 128, 128, 192, 32, 96, 64)
    x = net.maxpool("maxpool3", x, 3, 2, ceil=True)
    x = _googlenet_inception(net, "inception4a", x, 192, 96, 208, 16, 48, 64)
    if aux:
        _googlenet_aux(net, "aux1", x, num_classes)
    x = _googlenet_inception(net, "inception4b", x, 160, 112, 224, 24, 64, 64)
    x = _googlenet_inception(net, "inception4c", x, 128, 128, 256, 24, 64, 64)
    x = _googlenet_inception(net, "inception4d", x, 112, 144, 288, 32, 64, 64)
    if aux:
        _googlenet_aux(net, "aux2", x, num_classes)
    x = _googlenet_inception(net, "inception4e", x, 256, 160, 320, 32, 128, 128)
    x = net.maxpool("maxpool4", x, 2, 2, ceil=True)
    x = _googlenet_inception(net, "inception5a", x, 256, 160, 320, 32, 128, 128)
    x = _googlenet_inception(net, "inception5b", x, 384, 192, 384, 48, 128, 128)
    x = net.adaptive_avgpool("avgpool", x, (1, 1), keep=False)  # only a dropout reads it
    n = net.dropout("dropout", _numel(x))
    net.linear("fc", n, num_classes)
    return tuple(net.layers)


def _inception_a(net: _Net, name: str, x: Shape, pool_features: int) -> Shape:
    b1 = net.conv_bn(f"{name}.branch1x1", x, 64, 1)
    b5 = net.conv_bn(f"{name}.branch5x5_1", x, 48, 1)
    b5 = net.conv_bn(f"{name}.branch5x5_2", b5, 64, 5, 1, 2)
    b3 = net.conv_bn(f"{name}.branch3x3dbl_1", x, 64, 1)
    b3 = net.conv_bn(f"{name}.branch3x3dbl_2", b3, 96, 3, 1, 1)
    b3 = net.conv_bn(f"{name}.branch3x3dbl_3", b3, 96, 3, 1, 1)
    bp = net.avgpool(f"{name}.avg_pool", x, 3, 1, 1)
    bp = net.conv_bn(f"{name}.branch_pool", bp, pool_features, 1)
    return net.concat(f"{name}.cat", (b1, b5, b3, bp))


def _inception_b(net: _Net, name: str, x: Shape) -> Shape:
    b3 = net.conv_bn(f"{name}.branch3x3", x, 384, 3, 2)
    bd = net.conv_bn(f"{name}.branch3x3dbl_1", x, 64, 1)
    bd = net.conv_bn(f"{name}.branch3x3dbl_2", bd, 96, 3, 1, 1)
    bd = net.conv_bn(f"{name}.branch3x3dbl_3", bd, 96, 3, 2)
    bp = net.maxpool(f"{name}.max_pool", x, 3, 2, keep=False)  # only the concatenation reads it
    return net.concat(f"{name}.cat", (b3, bd, bp))


def _inception_c(net: _Net, name: str, x: Shape, c7: int) -> Shape:
    b1 = net.conv_bn(f"{name}.branch1x1", x, 192, 1)
    b7 = net.conv_bn(f"{name}.branch7x7_1", x, c7, 1)
    b7 = net.conv_bn(f"{name}.branch7x7_2", b7, c7, (1, 7), 1, (0, 3))
    b7 = net.conv_bn(f"{name}.branch7x7_3", b7, 192, (7, 1), 1, (3, 0))
    bd = net.conv_bn(f"{name}.branch7x7dbl_1", x, c7, 1)
    bd = net.conv_bn(f"{name}.branch7x7dbl_2", bd, c7, (7, 1), 1, (3, 0))
    bd = net.conv_bn(f"{name}.branch7x7dbl_3", bd, c7, (1, 7), 1, (0, 3))
    bd = net.conv_bn(f"{name}.branch7x7dbl_4", bd, c7, (7, 1), 1, (3, 0))
    bd = net.conv_bn(f"{name}.branch7x7dbl_5", bd, 192, (1, 7), 1, (0, 3))
    bp = net.avgpool(f"{name}.avg_pool", x, 3, 1, 1)
    bp = net.conv_bn(f"{name}.branch_pool", bp, 192, 1)
    return net.concat(f"{name}.cat", (b1, b7, bd, bp))


def _inception_d(net: _Net, name: str, x: Shape) -> Shape:
    b3 = net.conv_bn(f"{name}.branch3x3_1", x, 192, 1)
    b3 = net.conv_bn(f"{name}.branch3x3_2", b3, 320, 3, 2)
    b7 = net.conv_bn(f"{name}.branch7x7x3_1", x, 192, 1)
    b7 = net.conv_bn(f"{name}.branch7x7x3_2", b7, 192, (1, 7), 1, (0, 3))
    b7 = net.conv_bn(f"{name}.branch7x7x3_3", b7, 192, (7, 1), 1, (3, 0))
    b7 = net.conv_bn(f"{name}.branch7x7x3_4", b7, 192, 3, 2)
    bp = net.maxpool(f"{name}.max_pool", x, 3, 2, keep=False)  # only the concatenation reads it
    return net.concat(f"{name}.cat", (b3, b7, bp))


def _inception_e(net: _Net, name: str, x: Shape) -> Shape:
    # The inner concatenations (of the 1x3 and 3x1 outputs) are not layers: their outputs only
    # feed the block's concatenation, which keeps nothing of its inputs.
    b1 = net.conv_bn(f"{name}.branch1x1", x, 320, 1)
    b3 = net.conv_bn(f"{name}.branch3x3_1", x, 384, 1)
    b3a = net.conv_bn(f"{name}.branch3x3_2a", b3, 384, (1, 3), 1, (0, 1))
    b3b = net.conv_bn(f"{name}.branch3x3_2b", b3, 384, (3, 1), 1, (1, 0))
    bd = net.conv_bn(f"{name}.branch3x3dbl_1", x, 448, 1)
    bd = net.conv_bn(f"{name}.branch3x3dbl_2", bd, 384, 3, 1, 1)
    bda = net.conv_bn(f"{name}.branch3x3dbl_3a", bd, 384, (1, 3), 1, (0, 1))
    bdb = net.conv_bn(f"{name}.branch3x3dbl_3b", bd, 384, (3, 1), 1, (1, 0))
    bp = net.avgpool(f"{name}.avg_pool", x, 3, 1, 1)
    bp = net.conv_bn(f"{name}.branch_pool", bp, 192, 1)
    return net.concat(f"{name}.cat", (b1, b3a, b3b, bda, bdb, bp))


def inception_v3(*, aux: bool = True, image_size: int = 299, num_classes: int = 1000) -> tuple[Layer, ...]:
    """Inception-v3 as ``torchvision.models.inception_v3``.

    ``aux`` keeps the auxiliary classifier (``AuxLogits``, after Mixed_6e), which torchvision builds
    by default, trains, and counts in its published 27,161,264 parameters; without it the network
    has 23,834,568.
    """
    net = _Net((3, image_size, image_size))
    x = net.conv_bn("Conv2d_1a_3x3", net.image, 32, 3, 2)
    x = net.conv_bn("Conv2d_2a_3x3", x, 32, 3)
    x = net.conv_bn("Conv2d_2b_3x3", x, 64, 3, 1, 1)
    x = net.maxpool("maxpool1", x, 3, 2)
    x = net.conv_bn("Conv2d_3b_1x1", x, 80, 1)
    x = net.conv_bn("Conv2d_4a_3x3", x, 192, 3)
    x = net.maxpool("maxpool2", x, 3, 2)
    x = _inception_a(net, "Mixed_5b", x, 32)
    x = _inception_a(net, "Mixed_5c", x, 64)
    x = _inception_a(net, "Mixed_5d", x, 64)
    x = _inception_b(net, "Mixed_6a", x)
    x = _inception_c(net, "Mixed_6b", x, 128)
    x = _inception_c(net, "Mixed_6c", x, 160)
    x = _inception_c(net, "Mixed_6d", x, 160)
    x = _inception_c(net, "Mixed_6e", x, 192)
    if aux:
        a = net.avgpool("AuxLogits.avg_pool", x, 5, 3)
        a = net.conv_bn("AuxLogits.conv0", a, 128, 1)
        a = net.conv_bn("AuxLogits.conv1", a, 768, 5)
        a = net.adaptive_avgpool("AuxLogits.adaptive_avg_pool", a, (1, 1))
        net.linear("AuxLogits.fc", _numel(a), num_classes)
    x = _inception_d(net, "Mixed_7a", x)
    x = _inception_e(net, "Mixed_7b", x)
    x = _inception_e(net, "Mixed_7c", x)
    x = net.adaptive_avgpool("avgpool", x, (1, 1), keep=False)  # only a dropout reads it
    n = net.dropout("dropout", _numel(x))
    net.linear("fc", n, num_classes)
    return tuple(net.layers)
