// RUN: tf-opt %s -p fold | filecheck %s
// RUN: tf-opt %s -p 'fold{limit=4}' | filecheck %s --check-prefix=LIMIT
// Constant folding through the ops' fold hooks: ops whose operands are constants become
// constants; the inputs die with them.  With a limit, a folded result above it that would
// be bigger than its inputs (a broadcast) is left for run time.

// CHECK:      %[[C:[0-9]+]] = "graph.constant"() {value = dense<[-4.0, -6.0, -8.0]> : tensor<3xf32>}
// CHECK-NEXT: "func.return"(%[[C]])
// CHECK-NEXT: sym_name = "chain"
"func.func"() ({
  %a = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %b = "graph.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %c = "graph.add"(%a, %b) : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  %d = "graph.mul"(%c, %c) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %e = "graph.sub"(%d, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %f = "graph.neg"(%c) : (tensor<3xf32>) -> tensor<3xf32>
  %g = "graph.add"(%f, %f) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  "func.return"(%g) : (tensor<3xf32>) -> ()
}) {sym_name = "chain", function_type = () -> (tensor<3xf32>)} : () -> ()

// Only the constant half folds; the op on the argument stays.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<3xf32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[2.0, 4.0, 6.0]> : tensor<3xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.mul"(%[[X]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "partial"
"func.func"() ({
^bb0(%x: tensor<3xf32>):
  %a = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %c = "graph.add"(%a, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %d = "graph.mul"(%x, %c) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  "func.return"(%d) : (tensor<3xf32>) -> ()
}) {sym_name = "partial", function_type = (tensor<3xf32>) -> (tensor<3xf32>)} : () -> ()

// shape_of of a static type folds although its operand is not a constant.
// CHECK:      %[[C:[0-9]+]] = "graph.constant"() {value = dense<[2, 5]> : tensor<2xi64>}
// CHECK-NEXT: "func.return"(%[[C]])
// CHECK-NEXT: sym_name = "shape_of"
"func.func"() ({
^bb0(%x: tensor<2x5xf32>):
  %s = "graph.shape_of"(%x) : (tensor<2x5xf32>) -> tensor<2xi64>
  "func.return"(%s) : (tensor<2xi64>) -> ()
}) {sym_name = "shape_of", function_type = (tensor<2x5xf32>) -> (tensor<2xi64>)} : () -> ()

// 6 elements from a 3-element and a scalar input: folds by default, stays under limit=4.
// CHECK:      %[[C:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}2.0, 3.0, 4.0], [2.0, 3.0, 4.0]]> : tensor<2x3xf32>}
// CHECK-NEXT: "func.return"(%[[C]])
// CHECK-NEXT: sym_name = "broadcast"
// LIMIT:      "graph.expand"
// LIMIT:      sym_name = "broadcast"
"func.func"() ({
  %a = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %b = "graph.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %c = "graph.add"(%a, %b) : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  %e = "graph.expand"(%c) {shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
  "func.return"(%e) : (tensor<2x3xf32>) -> ()
}) {sym_name = "broadcast", function_type = () -> (tensor<2x3xf32>)} : () -> ()

// 6 elements from two 6-element inputs: not bigger than its inputs, so it folds under the limit too.
// LIMIT:      %[[C:[0-9]+]] = "graph.constant"() {value = dense<3> : tensor<2x3xi32>}
// LIMIT-NEXT: "func.return"(%[[C]])
// LIMIT-NEXT: sym_name = "same_size"
"func.func"() ({
  %a = "graph.constant"() {value = dense<1> : tensor<2x3xi32>} : () -> tensor<2x3xi32>
  %b = "graph.constant"() {value = dense<2> : tensor<2x3xi32>} : () -> tensor<2x3xi32>
  %c = "graph.add"(%a, %b) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  "func.return"(%c) : (tensor<2x3xi32>) -> ()
}) {sym_name = "same_size", function_type = () -> (tensor<2x3xi32>)} : () -> ()
