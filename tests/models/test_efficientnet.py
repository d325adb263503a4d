"""EfficientNet-B0: torchvision's architecture and parameter count, and tensorforge.compile
matches eager PyTorch (relative error max|out - ref| / max|ref| <= 1e-4).  The small variant
goes through compile and torch.compile with the other small models in tests/frontends/test_torch.py
and through the zoo checks in test_zoo.py."""
import pytest

torch = pytest.importorskip("torch")

import tensorforge.models as zoo  # noqa: E402
from tests.frontends.test_torch import compile_and_check  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")   # torch.export internals

TORCHVISION_B0_PARAMS = 5_288_548


def test_architecture_matches_torchvision_b0():
    from tensorforge.models.efficientnet import MBConv, SqueezeExcitation

    module, (x,) = zoo.get("efficientnet_b0")
    assert sum(p.numel() for p in module.parameters()) == TORCHVISION_B0_PARAMS
    assert x.shape == (1, 3, 224, 224)
    stages = list(module.features)[1:-1]
    assert [len(s) for s in stages] == [1, 2, 2, 3, 3, 4, 1]
    assert [s[-1].block[-1][0].out_channels for s in stages] == [16, 24, 40, 80, 112, 192, 320]
    blocks = [b for s in stages for b in s]
    assert all(isinstance(b, MBConv) for b in blocks)
    depthwise = [b.block[-3][0] for b in blocks]
    assert [c.kernel_size[0] for c in depthwise] == [3] * 3 + [5] * 2 + [3] * 3 + [5] * 7 + [3]
    assert [c.stride[0] for c in depthwise if c.stride[0] == 2] == [2] * 4
    se = [b.block[-2] for b in blocks]
    assert all(isinstance(m, SqueezeExcitation) for m in se)
    assert se[1].fc1.out_channels == 16 // 4 and se[-1].fc1.out_channels == 192 // 4
    assert module.classifier[1].in_features == 1280 and module.classifier[1].out_features == 1000


@pytest.mark.slow
def test_full_size_compiles_and_matches_eager():
    module, inputs = zoo.get("efficientnet_b0")
    compile_and_check(module, inputs)
