// RUN: tf-opt %s -p simplify | filecheck %s
// Reshape-like ops never reorder elements, so a chain of them is x whenever the types agree:
// reshape(x, shape(x)) -> x;  reshape(reshape(x)) -> one reshape;  squeeze(unsqueeze(x)) and
// unsqueeze(squeeze(x)) -> x when the type is x's;  concat of one input -> x.

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "reshape_noop_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.reshape"(%x) {shape = array<i64: 2, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%a) : (tensor<2x3xf32>) -> ()
}) {sym_name = "reshape_noop_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      "graph.reshape"(%arg0) {shape = array<i64: 3, 2>}
// CHECK:      sym_name = "reshape_noop_stays"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.reshape"(%x) {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  "func.return"(%a) : (tensor<3x2xf32>) -> ()
}) {sym_name = "reshape_noop_stays", function_type = (tensor<2x3xf32>) -> (tensor<3x2xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.reshape"(%[[X]]) {shape = array<i64: 4, 6>} : (tensor<2x3x4xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "reshape_reshape_fires"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %a = "graph.reshape"(%x) {shape = array<i64: 24>} : (tensor<2x3x4xf32>) -> tensor<24xf32>
  %b = "graph.reshape"(%a) {shape = array<i64: 4, 6>} : (tensor<24xf32>) -> tensor<4x6xf32>
  "func.return"(%b) : (tensor<4x6xf32>) -> ()
}) {sym_name = "reshape_reshape_fires", function_type = (tensor<2x3x4xf32>) -> (tensor<4x6xf32>)} : () -> ()

// A transpose in between reorders elements.
// CHECK:      "graph.reshape"
// CHECK-NEXT: "graph.transpose"
// CHECK-NEXT: "graph.reshape"
// CHECK:      sym_name = "reshape_reshape_stays_transpose"
"func.func"() ({
^bb0(%x: tensor<2x6xf32>):
  %a = "graph.reshape"(%x) {shape = array<i64: 3, 4>} : (tensor<2x6xf32>) -> tensor<3x4xf32>
  %t = "graph.transpose"(%a) {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %b = "graph.reshape"(%t) {shape = array<i64: 2, 6>} : (tensor<4x3xf32>) -> tensor<2x6xf32>
  "func.return"(%b) : (tensor<2x6xf32>) -> ()
}) {sym_name = "reshape_reshape_stays_transpose", function_type = (tensor<2x6xf32>) -> (tensor<2x6xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "squeeze_unsqueeze_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.unsqueeze"(%x) {axes = array<i64: 0, 2>} : (tensor<2x3xf32>) -> tensor<1x2x1x3xf32>
  %b = "graph.squeeze"(%a) {axes = array<i64: -2, 0>} : (tensor<1x2x1x3xf32>) -> tensor<2x3xf32>
  "func.return"(%b) : (tensor<2x3xf32>) -> ()
}) {sym_name = "squeeze_unsqueeze_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// 1x3 -> 1x3x1 -> 3x1: a different type, so the pair stays.
// CHECK:      "graph.unsqueeze"
// CHECK-NEXT: "graph.squeeze"
// CHECK:      sym_name = "squeeze_unsqueeze_stays"
"func.func"() ({
^bb0(%x: tensor<1x3xf32>):
  %a = "graph.unsqueeze"(%x) {axes = array<i64: 2>} : (tensor<1x3xf32>) -> tensor<1x3x1xf32>
  %b = "graph.squeeze"(%a) {axes = array<i64: 0>} : (tensor<1x3x1xf32>) -> tensor<3x1xf32>
  "func.return"(%b) : (tensor<3x1xf32>) -> ()
}) {sym_name = "squeeze_unsqueeze_stays", function_type = (tensor<1x3xf32>) -> (tensor<3x1xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "unsqueeze_squeeze_fires"
"func.func"() ({
^bb0(%x: tensor<1x3xf32>):
  %a = "graph.squeeze"(%x) {axes = array<i64: 0>} : (tensor<1x3xf32>) -> tensor<3xf32>
  %b = "graph.unsqueeze"(%a) {axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<1x3xf32>
  "func.return"(%b) : (tensor<1x3xf32>) -> ()
}) {sym_name = "unsqueeze_squeeze_fires", function_type = (tensor<1x3xf32>) -> (tensor<1x3xf32>)} : () -> ()

// CHECK:      "graph.squeeze"
// CHECK-NEXT: "graph.unsqueeze"
// CHECK:      sym_name = "unsqueeze_squeeze_stays"
"func.func"() ({
^bb0(%x: tensor<1x3xf32>):
  %a = "graph.squeeze"(%x) {axes = array<i64: 0>} : (tensor<1x3xf32>) -> tensor<3xf32>
  %b = "graph.unsqueeze"(%a) {axes = array<i64: 1>} : (tensor<3xf32>) -> tensor<3x1xf32>
  "func.return"(%b) : (tensor<3x1xf32>) -> ()
}) {sym_name = "unsqueeze_squeeze_stays", function_type = (tensor<1x3xf32>) -> (tensor<3x1xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "concat_single_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.concat"(%x) {axis = 1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%a) : (tensor<2x3xf32>) -> ()
}) {sym_name = "concat_single_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      "graph.concat"(%arg0, %arg0)
// CHECK:      sym_name = "concat_single_stays_two"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.concat"(%x, %x) {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  "func.return"(%a) : (tensor<2x6xf32>) -> ()
}) {sym_name = "concat_single_stays_two", function_type = (tensor<2x3xf32>) -> (tensor<2x6xf32>)} : () -> ()
