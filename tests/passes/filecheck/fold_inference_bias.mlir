// RUN: tf-opt %s -p 'fold-inference' --rtol=1e-5 --atol=1e-6 | filecheck %s
// Bias adds and scales next to a conv / GEMM / matmul go into its weights and bias;
// identity (ONNX Dropout at inference) disappears.

// A per-channel add (C, 1, 1) after a conv: the conv's bias.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x1x2x2xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[\[\[}}1.0]]], {{\[\[\[}}2.0]]]]> : tensor<2x1x1x1xf32>}
// CHECK:        %[[B:[0-9]+]] = "graph.constant"() {value = dense<[0.5, -1.0]> : tensor<2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.conv"(%[[X]], %[[W]], %[[B]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "bias_into_conv_fires"
"func.func"() ({
^bb0(%x: tensor<1x1x2x2xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0]]], [[[2.0]]]]> : tensor<2x1x1x1xf32>} : () -> tensor<2x1x1x1xf32>
  %c = "graph.constant"() {value = dense<[[[0.5]], [[-1.0]]]> : tensor<2x1x1xf32>} : () -> tensor<2x1x1xf32>
  %y = "graph.conv"(%x, %w) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x1x2x2xf32>, tensor<2x1x1x1xf32>) -> tensor<1x2x2x2xf32>
  %r = "graph.add"(%y, %c) : (tensor<1x2x2x2xf32>, tensor<2x1x1xf32>) -> tensor<1x2x2x2xf32>
  "func.return"(%r) : (tensor<1x2x2x2xf32>) -> ()
}) {sym_name = "bias_into_conv_fires", function_type = (tensor<1x1x2x2xf32>) -> (tensor<1x2x2x2xf32>)} : () -> ()

// The added constant varies over the pixels, not per channel.
// CHECK:      "graph.conv"
// CHECK-NEXT: "graph.add"
// CHECK:      sym_name = "bias_into_conv_stays_spatial"
"func.func"() ({
^bb0(%x: tensor<1x1x2x2xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0]]], [[[2.0]]]]> : tensor<2x1x1x1xf32>} : () -> tensor<2x1x1x1xf32>
  %c = "graph.constant"() {value = dense<[0.5, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %y = "graph.conv"(%x, %w) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x1x2x2xf32>, tensor<2x1x1x1xf32>) -> tensor<1x2x2x2xf32>
  %r = "graph.add"(%y, %c) : (tensor<1x2x2x2xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  "func.return"(%r) : (tensor<1x2x2x2xf32>) -> ()
}) {sym_name = "bias_into_conv_stays_spatial", function_type = (tensor<1x1x2x2xf32>) -> (tensor<1x2x2x2xf32>)} : () -> ()

// A scalar multiply scales weights and bias.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x1x2x2xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[\[\[}}3.0]]], {{\[\[\[}}6.0]]]]> : tensor<2x1x1x1xf32>}
// CHECK-NEXT:   %[[B:[0-9]+]] = "graph.constant"() {value = dense<[3.0, -3.0]> : tensor<2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.conv"(%[[X]], %[[W]], %[[B]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "scale_into_conv_fires"
"func.func"() ({
^bb0(%x: tensor<1x1x2x2xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0]]], [[[2.0]]]]> : tensor<2x1x1x1xf32>} : () -> tensor<2x1x1x1xf32>
  %b = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %s = "graph.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %y = "graph.conv"(%x, %w, %b) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x1x2x2xf32>, tensor<2x1x1x1xf32>, tensor<2xf32>) -> tensor<1x2x2x2xf32>
  %r = "graph.mul"(%s, %y) : (tensor<f32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  "func.return"(%r) : (tensor<1x2x2x2xf32>) -> ()
}) {sym_name = "scale_into_conv_fires", function_type = (tensor<1x1x2x2xf32>) -> (tensor<1x2x2x2xf32>)} : () -> ()

// The conv's output is used twice.
// CHECK:      "graph.conv"
// CHECK:      "graph.mul"
// CHECK:      sym_name = "scale_into_conv_stays_shared"
"func.func"() ({
^bb0(%x: tensor<1x1x2x2xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0]]], [[[2.0]]]]> : tensor<2x1x1x1xf32>} : () -> tensor<2x1x1x1xf32>
  %s = "graph.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %y = "graph.conv"(%x, %w) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x1x2x2xf32>, tensor<2x1x1x1xf32>) -> tensor<1x2x2x2xf32>
  %r = "graph.mul"(%y, %s) : (tensor<1x2x2x2xf32>, tensor<f32>) -> tensor<1x2x2x2xf32>
  "func.return"(%r, %y) : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> ()
}) {sym_name = "scale_into_conv_stays_shared", function_type = (tensor<1x1x2x2xf32>) -> (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>)} : () -> ()

// An input scaled per channel before a conv (a normalisation): the weights of input channel c
// scale by s[c]; zero padding stays zero.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x2x2x2xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[\[\[}}2.0]], {{\[\[}}-0.5]]]]> : tensor<1x2x1x1xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.conv"(%[[X]], %[[W]]) {{.*}}pads = array<i64: 1, 1, 1, 1>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "input_scale_into_conv_fires"
"func.func"() ({
^bb0(%x: tensor<1x2x2x2xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0]], [[1.0]]]]> : tensor<1x2x1x1xf32>} : () -> tensor<1x2x1x1xf32>
  %s = "graph.constant"() {value = dense<[[[2.0]], [[-0.5]]]> : tensor<2x1x1xf32>} : () -> tensor<2x1x1xf32>
  %m = "graph.mul"(%x, %s) : (tensor<1x2x2x2xf32>, tensor<2x1x1xf32>) -> tensor<1x2x2x2xf32>
  %r = "graph.conv"(%m, %w) {strides = array<i64>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x2x2x2xf32>, tensor<1x2x1x1xf32>) -> tensor<1x1x4x4xf32>
  "func.return"(%r) : (tensor<1x1x4x4xf32>) -> ()
}) {sym_name = "input_scale_into_conv_fires", function_type = (tensor<1x2x2x2xf32>) -> (tensor<1x1x4x4xf32>)} : () -> ()

// An add before a conv does not commute with its zero padding.
// CHECK:      "graph.add"
// CHECK-NEXT: "graph.conv"
// CHECK:      sym_name = "input_scale_into_conv_stays_add"
"func.func"() ({
^bb0(%x: tensor<1x2x2x2xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0]], [[1.0]]]]> : tensor<1x2x1x1xf32>} : () -> tensor<1x2x1x1xf32>
  %s = "graph.constant"() {value = dense<[[[2.0]], [[-0.5]]]> : tensor<2x1x1xf32>} : () -> tensor<2x1x1xf32>
  %m = "graph.add"(%x, %s) : (tensor<1x2x2x2xf32>, tensor<2x1x1xf32>) -> tensor<1x2x2x2xf32>
  %r = "graph.conv"(%m, %w) {strides = array<i64>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x2x2x2xf32>, tensor<1x2x1x1xf32>) -> tensor<1x1x4x4xf32>
  "func.return"(%r) : (tensor<1x1x4x4xf32>) -> ()
}) {sym_name = "input_scale_into_conv_stays_add", function_type = (tensor<1x2x2x2xf32>) -> (tensor<1x1x4x4xf32>)} : () -> ()

// An add after a gemm joins its bias (beta folded in).
// CHECK:      ^bb0(%[[A:arg[0-9]+]]: tensor<3x2xf32>, %[[B:arg[0-9]+]]: tensor<2x2xf32>):
// CHECK:        %[[C:[0-9]+]] = "graph.constant"() {value = dense<[3.0, 5.0]> : tensor<2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gemm"(%[[A]], %[[B]], %[[C]]) {alpha = 1.0 : f64, beta = 1.0 : f64
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "bias_into_gemm_fires"
"func.func"() ({
^bb0(%a: tensor<3x2xf32>, %b: tensor<2x2xf32>):
  %c = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %d = "graph.constant"() {value = dense<[1.0, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %g = "graph.gemm"(%a, %b, %c) {alpha = 1.0 : f64, beta = 2.0 : f64, trans_a = false, trans_b = false} : (tensor<3x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  %r = "graph.add"(%g, %d) : (tensor<3x2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  "func.return"(%r) : (tensor<3x2xf32>) -> ()
}) {sym_name = "bias_into_gemm_fires", function_type = (tensor<3x2xf32>, tensor<2x2xf32>) -> (tensor<3x2xf32>)} : () -> ()

// The add broadcasts the gemm's result to a bigger shape.
// CHECK:      "graph.gemm"
// CHECK-NEXT: "graph.add"
// CHECK:      sym_name = "bias_into_gemm_stays_broadcast"
"func.func"() ({
^bb0(%a: tensor<3x2xf32>, %b: tensor<2x2xf32>):
  %d = "graph.constant"() {value = dense<1.0> : tensor<4x3x2xf32>} : () -> tensor<4x3x2xf32>
  %g = "graph.gemm"(%a, %b) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<3x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
  %r = "graph.add"(%g, %d) : (tensor<3x2xf32>, tensor<4x3x2xf32>) -> tensor<4x3x2xf32>
  "func.return"(%r) : (tensor<4x3x2xf32>) -> ()
}) {sym_name = "bias_into_gemm_stays_broadcast", function_type = (tensor<3x2xf32>, tensor<2x2xf32>) -> (tensor<4x3x2xf32>)} : () -> ()

// Per-column scale: columns of b (K, N) and the bias.
// CHECK:      ^bb0(%[[A:arg[0-9]+]]: tensor<3x2xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}2.0, -2.0], [6.0, -4.0]]> : tensor<2x2xf32>}
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[2.0, -1.0]> : tensor<2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gemm"(%[[A]], %[[W]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "scale_into_gemm_fires"
"func.func"() ({
^bb0(%a: tensor<3x2xf32>):
  %b = "graph.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %c = "graph.constant"() {value = dense<[1.0, 1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %s = "graph.constant"() {value = dense<[2.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %g = "graph.gemm"(%a, %b, %c) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<3x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  %r = "graph.mul"(%g, %s) : (tensor<3x2xf32>, tensor<2xf32>) -> tensor<3x2xf32>
  "func.return"(%r) : (tensor<3x2xf32>) -> ()
}) {sym_name = "scale_into_gemm_fires", function_type = (tensor<3x2xf32>) -> (tensor<3x2xf32>)} : () -> ()

// A per-row scale is not a column scale.
// CHECK:      "graph.gemm"
// CHECK-NEXT: "graph.mul"
// CHECK:      sym_name = "scale_into_gemm_stays_rows"
"func.func"() ({
^bb0(%a: tensor<3x2xf32>):
  %b = "graph.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %s = "graph.constant"() {value = dense<[[2.0], [-1.0], [0.5]]> : tensor<3x1xf32>} : () -> tensor<3x1xf32>
  %g = "graph.gemm"(%a, %b) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<3x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
  %r = "graph.mul"(%g, %s) : (tensor<3x2xf32>, tensor<3x1xf32>) -> tensor<3x2xf32>
  "func.return"(%r) : (tensor<3x2xf32>) -> ()
}) {sym_name = "scale_into_gemm_stays_rows", function_type = (tensor<3x2xf32>) -> (tensor<3x2xf32>)} : () -> ()

// MatMul + Add of an ONNX export (batch dims included): one GEMM with the bias, rows flattened.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x4xf32>, %[[W:arg[0-9]+]]: tensor<4x5xf32>):
// CHECK-NEXT:   %[[F:[0-9]+]] = "graph.reshape"(%[[X]]) {shape = array<i64: 6, 4>}
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xf32>}
// CHECK-NEXT:   %[[G:[0-9]+]] = "graph.gemm"(%[[F]], %[[W]], %[[C]])
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.reshape"(%[[G]]) {shape = array<i64: 2, 3, 5>}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "bias_into_matmul_fires"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>, %w: tensor<4x5xf32>):
  %d = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xf32>} : () -> tensor<5xf32>
  %m = "graph.matmul"(%x, %w) : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %r = "graph.add"(%m, %d) : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  "func.return"(%r) : (tensor<2x3x5xf32>) -> ()
}) {sym_name = "bias_into_matmul_fires", function_type = (tensor<2x3x4xf32>, tensor<4x5xf32>) -> (tensor<2x3x5xf32>)} : () -> ()

// A batched matmul (both operands batched) is no GEMM.
// CHECK:      "graph.matmul"
// CHECK-NEXT: "graph.add"
// CHECK:      sym_name = "bias_into_matmul_stays_batched_rhs"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>, %w: tensor<2x4x5xf32>):
  %d = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xf32>} : () -> tensor<5xf32>
  %m = "graph.matmul"(%x, %w) : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  %r = "graph.add"(%m, %d) : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  "func.return"(%r) : (tensor<2x3x5xf32>) -> ()
}) {sym_name = "bias_into_matmul_stays_batched_rhs", function_type = (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> (tensor<2x3x5xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x2xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}0.5, 0.5], [1.5, 1.0]]> : tensor<2x2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.matmul"(%[[X]], %[[W]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "scale_into_matmul_fires"
"func.func"() ({
^bb0(%x: tensor<2x3x2xf32>):
  %w = "graph.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %s = "graph.constant"() {value = dense<[0.5, 0.25]> : tensor<2xf32>} : () -> tensor<2xf32>
  %m = "graph.matmul"(%x, %w) : (tensor<2x3x2xf32>, tensor<2x2xf32>) -> tensor<2x3x2xf32>
  %r = "graph.mul"(%m, %s) : (tensor<2x3x2xf32>, tensor<2xf32>) -> tensor<2x3x2xf32>
  "func.return"(%r) : (tensor<2x3x2xf32>) -> ()
}) {sym_name = "scale_into_matmul_fires", function_type = (tensor<2x3x2xf32>) -> (tensor<2x3x2xf32>)} : () -> ()

// CHECK:      "graph.matmul"(%arg0, %arg1)
// CHECK-NEXT: "graph.mul"
// CHECK:      sym_name = "scale_into_matmul_stays_runtime_weights"
"func.func"() ({
^bb0(%x: tensor<2x3x2xf32>, %w: tensor<2x2xf32>):
  %s = "graph.constant"() {value = dense<[0.5, 0.25]> : tensor<2xf32>} : () -> tensor<2xf32>
  %m = "graph.matmul"(%x, %w) : (tensor<2x3x2xf32>, tensor<2x2xf32>) -> tensor<2x3x2xf32>
  %r = "graph.mul"(%m, %s) : (tensor<2x3x2xf32>, tensor<2xf32>) -> tensor<2x3x2xf32>
  "func.return"(%r) : (tensor<2x3x2xf32>) -> ()
}) {sym_name = "scale_into_matmul_stays_runtime_weights", function_type = (tensor<2x3x2xf32>, tensor<2x2xf32>) -> (tensor<2x3x2xf32>)} : () -> ()

// Attention scores q k^T * 0.5, q from a projection through a reshape and a transpose: the
// scale goes into the projection's weights and bias, no multiply over the scores is left.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4x2xf32>, %[[K:arg[0-9]+]]: tensor<1x2x2xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}0.5, 1.0], [1.5, 2.0]]> : tensor<2x2xf32>}
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[0.5, -0.5]> : tensor<2xf32>}
// CHECK-NEXT:   %[[G:[0-9]+]] = "graph.gemm"(%[[X]], %[[W]], %[[C]])
// CHECK-NEXT:   "graph.reshape"(%[[G]])
// CHECK-NEXT:   "graph.transpose"
// CHECK-NEXT:   "graph.reshape"
// CHECK-NEXT:   "graph.batch_matmul"
// CHECK-NOT:    "graph.mul"
// CHECK:      sym_name = "scale_through_matmul_fires"
"func.func"() ({
^bb0(%x: tensor<4x2xf32>, %k: tensor<1x2x2xf32>):
  %w = "graph.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %c = "graph.constant"() {value = dense<[1.0, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %s = "graph.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %g = "graph.gemm"(%x, %w, %c) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<4x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<4x2xf32>
  %q = "graph.reshape"(%g) {shape = array<i64: 2, 1, 2, 2>} : (tensor<4x2xf32>) -> tensor<2x1x2x2xf32>
  %qt = "graph.transpose"(%q) {perm = array<i64: 1, 0, 2, 3>} : (tensor<2x1x2x2xf32>) -> tensor<1x2x2x2xf32>
  %q3 = "graph.reshape"(%qt) {shape = array<i64: 1, 4, 2>} : (tensor<1x2x2x2xf32>) -> tensor<1x4x2xf32>
  %sc = "graph.batch_matmul"(%q3, %k) : (tensor<1x4x2xf32>, tensor<1x2x2xf32>) -> tensor<1x4x2xf32>
  %r = "graph.mul"(%sc, %s) : (tensor<1x4x2xf32>, tensor<f32>) -> tensor<1x4x2xf32>
  "func.return"(%r) : (tensor<1x4x2xf32>) -> ()
}) {sym_name = "scale_through_matmul_fires", function_type = (tensor<4x2xf32>, tensor<1x2x2xf32>) -> (tensor<1x4x2xf32>)} : () -> ()

// GPT-2's fused QKV projection: only the query's columns of the weights are scaled.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x2xf32>):
// CHECK:        %[[W:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}0.5, 1.0, 3.0, 4.0], [2.5, 3.0, 7.0, 8.0]]> : tensor<2x4xf32>}
// CHECK-NEXT:   %[[G:[0-9]+]] = "graph.gemm"(%[[X]], %[[W]])
// CHECK-NEXT:   %[[S:[0-9]+]]:2 = "graph.split"(%[[G]])
// CHECK-NEXT:   "graph.transpose"(%[[S]]#1)
// CHECK-NEXT:   "graph.matmul"(%[[S]]#0,
// CHECK-NEXT:   "func.return"
// CHECK-NEXT: sym_name = "scale_through_matmul_fires_split"
"func.func"() ({
^bb0(%x: tensor<2x2xf32>):
  %w = "graph.constant"() {value = dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>} : () -> tensor<2x4xf32>
  %s = "graph.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %g = "graph.gemm"(%x, %w) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<2x2xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %qk:2 = "graph.split"(%g) {axis = 1 : i64, sizes = array<i64: 2, 2>} : (tensor<2x4xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>)
  %kt = "graph.transpose"(%qk#1) {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %sc = "graph.matmul"(%qk#0, %kt) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %r = "graph.mul"(%sc, %s) : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  "func.return"(%r) : (tensor<2x2xf32>) -> ()
}) {sym_name = "scale_through_matmul_fires_split", function_type = (tensor<2x2xf32>) -> (tensor<2x2xf32>)} : () -> ()

// Both operands are run-time values: there are no weights to take the scale.
// CHECK:      "graph.batch_matmul"(%arg0, %arg1)
// CHECK-NEXT: "graph.mul"
// CHECK:      sym_name = "scale_through_matmul_stays_runtime"
"func.func"() ({
^bb0(%q: tensor<1x4x2xf32>, %k: tensor<1x2x2xf32>):
  %s = "graph.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %sc = "graph.batch_matmul"(%q, %k) : (tensor<1x4x2xf32>, tensor<1x2x2xf32>) -> tensor<1x4x2xf32>
  %r = "graph.mul"(%sc, %s) : (tensor<1x4x2xf32>, tensor<f32>) -> tensor<1x4x2xf32>
  "func.return"(%r) : (tensor<1x4x2xf32>) -> ()
}) {sym_name = "scale_through_matmul_stays_runtime", function_type = (tensor<1x4x2xf32>, tensor<1x2x2xf32>) -> (tensor<1x4x2xf32>)} : () -> ()

// ONNX Dropout imports as identity.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.relu"(%[[X]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "identity_fires_dropout"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %d = "graph.identity"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.relu"(%d) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "identity_fires_dropout", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      "graph.abs"
// CHECK:      sym_name = "identity_stays_abs"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %d = "graph.abs"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%d) : (tensor<4xf32>) -> ()
}) {sym_name = "identity_stays_abs", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()
