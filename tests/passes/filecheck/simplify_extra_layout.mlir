// RUN: tf-opt %s -p 'simplify-extra' | filecheck %s
// Activations between reshapes that cancel, and a channels-last LayerNorm read by a GEMM
// (EXTRA_PATTERNS and LAYOUT_PATTERNS of rules_extra.py).

// A Linear over the last dim of a rank-3 tensor is reshape -> gemm -> reshape: the GELU between
// two of them loses the reshapes and can become the first GEMM's epilogue.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<6x4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gelu"(%[[X]]) {approximate = "tanh"}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "reshape_unary_reshape_fires"
"func.func"() ({
^bb0(%x: tensor<6x4xf32>):
  %a = "graph.reshape"(%x) {shape = array<i64: 2, 3, 4>} : (tensor<6x4xf32>) -> tensor<2x3x4xf32>
  %g = "graph.gelu"(%a) {approximate = "tanh"} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %r = "graph.reshape"(%g) {shape = array<i64: 6, 4>} : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  "func.return"(%r) : (tensor<6x4xf32>) -> ()
}) {sym_name = "reshape_unary_reshape_fires", function_type = (tensor<6x4xf32>) -> (tensor<6x4xf32>)} : () -> ()

// The reshapes do not cancel (6x4 -> 4x6): they stay.
// CHECK:      "graph.reshape"
// CHECK-NEXT: "graph.relu"
// CHECK-NEXT: "graph.reshape"
// CHECK:      sym_name = "reshape_unary_reshape_stays_other_shape"
"func.func"() ({
^bb0(%x: tensor<6x4xf32>):
  %a = "graph.reshape"(%x) {shape = array<i64: 2, 3, 4>} : (tensor<6x4xf32>) -> tensor<2x3x4xf32>
  %g = "graph.relu"(%a) : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %r = "graph.reshape"(%g) {shape = array<i64: 4, 6>} : (tensor<2x3x4xf32>) -> tensor<4x6xf32>
  "func.return"(%r) : (tensor<4x6xf32>) -> ()
}) {sym_name = "reshape_unary_reshape_stays_other_shape", function_type = (tensor<6x4xf32>) -> (tensor<4x6xf32>)} : () -> ()

// ConvNeXt: permute(0,2,3,1) -> LayerNorm(C) -> Linear.  The LayerNorm goes back to NCHW (its
// transposes fuse into one kernel that reads and writes NCHW) and the GEMM reads (C, H*W) transposed.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x4x2x3xf32>, %[[S:arg[0-9]+]]: tensor<4xf32>, %[[B:arg[0-9]+]]: tensor<4xf32>, %[[W:arg[0-9]+]]: tensor<4x5xf32>, %[[C:arg[0-9]+]]: tensor<5xf32>):
// CHECK-NEXT:   %[[T:[0-9]+]] = "graph.transpose"(%[[X]]) {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:   %[[L:[0-9]+]] = "graph.layer_norm"(%[[T]], %[[S]], %[[B]])
// CHECK-NEXT:   %[[N:[0-9]+]] = "graph.transpose"(%[[L]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:   %[[M:[0-9]+]] = "graph.reshape"(%[[N]]) {shape = array<i64: 4, 6>}
// CHECK-NEXT:   %[[G:[0-9]+]] = "graph.gemm"(%[[M]], %[[W]], %[[C]]) {{.*}}trans_a = true
// CHECK-NEXT:   "func.return"(%[[G]])
// CHECK-NEXT: sym_name = "channel_norm_into_gemm_a_fires"
"func.func"() ({
^bb0(%x: tensor<1x4x2x3xf32>, %s: tensor<4xf32>, %b: tensor<4xf32>, %w: tensor<4x5xf32>, %c: tensor<5xf32>):
  %t = "graph.transpose"(%x) {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x4x2x3xf32>) -> tensor<1x2x3x4xf32>
  %l = "graph.layer_norm"(%t, %s, %b) {axis = 3 : i64, epsilon = 1.0e-06 : f64} : (tensor<1x2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x2x3x4xf32>
  %m = "graph.reshape"(%l) {shape = array<i64: 6, 4>} : (tensor<1x2x3x4xf32>) -> tensor<6x4xf32>
  %g = "graph.gemm"(%m, %w, %c) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<6x4xf32>, tensor<4x5xf32>, tensor<5xf32>) -> tensor<6x5xf32>
  "func.return"(%g) : (tensor<6x5xf32>) -> ()
}) {sym_name = "channel_norm_into_gemm_a_fires", function_type = (tensor<1x4x2x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4x5xf32>, tensor<5xf32>) -> (tensor<6x5xf32>)} : () -> ()

// Batch 2: (N*H*W, C) is not one transposed (C, H*W) matrix; the LayerNorm stays channels-last.
// CHECK:      "graph.layer_norm"
// CHECK-NEXT: "graph.reshape"
// CHECK-NEXT: "graph.gemm"{{.*}}trans_a = false
// CHECK:      sym_name = "channel_norm_into_gemm_a_stays_batch2"
"func.func"() ({
^bb0(%x: tensor<2x4x2x3xf32>, %w: tensor<4x5xf32>):
  %t = "graph.transpose"(%x) {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x2x3xf32>) -> tensor<2x2x3x4xf32>
  %l = "graph.layer_norm"(%t) {axis = 3 : i64, epsilon = 1.0e-06 : f64} : (tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32>
  %m = "graph.reshape"(%l) {shape = array<i64: 12, 4>} : (tensor<2x2x3x4xf32>) -> tensor<12x4xf32>
  %g = "graph.gemm"(%m, %w) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<12x4xf32>, tensor<4x5xf32>) -> tensor<12x5xf32>
  "func.return"(%g) : (tensor<12x5xf32>) -> ()
}) {sym_name = "channel_norm_into_gemm_a_stays_batch2", function_type = (tensor<2x4x2x3xf32>, tensor<4x5xf32>) -> (tensor<12x5xf32>)} : () -> ()

// ConvNeXt's channels_first LayerNorm spelled out: (x - u) / sqrt(mean((x - u)^2, 1) + eps), u = mean(x, 1).
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x4x2x3xf32>):
// CHECK-NEXT:   %[[T:[0-9]+]] = "graph.transpose"(%[[X]]) {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:   %[[L:[0-9]+]] = "graph.layer_norm"(%[[T]]) {axis = 3 : i64, epsilon = 9.999999974752427e-07 : f64}
// CHECK-NEXT:   %[[N:[0-9]+]] = "graph.transpose"(%[[L]]) {perm = array<i64: 0, 3, 1, 2>}
// CHECK-NEXT:   "func.return"(%[[N]])
// CHECK-NEXT: sym_name = "channel_mean_var_as_layer_norm_fires"
"func.func"() ({
^bb0(%x: tensor<2x4x2x3xf32>):
  %u = "graph.reduce_mean"(%x) {axes = array<i64: 1>, keepdims = true} : (tensor<2x4x2x3xf32>) -> tensor<2x1x2x3xf32>
  %d = "graph.sub"(%x, %u) : (tensor<2x4x2x3xf32>, tensor<2x1x2x3xf32>) -> tensor<2x4x2x3xf32>
  %q = "graph.mul"(%d, %d) : (tensor<2x4x2x3xf32>, tensor<2x4x2x3xf32>) -> tensor<2x4x2x3xf32>
  %v = "graph.reduce_mean"(%q) {axes = array<i64: 1>, keepdims = true} : (tensor<2x4x2x3xf32>) -> tensor<2x1x2x3xf32>
  %e = "graph.constant"() {value = dense<1.0e-06> : tensor<f64>} : () -> tensor<f64>
  %ef = "graph.cast"(%e) {dtype = f32} : (tensor<f64>) -> tensor<f32>
  %a = "graph.add"(%v, %ef) : (tensor<2x1x2x3xf32>, tensor<f32>) -> tensor<2x1x2x3xf32>
  %s = "graph.sqrt"(%a) : (tensor<2x1x2x3xf32>) -> tensor<2x1x2x3xf32>
  %y = "graph.div"(%d, %s) : (tensor<2x4x2x3xf32>, tensor<2x1x2x3xf32>) -> tensor<2x4x2x3xf32>
  "func.return"(%y) : (tensor<2x4x2x3xf32>) -> ()
}) {sym_name = "channel_mean_var_as_layer_norm_fires", function_type = (tensor<2x4x2x3xf32>) -> (tensor<2x4x2x3xf32>)} : () -> ()

// Statistics over H (axis 2), not the channels: it stays.
// CHECK:      "graph.reduce_mean"
// CHECK:      "graph.div"
// CHECK:      sym_name = "channel_mean_var_as_layer_norm_stays_other_axis"
"func.func"() ({
^bb0(%x: tensor<2x4x2x3xf32>):
  %u = "graph.reduce_mean"(%x) {axes = array<i64: 2>, keepdims = true} : (tensor<2x4x2x3xf32>) -> tensor<2x4x1x3xf32>
  %d = "graph.sub"(%x, %u) : (tensor<2x4x2x3xf32>, tensor<2x4x1x3xf32>) -> tensor<2x4x2x3xf32>
  %q = "graph.mul"(%d, %d) : (tensor<2x4x2x3xf32>, tensor<2x4x2x3xf32>) -> tensor<2x4x2x3xf32>
  %v = "graph.reduce_mean"(%q) {axes = array<i64: 2>, keepdims = true} : (tensor<2x4x2x3xf32>) -> tensor<2x4x1x3xf32>
  %e = "graph.constant"() {value = dense<1.0e-06> : tensor<f32>} : () -> tensor<f32>
  %a = "graph.add"(%v, %e) : (tensor<2x4x1x3xf32>, tensor<f32>) -> tensor<2x4x1x3xf32>
  %s = "graph.sqrt"(%a) : (tensor<2x4x1x3xf32>) -> tensor<2x4x1x3xf32>
  %y = "graph.div"(%d, %s) : (tensor<2x4x2x3xf32>, tensor<2x4x1x3xf32>) -> tensor<2x4x2x3xf32>
  "func.return"(%y) : (tensor<2x4x2x3xf32>) -> ()
}) {sym_name = "channel_mean_var_as_layer_norm_stays_other_axis", function_type = (tensor<2x4x2x3xf32>) -> (tensor<2x4x2x3xf32>)} : () -> ()
