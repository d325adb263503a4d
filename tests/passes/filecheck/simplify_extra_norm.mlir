// RUN: tf-opt %s -p simplify-extra | filecheck %s
// Spelled-out means and LayerNorms (passes/graph/norm_patterns.py), as JAX's StableHLO writes them.

// CHECK:      "graph.reduce_mean"
// CHECK-SAME: keepdims = true
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "sum_scaled_as_mean_fires_unsqueezed"
"func.func"() ({
^bb0(%x: tensor<2x4xf32>):
  %s = "graph.reduce_sum"(%x) {axes = [1]} : (tensor<2x4xf32>) -> tensor<2xf32>
  %u = "graph.unsqueeze"(%s) {axes = [1]} : (tensor<2xf32>) -> tensor<2x1xf32>
  %c = "graph.constant"() {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
  %m = "graph.mul"(%u, %c) : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
  "func.return"(%m) : (tensor<2x1xf32>) -> ()
}) {sym_name = "sum_scaled_as_mean_fires_unsqueezed", function_type = (tensor<2x4xf32>) -> (tensor<2x1xf32>)} : () -> ()

// CHECK:      "graph.reduce_mean"
// CHECK-SAME: keepdims = false
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "sum_scaled_as_mean_fires_plain"
"func.func"() ({
^bb0(%x: tensor<2x3x5xf32>):
  %s = "graph.reduce_sum"(%x) {axes = [1, 2]} : (tensor<2x3x5xf32>) -> tensor<2xf32>
  %c = "graph.constant"() {value = dense<0x3D888889> : tensor<f32>} : () -> tensor<f32>
  %m = "graph.mul"(%s, %c) : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  "func.return"(%m) : (tensor<2xf32>) -> ()
}) {sym_name = "sum_scaled_as_mean_fires_plain", function_type = (tensor<2x3x5xf32>) -> (tensor<2xf32>)} : () -> ()

// CHECK:      "graph.reduce_sum"
// CHECK:      sym_name = "sum_scaled_as_mean_stays_other_factor"
"func.func"() ({
^bb0(%x: tensor<2x4xf32>):
  %s = "graph.reduce_sum"(%x) {axes = [1]} : (tensor<2x4xf32>) -> tensor<2xf32>
  %c = "graph.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %m = "graph.mul"(%s, %c) : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  "func.return"(%m) : (tensor<2xf32>) -> ()
}) {sym_name = "sum_scaled_as_mean_stays_other_factor", function_type = (tensor<2x4xf32>) -> (tensor<2xf32>)} : () -> ()

// CHECK:      "graph.layer_norm"
// CHECK-SAME: axis = 2
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "mean_var_as_layer_norm_fires"
"func.func"() ({
^bb0(%x: tensor<2x3x8xf32>):
  %u = "graph.reduce_mean"(%x) {axes = [2], keepdims = true} : (tensor<2x3x8xf32>) -> tensor<2x3x1xf32>
  %d = "graph.sub"(%x, %u) : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %q = "graph.mul"(%d, %d) : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  %v = "graph.reduce_mean"(%q) {axes = [2], keepdims = true} : (tensor<2x3x8xf32>) -> tensor<2x3x1xf32>
  %e = "graph.constant"() {value = dense<1.0e-5> : tensor<1x1x1xf32>} : () -> tensor<1x1x1xf32>
  %a = "graph.add"(%v, %e) : (tensor<2x3x1xf32>, tensor<1x1x1xf32>) -> tensor<2x3x1xf32>
  %s = "graph.sqrt"(%a) : (tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %y = "graph.div"(%d, %s) : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  "func.return"(%y) : (tensor<2x3x8xf32>) -> ()
}) {sym_name = "mean_var_as_layer_norm_fires", function_type = (tensor<2x3x8xf32>) -> (tensor<2x3x8xf32>)} : () -> ()

// CHECK:      "graph.div"
// CHECK:      sym_name = "mean_var_as_layer_norm_stays_shared_mean"
"func.func"() ({
^bb0(%x: tensor<3x8xf32>):
  %u = "graph.reduce_mean"(%x) {axes = [1], keepdims = true} : (tensor<3x8xf32>) -> tensor<3x1xf32>
  %d = "graph.sub"(%x, %u) : (tensor<3x8xf32>, tensor<3x1xf32>) -> tensor<3x8xf32>
  %q = "graph.mul"(%d, %d) : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  %v = "graph.reduce_mean"(%q) {axes = [1], keepdims = true} : (tensor<3x8xf32>) -> tensor<3x1xf32>
  %e = "graph.constant"() {value = dense<1.0e-5> : tensor<1x1xf32>} : () -> tensor<1x1xf32>
  %a = "graph.add"(%v, %e) : (tensor<3x1xf32>, tensor<1x1xf32>) -> tensor<3x1xf32>
  %s = "graph.sqrt"(%a) : (tensor<3x1xf32>) -> tensor<3x1xf32>
  %y = "graph.div"(%d, %s) : (tensor<3x8xf32>, tensor<3x1xf32>) -> tensor<3x8xf32>
  "func.return"(%y, %u) : (tensor<3x8xf32>, tensor<3x1xf32>) -> ()
}) {sym_name = "mean_var_as_layer_norm_stays_shared_mean", function_type = (tensor<3x8xf32>) -> (tensor<3x8xf32>, tensor<3x1xf32>)} : () -> ()
