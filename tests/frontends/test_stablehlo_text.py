"""The StableHLO importer on hand-written text (no jax needed): generic parsing of StableHLO's
attribute syntax, results against NumPy, and one-line errors with locations."""
import numpy as np
import pytest

import tensorforge
from tensorforge.errors import ParseError, UnsupportedOpError
from tensorforge.frontends.stablehlo import import_stablehlo, supported_ops
from tensorforge.ir.attributes import DialectAttr, SymbolRef
from tensorforge.ir.parser import parse_generic

NHWC_CONV = '''"builtin.module"() ({
  "func.func"() <{function_type = (tensor<1x6x6x2xf32>, tensor<3x3x2x4xf32>) -> tensor<1x3x3x4xf32>,
                 sym_name = "main", sym_visibility = "public", arg_attrs = [{}, {}]}> ({
  ^bb0(%x: tensor<1x6x6x2xf32>, %w: tensor<3x3x2x4xf32>):
    %y = "stablehlo.convolution"(%x, %w) <{batch_group_count = 1 : i64,
        dimension_numbers = #stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>,
        feature_group_count = 1 : i64, lhs_dilation = array<i64: 1, 1>, padding = dense<[[1, 1], [1, 1]]> : tensor<2x2xi64>,
        rhs_dilation = array<i64: 1, 1>, window_strides = array<i64: 2, 2>}>
        : (tensor<1x6x6x2xf32>, tensor<3x3x2x4xf32>) -> tensor<1x3x3x4xf32>
    %z = "func.call"(%y) <{callee = @relu}> : (tensor<1x3x3x4xf32>) -> tensor<1x3x3x4xf32>
    "func.return"(%z) : (tensor<1x3x3x4xf32>) -> ()
  }) : () -> ()
  "func.func"() <{function_type = (tensor<1x3x3x4xf32>) -> tensor<1x3x3x4xf32>, sym_name = "relu",
                 sym_visibility = "private"}> ({
  ^bb0(%a: tensor<1x3x3x4xf32>):
    %c = "stablehlo.constant"() <{value = dense<0.0> : tensor<f32>}> : () -> tensor<f32>
    %b = "stablehlo.broadcast_in_dim"(%c) <{broadcast_dimensions = array<i64>}> : (tensor<f32>) -> tensor<1x3x3x4xf32>
    %m = "stablehlo.maximum"(%a, %b) : (tensor<1x3x3x4xf32>, tensor<1x3x3x4xf32>) -> tensor<1x3x3x4xf32>
    "func.return"(%m) : (tensor<1x3x3x4xf32>) -> ()
  }) : () -> ()
}) {mhlo.num_partitions = 1 : i32} : () -> ()
'''


def _conv_nhwc_ref(x, w, stride, pad):
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw, _, co = w.shape
    oh = (xp.shape[1] - kh) // stride + 1
    ow = (xp.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, co), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.einsum("bhwc,hwco->bo", patch, w)
    return out


def test_generic_parse_keeps_dialect_attributes_and_symbols():
    top = parse_generic(NHWC_CONV, "conv.mlir")
    main = list(top[0].regions[0].blocks[0])[0]
    conv, call = list(main.regions[0].blocks[0])[:2]
    assert conv.attributes["dimension_numbers"] == DialectAttr("stablehlo.conv", "[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]")
    assert isinstance(call.attributes["callee"], SymbolRef) and call.attributes["callee"] == "relu"
    assert main.attributes["arg_attrs"] == ({}, {})
    assert conv.loc == "conv.mlir:5:5"


def test_generic_parse_unit_attributes_and_locations():
    text = ('#loc1 = loc("f.py":3:1)\n"func.func"() <{function_type = () -> (), sym_name = "f"}> ({\n'
            '  "func.return"() : () -> () loc(#loc1)\n}) {llvm.emit_c_interface} : () -> () loc(#loc1)\n')
    (func,) = parse_generic(text)
    assert func.attributes["llvm.emit_c_interface"] is True


def test_nhwc_convolution_with_inlined_call_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 6, 6, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    module = import_stablehlo(NHWC_CONV)
    ref = np.maximum(_conv_nhwc_ref(x.astype(np.float64), w.astype(np.float64), 2, 1), 0)
    for target in ("interpreter", "cpu"):
        out = tensorforge.compile(module, target=target)(x, w)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_compile_reads_a_stablehlo_file(tmp_path):
    path = tmp_path / "conv.stablehlo.mlir"
    path.write_text(NHWC_CONV)
    x = np.ones((1, 6, 6, 2), np.float32)
    w = np.full((3, 3, 2, 4), 0.5, np.float32)
    out = tensorforge.compile(str(path))(x, w)
    assert out.shape == (1, 3, 3, 4)
    assert out[0, 1, 1, 0] == pytest.approx(9.0)       # an interior window: 3*3*2 ones times 0.5


def test_unsupported_op_is_one_line_with_its_location():
    text = NHWC_CONV.replace('"stablehlo.maximum"', '"stablehlo.popcnt_like"')
    with pytest.raises(UnsupportedOpError) as e:
        import_stablehlo(text, source="model.mlir")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("model.mlir:18:5: 'stablehlo.popcnt_like' is not supported")


def test_unsupported_form_names_the_op_and_what_is_missing():
    text = NHWC_CONV.replace("batch_group_count = 1 : i64", "batch_group_count = 2 : i64")
    with pytest.raises(UnsupportedOpError, match=r"^<stablehlo>:5:5: 'stablehlo.convolution' with batch_group_count"):
        import_stablehlo(text)


@pytest.mark.parametrize("broken, where", [
    (NHWC_CONV.replace("%y = ", "%y = = ", 1), ":5:10:"),
    (NHWC_CONV.replace(": tensor<2x2xi64>", ": tensor<2x3xi64>", 1), ":7:83:"),
    (NHWC_CONV.replace('"func.return"(%z)', '"func.return"(%q)', 1), ":11:19:"),
])
def test_malformed_text_is_a_parse_error_with_its_location(broken, where):
    with pytest.raises(ParseError) as e:
        import_stablehlo(broken, source="bad.mlir")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("bad.mlir" + where), msg


def test_supported_ops_lists_the_families():
    ops = supported_ops()
    for name in ("stablehlo.dot_general", "stablehlo.convolution", "stablehlo.reduce", "stablehlo.reduce_window",
                 "stablehlo.gather", "stablehlo.scatter", "stablehlo.while", "stablehlo.case", "chlo.erf"):
        assert name in ops


def test_cli_runs_and_compiles_a_stablehlo_file(tmp_path, capsys):
    from tensorforge.cli import main
    path = tmp_path / "conv.stablehlo.mlir"
    path.write_text(NHWC_CONV)
    assert main(["run", str(path), "--random"]) == 0
    assert "output0: float32[1, 3, 3, 4]" in capsys.readouterr().out
    assert main(["compile", str(path), "-o", str(tmp_path / "conv.tfm")]) == 0
    out = tensorforge.load(tmp_path / "conv.tfm")(np.ones((1, 6, 6, 2), np.float32), np.ones((3, 3, 2, 4), np.float32))
    assert out[0, 1, 1, 0] == pytest.approx(18.0)
