"""The direct kernel for convolutions over few input channels (codegen/c/narrow_conv.py): equal to
torch within float32 rounding for strides, dilations, paddings, output-channel counts that leave a
partial register tile, partial vectors, batches, and the fused bias/ReLU/residual epilogue."""
import numpy as np
import pytest
import torch

import tensorforge
from tensorforge.codegen.c import narrow_conv


class Stem(torch.nn.Module):
    def __init__(self, c, o, k, stride, pad, dilation, residual):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, o, k, stride, pad, dilation=dilation)
        self.residual = residual

    def forward(self, x, r):
        y = torch.relu(self.conv(x))
        return y + r if self.residual else y


CASES = [  # (batch, channels, size, out channels, kernel, stride, pad, dilation, residual)
    (2, 3, 32, 8, 7, 2, 3, 1, True),      # a 32x32 network's stem, batch
    (1, 3, 30, 13, 3, 2, 1, 1, False),    # 13 output channels: a partial register tile
    (1, 1, 30, 5, 3, 1, 1, 1, True),      # stride 1, one channel, 30 columns: a partial second vector
    (3, 4, 25, 6, 5, 3, 2, 2, False),     # stride 3, dilation 2
    (1, 2, 33, 8, 4, 2, 0, 1, True),      # even window, no padding
]


@pytest.mark.parametrize("n, c, size, o, k, stride, pad, dilation, residual", CASES)
def test_narrow_conv_matches_torch(n, c, size, o, k, stride, pad, dilation, residual):
    torch.manual_seed(0)
    m = Stem(c, o, k, stride, pad, dilation, residual).eval()
    x = torch.randn(n, c, size, size)
    with torch.no_grad():
        out_hw = m.conv(x).shape[2:]
    r = torch.randn(n, o, *out_hw)
    cm = tensorforge.compile(m, (x, r), threads=2)
    assert narrow_conv.MARKER in cm.source
    with torch.no_grad():
        want = m(x, r)
    np.testing.assert_allclose(cm(x, r).numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


def test_wide_rows_and_many_channels_keep_the_gemm():
    """ResNet's 224x224 stem (112 output columns) stays on im2col + GEMM, and so does a layer with
    more input channels than ``MAX_CHANNELS``."""
    for c, size in ((3, 224), (narrow_conv.MAX_CHANNELS + 1, 32)):
        m = Stem(c, 8, 7, 2, 3, 1, False).eval()
        x = torch.randn(1, c, size, size)
        r = torch.zeros(1, 8, size // 2, size // 2)
        cm = tensorforge.compile(m, (x, r), threads=2)
        assert narrow_conv.MARKER not in cm.source
