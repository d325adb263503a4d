// RUN: tf-opt %s -p simplify-extra | filecheck %s
// Transposes sink below elementwise ops and reductions (passes/graph/transpose_sinking.py), and
// max with zero is a ReLU.  (Max reductions keep the numeric check exact: a sum over another
// axis order rounds differently.)

// CHECK:      "graph.conv"
// CHECK-NEXT: "graph.relu"
// CHECK-NEXT: "graph.constant"() {value = dense<{{\[\[\[\[}}0.5]], {{\[\[}}-1.0]]]]> : tensor<1x2x1x1xf32>}
// CHECK-NEXT: "graph.add"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "sink_transpose_elementwise_fires_nhwc_pair"
"func.func"() ({
^bb0(%x: tensor<1x3x4x4xf32>, %w: tensor<2x3x1x1xf32>):
  %c = "graph.conv"(%x, %w) : (tensor<1x3x4x4xf32>, tensor<2x3x1x1xf32>) -> tensor<1x2x4x4xf32>
  %t = "graph.transpose"(%c) {perm = [0, 2, 3, 1]} : (tensor<1x2x4x4xf32>) -> tensor<1x4x4x2xf32>
  %r = "graph.relu"(%t) : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %b = "graph.constant"() {value = dense<[0.5, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %a = "graph.add"(%r, %b) : (tensor<1x4x4x2xf32>, tensor<2xf32>) -> tensor<1x4x4x2xf32>
  %u = "graph.transpose"(%a) {perm = [0, 3, 1, 2]} : (tensor<1x4x4x2xf32>) -> tensor<1x2x4x4xf32>
  "func.return"(%u) : (tensor<1x2x4x4xf32>) -> ()
}) {sym_name = "sink_transpose_elementwise_fires_nhwc_pair", function_type = (tensor<1x3x4x4xf32>, tensor<2x3x1x1xf32>) -> (tensor<1x2x4x4xf32>)} : () -> ()

// CHECK:      "graph.transpose"
// CHECK-NEXT: "graph.relu"
// CHECK:      sym_name = "sink_transpose_elementwise_stays_shared"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %t = "graph.transpose"(%x) {perm = [1, 0]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %r = "graph.relu"(%t) : (tensor<3x2xf32>) -> tensor<3x2xf32>
  "func.return"(%r, %t) : (tensor<3x2xf32>, tensor<3x2xf32>) -> ()
}) {sym_name = "sink_transpose_elementwise_stays_shared", function_type = (tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<3x2xf32>)} : () -> ()

// CHECK:      "graph.transpose"
// CHECK-NEXT: "graph.add"
// CHECK:      sym_name = "sink_transpose_elementwise_stays_runtime_operand"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>, %y: tensor<3x2xf32>):
  %t = "graph.transpose"(%x) {perm = [1, 0]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %a = "graph.add"(%t, %y) : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  "func.return"(%a) : (tensor<3x2xf32>) -> ()
}) {sym_name = "sink_transpose_elementwise_stays_runtime_operand", function_type = (tensor<2x3xf32>, tensor<3x2xf32>) -> (tensor<3x2xf32>)} : () -> ()

// CHECK:      "graph.reduce_max"
// CHECK-SAME: axes = array<i64: 2, 3>
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "sink_transpose_reduction_fires_global_pool"
"func.func"() ({
^bb0(%x: tensor<2x3x4x5xf32>):
  %t = "graph.transpose"(%x) {perm = [0, 2, 3, 1]} : (tensor<2x3x4x5xf32>) -> tensor<2x4x5x3xf32>
  %s = "graph.reduce_max"(%t) {axes = [1, 2]} : (tensor<2x4x5x3xf32>) -> tensor<2x3xf32>
  "func.return"(%s) : (tensor<2x3xf32>) -> ()
}) {sym_name = "sink_transpose_reduction_fires_global_pool", function_type = (tensor<2x3x4x5xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      "graph.reduce_max"
// CHECK-SAME: axes = array<i64: 0>
// CHECK-NEXT: "graph.transpose"
// CHECK-SAME: perm = array<i64: 1, 0>
// CHECK:      sym_name = "sink_transpose_reduction_fires_reordered"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %t = "graph.transpose"(%x) {perm = [2, 0, 1]} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %s = "graph.reduce_max"(%t) {axes = [1]} : (tensor<4x2x3xf32>) -> tensor<4x3xf32>
  "func.return"(%s) : (tensor<4x3xf32>) -> ()
}) {sym_name = "sink_transpose_reduction_fires_reordered", function_type = (tensor<2x3x4xf32>) -> (tensor<4x3xf32>)} : () -> ()

// CHECK:      "graph.transpose"
// CHECK-NEXT: "graph.reduce_sum"
// CHECK:      sym_name = "sink_transpose_reduction_stays_shared"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %t = "graph.transpose"(%x) {perm = [1, 0]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %s = "graph.reduce_sum"(%t) {axes = [0]} : (tensor<3x2xf32>) -> tensor<2xf32>
  "func.return"(%s, %t) : (tensor<2xf32>, tensor<3x2xf32>) -> ()
}) {sym_name = "sink_transpose_reduction_stays_shared", function_type = (tensor<2x3xf32>) -> (tensor<2xf32>, tensor<3x2xf32>)} : () -> ()

// CHECK:      "graph.relu"
// CHECK:      sym_name = "max_zero_relu_fires"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %m = "graph.max"(%x, %z) : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xf32>
  "func.return"(%m) : (tensor<4xf32>) -> ()
}) {sym_name = "max_zero_relu_fires", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      "graph.max"
// CHECK:      sym_name = "max_zero_relu_stays_int"
"func.func"() ({
^bb0(%x: tensor<4xi32>):
  %z = "graph.constant"() {value = dense<0> : tensor<1xi32>} : () -> tensor<1xi32>
  %m = "graph.max"(%x, %z) : (tensor<4xi32>, tensor<1xi32>) -> tensor<4xi32>
  "func.return"(%m) : (tensor<4xi32>) -> ()
}) {sym_name = "max_zero_relu_stays_int", function_type = (tensor<4xi32>) -> (tensor<4xi32>)} : () -> ()

// CHECK:      "graph.relu"
// CHECK:      sym_name = "zero_max_relu_fires"
"func.func"() ({
^bb0(%x: tensor<2x4xf32>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %m = "graph.max"(%z, %x) : (tensor<f32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  "func.return"(%m) : (tensor<2x4xf32>) -> ()
}) {sym_name = "zero_max_relu_fires", function_type = (tensor<2x4xf32>) -> (tensor<2x4xf32>)} : () -> ()

// CHECK:      "graph.max"
// CHECK:      sym_name = "zero_max_relu_stays_broadcasting"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<2x4xf32>} : () -> tensor<2x4xf32>
  %m = "graph.max"(%z, %x) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  "func.return"(%m) : (tensor<2x4xf32>) -> ()
}) {sym_name = "zero_max_relu_stays_broadcasting", function_type = (tensor<4xf32>) -> (tensor<2x4xf32>)} : () -> ()
