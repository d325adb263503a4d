// RUN: tf-opt %s -p cse | filecheck %s
// Pure ops with equal name, operands, attributes and types merge into the first one;
// commutative operands in either order count as equal; constants merge by content.

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>, %[[Y:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[A:[0-9]+]] = "graph.add"(%[[X]], %[[Y]])
// CHECK-NEXT:   %[[M:[0-9]+]] = "graph.mul"(%[[A]], %[[A]])
// CHECK-NEXT:   %[[S:[0-9]+]] = "graph.sub"(%[[X]], %[[Y]])
// CHECK-NEXT:   %[[T:[0-9]+]] = "graph.sub"(%[[Y]], %[[X]])
// CHECK-NEXT:   "func.return"(%[[M]], %[[M]], %[[S]], %[[T]])
// CHECK-NEXT: sym_name = "merge"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %a = "graph.add"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %b = "graph.add"(%y, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = "graph.mul"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %d = "graph.mul"(%b, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %s = "graph.sub"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %t = "graph.sub"(%y, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%c, %d, %s, %t) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> ()
}) {sym_name = "merge", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)} : () -> ()

// Equal constants merge; a constant with other values, and a transpose with another perm, do not.
// CHECK:      %[[C:[0-9]+]] = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>}
// CHECK-NEXT: %[[D:[0-9]+]] = "graph.constant"() {value = dense<[1.0, 3.0]> : tensor<2xf32>}
// CHECK-NEXT: %[[T1:[0-9]+]] = "graph.transpose"(%arg0) {perm = array<i64: 1, 0>}
// CHECK-NEXT: %[[T2:[0-9]+]] = "graph.transpose"(%arg0) {perm = array<i64: 0, 1>}
// CHECK-NEXT: "func.return"(%[[C]], %[[C]], %[[D]], %[[T1]], %[[T1]], %[[T2]])
// CHECK-NEXT: sym_name = "constants_and_attributes"
"func.func"() ({
^bb0(%x: tensor<2x2xf32>):
  %c1 = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %c2 = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %c3 = "graph.constant"() {value = dense<[1.0, 3.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %t1 = "graph.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %t2 = "graph.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %t3 = "graph.transpose"(%x) {perm = array<i64: 0, 1>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  "func.return"(%c1, %c2, %c3, %t1, %t2, %t3) : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) -> ()
}) {sym_name = "constants_and_attributes", function_type = (tensor<2x2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>)} : () -> ()

// Each function has its own scope: the constant here is not replaced by the one above.
// CHECK:      %[[C:[0-9]+]] = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>}
// CHECK-NEXT: "func.return"(%[[C]])
// CHECK-NEXT: sym_name = "own_scope"
"func.func"() ({
  %c1 = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  "func.return"(%c1) : (tensor<2xf32>) -> ()
}) {sym_name = "own_scope", function_type = () -> (tensor<2xf32>)} : () -> ()
