// RUN: tf-opt %s -p dce | filecheck %s
// Pure ops whose values nobody uses go, whole dead chains in one pass; live ops and the
// function's arguments stay.

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>, %{{arg[0-9]+}}: tensor<4xf32>):
// CHECK-NEXT:   %[[E:[0-9]+]] = "graph.exp"(%[[X]])
// CHECK-NEXT:   "func.return"(%[[E]])
// CHECK-NEXT: sym_name = "dead_chain"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %unused: tensor<4xf32>):
  %c = "graph.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %a = "graph.mul"(%x, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %b = "graph.tanh"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %d = "graph.add"(%b, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %e = "graph.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%e) : (tensor<4xf32>) -> ()
}) {sym_name = "dead_chain", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// Everything is used: nothing changes.
// CHECK:      "graph.constant"
// CHECK-NEXT: "graph.mul"
// CHECK-NEXT: "graph.add"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "all_live"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %c = "graph.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %a = "graph.mul"(%x, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %d = "graph.add"(%a, %c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%d) : (tensor<4xf32>) -> ()
}) {sym_name = "all_live", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()
