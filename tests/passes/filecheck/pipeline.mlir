// RUN: tf-opt %s -p 'cse,simplify,dce' | filecheck %s
// Passes working together: CSE makes the two transposes one value, so the double transpose
// and the x - neg(y) become visible to simplify; folding and DCE clean up what is left.

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>, %[[Y:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   %[[A:[0-9]+]] = "graph.add"(%[[X]], %[[Y]])
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<3.0> : tensor<2x3xf32>}
// CHECK-NEXT:   %[[M:[0-9]+]] = "graph.mul"(%[[A]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[M]])
"func.func"() ({
^bb0(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>):
  %t1 = "graph.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %t2 = "graph.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %u = "graph.transpose"(%t2) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %n = "graph.neg"(%y) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %s = "graph.sub"(%u, %n) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %one = "graph.constant"() {value = dense<1.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %two = "graph.constant"() {value = dense<2.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %three = "graph.add"(%one, %two) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %m = "graph.mul"(%s, %three) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%m) : (tensor<2x3xf32>) -> ()
}) {sym_name = "main", function_type = (tensor<2x3xf32>, tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()
