// RUN: tf-opt %s -p simplify | filecheck %s
// transpose(x, identity) -> x;  transpose(transpose(x, p), q) -> transpose(x, compose(p, q)),
// which is x again when the composition is the identity.

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x4xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "transpose_identity_fires"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %a = "graph.transpose"(%x) {perm = array<i64: 0, 1, 2>} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  "func.return"(%a) : (tensor<2x3x4xf32>) -> ()
}) {sym_name = "transpose_identity_fires", function_type = (tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>)} : () -> ()

// A square transpose keeps the type but moves elements: the type check alone must not fire it.
// CHECK:      "graph.transpose"(%arg0) {perm = array<i64: 1, 0>} : (tensor<3x3xf32>) -> tensor<3x3xf32>
// CHECK:      sym_name = "transpose_identity_stays_square"
"func.func"() ({
^bb0(%x: tensor<3x3xf32>):
  %a = "graph.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<3x3xf32>) -> tensor<3x3xf32>
  "func.return"(%a) : (tensor<3x3xf32>) -> ()
}) {sym_name = "transpose_identity_stays_square", function_type = (tensor<3x3xf32>) -> (tensor<3x3xf32>)} : () -> ()

// (1, 2, 0) then (2, 0, 1) is the identity.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x4xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "transpose_transpose_fires_inverse"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %a = "graph.transpose"(%x) {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %b = "graph.transpose"(%a) {perm = array<i64: 2, 0, 1>} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  "func.return"(%b) : (tensor<2x3x4xf32>) -> ()
}) {sym_name = "transpose_transpose_fires_inverse", function_type = (tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>)} : () -> ()

// (1, 0, 2) then (0, 2, 1): result axis j is x's axis p[q[j]] = (1, 2, 0).
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.transpose"(%[[X]]) {perm = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "transpose_transpose_fires_compose"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %a = "graph.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %b = "graph.transpose"(%a) {perm = array<i64: 0, 2, 1>} : (tensor<3x2x4xf32>) -> tensor<3x4x2xf32>
  "func.return"(%b) : (tensor<3x4x2xf32>) -> ()
}) {sym_name = "transpose_transpose_fires_compose", function_type = (tensor<2x3x4xf32>) -> (tensor<3x4x2xf32>)} : () -> ()

// An elementwise op in between: not a transpose of a transpose.
// CHECK:      "graph.transpose"
// CHECK-NEXT: "graph.relu"
// CHECK-NEXT: "graph.transpose"
// CHECK:      sym_name = "transpose_transpose_stays_relu"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %r = "graph.relu"(%a) : (tensor<3x2xf32>) -> tensor<3x2xf32>
  %b = "graph.transpose"(%r) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  "func.return"(%b) : (tensor<2x3xf32>) -> ()
}) {sym_name = "transpose_transpose_stays_relu", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()
