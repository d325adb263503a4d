// RUN: tf-opt %s -p fuse --no-numerics | filecheck %s
// All strategies together on the patterns the issue names: a norm with its activation and
// residual, a softmax written out op by op, and an attention head.

"builtin.module"() ({
// LayerNorm + GELU + residual add: one kernel; the two row statistics, then one expression
// (normalise, scale, shift, gelu, add x) per element.
// CHECK:      %[[K:[0-9]+]] = "structured.kernel"(%arg0, %arg1, %arg2)
// CHECK:        combiner = "add"
// CHECK:        combiner = "add"
// CHECK-NEXT:   "structured.compute"
// CHECK:          "scalar.rsqrt"
// CHECK:          "scalar.gelu"
// CHECK:          "scalar.add"
// CHECK-NEXT:     "structured.yield"
// CHECK-NEXT:   }) {domain = array<i64: 2, 8, 16>, iterators = "ppp"
// CHECK-NEXT:   "structured.return"
// CHECK-NEXT: }) {sym_name = "layer_norm_gelu_add", tf.fusion = "reduction"}
// CHECK-NEXT: "func.return"(%[[K]])
// CHECK-NEXT: sym_name = "layer_norm_gelu_residual"
"func.func"() ({
^bb0(%arg0: tensor<2x8x16xf32>, %arg1: tensor<16xf32>, %arg2: tensor<16xf32>):
  %0 = "graph.layer_norm"(%arg0, %arg1, %arg2) {axis = -1 : i64, epsilon = 1.0e-05 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %1 = "graph.gelu"(%0) {approximate = "none"} : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %2 = "graph.add"(%1, %arg0) : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  "func.return"(%2) : (tensor<2x8x16xf32>) -> ()
}) {sym_name = "layer_norm_gelu_residual", function_type = (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> (tensor<2x8x16xf32>)} : () -> ()

// max, sub, exp, sum, div: one kernel; the shifted exponentials are computed once into a row
// buffer that the sum and the division both read.
// CHECK:      %[[K:[0-9]+]] = "structured.kernel"(%arg0)
// CHECK:        %[[M:[0-9]+]] = "structured.compute"
// CHECK:        combiner = "max"
// CHECK-NEXT:   %[[E:[0-9]+]] = "structured.compute"
// CHECK:          "structured.read"(%[[M]]
// CHECK:          "scalar.exp"
// CHECK:        %[[S:[0-9]+]] = "structured.compute"
// CHECK-NEXT:   ^bb0
// CHECK-NEXT:     "structured.read"(%[[E]]
// CHECK:        combiner = "add"
// CHECK-NEXT:   "structured.compute"
// CHECK-NEXT:   ^bb0
// CHECK-NEXT:     "structured.read"(%[[E]]
// CHECK:          "structured.read"(%[[S]]
// CHECK-NEXT:     "scalar.div"
// CHECK:      sym_name = "reduce_max_sub_exp_reduce_sum_div", tf.fusion = "reduction"
// CHECK-NEXT: "func.return"(%[[K]])
// CHECK-NEXT: sym_name = "softmax_decomposed"
"func.func"() ({
^bb0(%arg0: tensor<2x3x8x8xf32>):
  %0 = "graph.reduce_max"(%arg0) {axes = array<i64: -1>, keepdims = true} : (tensor<2x3x8x8xf32>) -> tensor<2x3x8x1xf32>
  %1 = "graph.sub"(%arg0, %0) : (tensor<2x3x8x8xf32>, tensor<2x3x8x1xf32>) -> tensor<2x3x8x8xf32>
  %2 = "graph.exp"(%1) : (tensor<2x3x8x8xf32>) -> tensor<2x3x8x8xf32>
  %3 = "graph.reduce_sum"(%2) {axes = array<i64: -1>, keepdims = true} : (tensor<2x3x8x8xf32>) -> tensor<2x3x8x1xf32>
  %4 = "graph.div"(%2, %3) : (tensor<2x3x8x8xf32>, tensor<2x3x8x1xf32>) -> tensor<2x3x8x8xf32>
  "func.return"(%4) : (tensor<2x3x8x8xf32>) -> ()
}) {sym_name = "softmax_decomposed", function_type = (tensor<2x3x8x8xf32>) -> (tensor<2x3x8x8xf32>)} : () -> ()

// Attention: Q, K and V are one GEMM (8 x 24 weights); the slices and K's transpose fold into
// the loads of the two matmuls; the scale is the first matmul's epilogue.  Four kernels for
// nine graph ops.
// CHECK:      ^bb0(%arg0: tensor<4x8xf32>):
// CHECK-NEXT:   %[[W:[0-9]+]] = "graph.constant"() {{.*}} : () -> tensor<8x24xf32>
// CHECK-NEXT:   %[[B:[0-9]+]] = "graph.constant"() {{.*}} : () -> tensor<24xf32>
// CHECK-NEXT:   %[[QKV:[0-9]+]] = "structured.kernel"(%arg0, %[[W]], %[[B]])
// CHECK:        sym_name = "gemm", tf.fusion = "out_elementwise_fusable"} : ({{.*}}) -> tensor<4x24xf32>
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<0.35> : tensor<f32>}
// CHECK-NEXT:   %[[S:[0-9]+]] = "structured.kernel"(%[[QKV]], %[[C]])
// CHECK-NEXT:   ^bb0(%[[A:arg[0-9]+]]: tensor<4x24xf32>, %{{.*}}):
// CHECK-NEXT:     "structured.compute"
// CHECK-NEXT:     ^bb0
// CHECK:            "structured.read"(%[[A]]
// CHECK:            "structured.read"(%[[A]]
// CHECK:        sym_name = "slice_transpose_matmul_mul", tf.fusion = "out_elementwise_fusable"
// CHECK-NEXT:   %[[P:[0-9]+]] = "structured.kernel"(%[[S]])
// CHECK:        sym_name = "softmax", tf.fusion = "reduction"
// CHECK-NEXT:   %[[O:[0-9]+]] = "structured.kernel"(%[[QKV]], %[[P]])
// CHECK:        sym_name = "slice_matmul", tf.fusion = "out_elementwise_fusable"
// CHECK-NEXT:   "func.return"(%[[O]])
// CHECK-NEXT: sym_name = "attention"
"func.func"() ({
^bb0(%arg0: tensor<4x8xf32>):
  %0 = "graph.constant"() {value = dense<"0xE17A54BF14AE07BF9A99193F0AD7233E295C4FBFB81E05BE0AD723BD7B142EBFD7A3F03EB81E45BFAE4761BE8FC2F53C295C0FBE7B142E3E8FC2F53EC3F5683FF628DCBE9A99993E14AEC73E85EBD1BE000080BF3333733FCDCCCCBEA470BDBE14AE473F7B142E3E8FC275BDCDCC0C3FD7A370BF85EBD13E000080BE85EB51BF0AD7A33EF6285C3F3D0A17BFB81E853ECDCCCCBE8FC2F53EAE47E13E295C0FBFC3F5283F0AD7A33EA470BD3E0AD7233F295C0FBEB81E053F5C8F423FCDCC4CBF3333333F3D0A57BE0AD723BD8FC235BFCDCCCC3E3D0AD7BEA4703D3F6666E6BE8FC2F53DCDCC4CBE1F856B3EF6281CBF0AD723BF48E1FA3E0000003FB81E053E"> : tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %1 = "graph.constant"() {value = dense<[0.84, -0.59, 0.7, -0.66, 0.93, 0.25, 0.21, 0.94]> : tensor<8xf32>} : () -> tensor<8xf32>
  %2 = "graph.gemm"(%arg0, %0, %1) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %3 = "graph.constant"() {value = dense<"0x85EB113FE17A143F0AD763BFB81E85BEE17A54BFF6281CBF85EB11BFEC51383F000040BF85EBD1BE0AD723BC3333333F7B146E3F3D0AD73E85EB11BFEC51B83D85EBD13E666666BFEC51B83EB81E85BEEC51383E7B14AE3E7B14AE3ECDCC4C3DAE47E13D9A9919BF0AD723BC000040BF0AD723BD295C8F3DCDCC0C3F3D0A57BE8FC275BF8FC2753D3D0A17BF8FC2F53EAE4761BE8FC275BE85EB513F3D0A57BE9A9999BE9A9999BE0AD723BD295C4FBFEC51B83D3D0A573FB81E053E48E1FA3E0AD7633F7B142E3F48E1FA3EAE47213F0AD7233F48E1FABE0AD723BD52B89EBE8FC2F5BE295C0F3EEC51B8BE8FC2753E0AD7233E713D4ABF8FC2F5BDAE4761BE"> : tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %4 = "graph.constant"() {value = dense<[0.41, -0.82, -0.66, 0.03, -0.19, 0.33, -0.33, -0.61]> : tensor<8xf32>} : () -> tensor<8xf32>
  %5 = "graph.gemm"(%arg0, %3, %4) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %6 = "graph.constant"() {value = dense<"0xF6285C3F5C8F02BF8FC235BFAE47E1BE0AD7A3BECDCC0CBF295C8F3D52B85E3F000040BF7B142EBE7B14AE3EB81E453F0000803F8FC235BF295C8F3D5C8F423F0AD763BFEC51383E666626BF713D0A3FAE47613F0AD7A33D48E17ABF52B85EBF7B142EBED7A3303F14AE07BF7B14AE3E5C8F42BED7A3F0BE85EBD13E5C8FC2BEB81E85BE14AE073F0AD723BC85EB113F8FC2F53C7B142EBFAE47E1BD0000403FB81E053E7B146E3F000080BF0AD7A3BE713D0A3FA470BD3E8FC2F53DC3F5A83E0000403FA470BD3EEC51B83D8FC2F53DC3F5A83E3333B3BE7B14AE3E1F856B3E85EB113F0AD723BD333373BF295C8F3DEC51383F295C8F3EE17A943EAE4761BE"> : tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %7 = "graph.constant"() {value = dense<[-0.29, 0.44, -0.84, 0.73, 0.75, 0.92, -0.73, -0.77]> : tensor<8xf32>} : () -> tensor<8xf32>
  %8 = "graph.gemm"(%arg0, %6, %7) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %9 = "graph.transpose"(%5) {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %10 = "graph.matmul"(%2, %9) : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %11 = "graph.constant"() {value = dense<0.35> : tensor<f32>} : () -> tensor<f32>
  %12 = "graph.mul"(%10, %11) : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xf32>
  %13 = "graph.softmax"(%12) {axis = -1 : i64} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %14 = "graph.matmul"(%13, %8) : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  "func.return"(%14) : (tensor<4x8xf32>) -> ()
}) {sym_name = "attention", function_type = (tensor<4x8xf32>) -> (tensor<4x8xf32>)} : () -> ()
}) : () -> ()
