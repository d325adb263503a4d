// RUN: tf-opt %s -p 'fold-inference' --rtol=1e-5 --atol=1e-6 | filecheck %s
// BatchNorm at inference is x * a + t per channel, a = scale / sqrt(var + eps), t = bias - mean * a.
// After a conv / GEMM / matmul whose result has no other user it goes into the weights and the
// bias; anywhere else it becomes a multiply and an add by per-channel constants.
// The tests use eps = 0 and variances 1 and 4, so a = [2, 0.25] and t = [0, -1.25] exactly.

// w [[1, 2], [3, 4]] per output channel -> [[2, 4], [0.75, 1]]; no bias before, t after.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x1x3x3xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[\[\[}}2.0, 4.0]]], {{\[\[\[}}0.75, 1.0]]]]> : tensor<2x1x1x2xf32>}
// CHECK-NEXT:   %[[B:[0-9]+]] = "graph.constant"() {value = dense<[0.0, -1.25]> : tensor<2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.conv"(%[[X]], %[[W]], %[[B]])
// CHECK-NOT:    "graph.batch_norm"
// CHECK:        "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "bn_into_conv_fires"
"func.func"() ({
^bb0(%x: tensor<1x1x3x3xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0, 2.0]]], [[[3.0, 4.0]]]]> : tensor<2x1x1x2xf32>} : () -> tensor<2x1x1x2xf32>
  %scale = "graph.constant"() {value = dense<[2.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %bias = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "graph.constant"() {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %c = "graph.conv"(%x, %w) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x1x3x3xf32>, tensor<2x1x1x2xf32>) -> tensor<1x2x3x2xf32>
  %r = "graph.batch_norm"(%c, %scale, %bias, %mean, %var) {epsilon = 0.0 : f64} : (tensor<1x2x3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x3x2xf32>
  "func.return"(%r) : (tensor<1x2x3x2xf32>) -> ()
}) {sym_name = "bn_into_conv_fires", function_type = (tensor<1x1x3x3xf32>) -> (tensor<1x2x3x2xf32>)} : () -> ()

// A grouped conv_transpose with a bias: w is (C, O/groups, K), output channel o of group g is
// column o - g*O/groups; the conv's bias [1, 1] becomes [1*2 + 0, 1*0.25 - 1.25].
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x2x3xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[\[}}2.0, 2.0]], {{\[\[}}0.25, 0.25]]]> : tensor<2x1x2xf32>}
// CHECK-NEXT:   %[[B:[0-9]+]] = "graph.constant"() {value = dense<[2.0, -1.0]> : tensor<2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.conv_transpose"(%[[X]], %[[W]], %[[B]]) {{.*}}groups = 2
// CHECK:        "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "bn_into_conv_fires_transpose_grouped"
"func.func"() ({
^bb0(%x: tensor<1x2x3xf32>):
  %w = "graph.constant"() {value = dense<1.0> : tensor<2x1x2xf32>} : () -> tensor<2x1x2xf32>
  %b = "graph.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %scale = "graph.constant"() {value = dense<[2.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %bias = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "graph.constant"() {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %c = "graph.conv_transpose"(%x, %w, %b) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, output_padding = array<i64>, groups = 2 : i64} : (tensor<1x2x3xf32>, tensor<2x1x2xf32>, tensor<2xf32>) -> tensor<1x2x4xf32>
  %r = "graph.batch_norm"(%c, %scale, %bias, %mean, %var) {epsilon = 0.0 : f64} : (tensor<1x2x4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x4xf32>
  "func.return"(%r) : (tensor<1x2x4xf32>) -> ()
}) {sym_name = "bn_into_conv_fires_transpose_grouped", function_type = (tensor<1x2x3xf32>) -> (tensor<1x2x4xf32>)} : () -> ()

// The conv's output is returned too: folding would change it.  (It is decomposed instead.)
// CHECK:      %[[C:[0-9]+]] = "graph.conv"
// CHECK:      "graph.mul"(%[[C]],
// CHECK:      "graph.add"
// CHECK:      sym_name = "bn_into_conv_stays_shared"
"func.func"() ({
^bb0(%x: tensor<1x1x3x3xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0, 2.0]]], [[[3.0, 4.0]]]]> : tensor<2x1x1x2xf32>} : () -> tensor<2x1x1x2xf32>
  %scale = "graph.constant"() {value = dense<[2.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %bias = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "graph.constant"() {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %c = "graph.conv"(%x, %w) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x1x3x3xf32>, tensor<2x1x1x2xf32>) -> tensor<1x2x3x2xf32>
  %r = "graph.batch_norm"(%c, %scale, %bias, %mean, %var) {epsilon = 0.0 : f64} : (tensor<1x2x3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x3x2xf32>
  "func.return"(%r, %c) : (tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>) -> ()
}) {sym_name = "bn_into_conv_stays_shared", function_type = (tensor<1x1x3x3xf32>) -> (tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>)} : () -> ()

// GEMM with b transposed (N, K): row n of b scales by a[n]; c [1, 1] -> c * a + t.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<3x2xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}2.0, 4.0], [0.75, 1.0]]> : tensor<2x2xf32>}
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[2.0, -1.0]> : tensor<2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gemm"(%[[X]], %[[W]], %[[C]]) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = true}
// CHECK:        "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "bn_into_gemm_fires"
"func.func"() ({
^bb0(%x: tensor<3x2xf32>):
  %w = "graph.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %cb = "graph.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %scale = "graph.constant"() {value = dense<[2.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %bias = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "graph.constant"() {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %g = "graph.gemm"(%x, %w, %cb) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = true} : (tensor<3x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  %r = "graph.batch_norm"(%g, %scale, %bias, %mean, %var) {epsilon = 0.0 : f64} : (tensor<3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  "func.return"(%r) : (tensor<3x2xf32>) -> ()
}) {sym_name = "bn_into_gemm_fires", function_type = (tensor<3x2xf32>) -> (tensor<3x2xf32>)} : () -> ()

// The GEMM's weights are a run-time input: nothing to scale.
// CHECK:      "graph.gemm"(%arg0, %arg1)
// CHECK:      "graph.mul"
// CHECK:      sym_name = "bn_into_gemm_stays_runtime_weights"
"func.func"() ({
^bb0(%x: tensor<3x2xf32>, %w: tensor<2x2xf32>):
  %scale = "graph.constant"() {value = dense<[2.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %bias = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "graph.constant"() {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %g = "graph.gemm"(%x, %w) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<3x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
  %r = "graph.batch_norm"(%g, %scale, %bias, %mean, %var) {epsilon = 0.0 : f64} : (tensor<3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  "func.return"(%r) : (tensor<3x2xf32>) -> ()
}) {sym_name = "bn_into_gemm_stays_runtime_weights", function_type = (tensor<3x2xf32>, tensor<2x2xf32>) -> (tensor<3x2xf32>)} : () -> ()

// matmul (K, N): column n scales by a[n]; becomes a gemm whose bias is t.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<3x2xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}2.0, 0.5], [6.0, 1.0]]> : tensor<2x2xf32>}
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[0.0, -1.25]> : tensor<2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gemm"(%[[X]], %[[W]], %[[C]])
// CHECK:        "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "bn_into_matmul_fires"
"func.func"() ({
^bb0(%x: tensor<3x2xf32>):
  %w = "graph.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %scale = "graph.constant"() {value = dense<[2.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %bias = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "graph.constant"() {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %g = "graph.matmul"(%x, %w) : (tensor<3x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
  %r = "graph.batch_norm"(%g, %scale, %bias, %mean, %var) {epsilon = 0.0 : f64} : (tensor<3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  "func.return"(%r) : (tensor<3x2xf32>) -> ()
}) {sym_name = "bn_into_matmul_fires", function_type = (tensor<3x2xf32>) -> (tensor<3x2xf32>)} : () -> ()

// A matmul by a run-time matrix: nothing to scale.
// CHECK:      "graph.matmul"(%arg0, %arg1)
// CHECK:      sym_name = "bn_into_matmul_stays_runtime_weights"
"func.func"() ({
^bb0(%x: tensor<3x2xf32>, %w: tensor<2x2xf32>):
  %scale = "graph.constant"() {value = dense<[2.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %bias = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "graph.constant"() {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %g = "graph.matmul"(%x, %w) : (tensor<3x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
  %r = "graph.batch_norm"(%g, %scale, %bias, %mean, %var) {epsilon = 0.0 : f64} : (tensor<3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  "func.return"(%r) : (tensor<3x2xf32>) -> ()
}) {sym_name = "bn_into_matmul_stays_runtime_weights", function_type = (tensor<3x2xf32>, tensor<2x2xf32>) -> (tensor<3x2xf32>)} : () -> ()

// DenseNet's pre-activation BatchNorm follows a pool: x * a + t with (C, 1, 1) constants.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x2x2x2xf32>):
// CHECK-NEXT:   %[[P:[0-9]+]] = "graph.max_pool"(%[[X]])
// CHECK-NEXT:   %[[A:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[\[}}2.0]], {{\[\[}}0.25]]]> : tensor<2x1x1xf32>}
// CHECK-NEXT:   %[[T:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[\[}}0.0]], {{\[\[}}-1.25]]]> : tensor<2x1x1xf32>}
// CHECK-NEXT:   %[[M:[0-9]+]] = "graph.mul"(%[[P]], %[[A]])
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.add"(%[[M]], %[[T]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "bn_decompose_fires"
"func.func"() ({
^bb0(%x: tensor<1x2x2x2xf32>):
  %scale = "graph.constant"() {value = dense<[2.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %bias = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %mean = "graph.constant"() {value = dense<[0.5, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %p = "graph.max_pool"(%x) {kernel = array<i64: 1, 1>, strides = array<i64>, pads = array<i64>, dilations = array<i64>, ceil_mode = false} : (tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %r = "graph.batch_norm"(%p, %scale, %bias, %mean, %var) {epsilon = 0.0 : f64} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  "func.return"(%r) : (tensor<1x2x2x2xf32>) -> ()
}) {sym_name = "bn_decompose_fires", function_type = (tensor<1x2x2x2xf32>) -> (tensor<1x2x2x2xf32>)} : () -> ()

// Statistics computed at run time (training-style inputs): nothing is constant.
// CHECK:      "graph.batch_norm"
// CHECK:      sym_name = "bn_decompose_stays_runtime_stats"
"func.func"() ({
^bb0(%x: tensor<1x2x2x2xf32>, %mean: tensor<2xf32>):
  %scale = "graph.constant"() {value = dense<[2.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %bias = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %var = "graph.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %r = "graph.batch_norm"(%x, %scale, %bias, %mean, %var) {epsilon = 0.0 : f64} : (tensor<1x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  "func.return"(%r) : (tensor<1x2x2x2xf32>) -> ()
}) {sym_name = "bn_decompose_stays_runtime_stats", function_type = (tensor<1x2x2x2xf32>, tensor<2xf32>) -> (tensor<1x2x2x2xf32>)} : () -> ()
