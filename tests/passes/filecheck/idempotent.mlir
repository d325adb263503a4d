// RUN: tf-opt %s -p simplify | filecheck %s
// identity(x), max(x, x), min(x, x), select(c, x, x) -> x when the type is kept.

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "identity_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.identity"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = "graph.identity"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%b) : (tensor<2x3xf32>) -> ()
}) {sym_name = "identity_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      "graph.relu"
// CHECK:      sym_name = "identity_stays_relu"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%a) : (tensor<2x3xf32>) -> ()
}) {sym_name = "identity_stays_relu", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<6xi32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "max_self_fires"
"func.func"() ({
^bb0(%x: tensor<6xi32>):
  %a = "graph.max"(%x, %x) : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi32>
  "func.return"(%a) : (tensor<6xi32>) -> ()
}) {sym_name = "max_self_fires", function_type = (tensor<6xi32>) -> (tensor<6xi32>)} : () -> ()

// CHECK:      "graph.max"(%arg0, %arg1)
// CHECK:      sym_name = "max_self_stays_different"
"func.func"() ({
^bb0(%x: tensor<6xi32>, %y: tensor<6xi32>):
  %a = "graph.max"(%x, %y) : (tensor<6xi32>, tensor<6xi32>) -> tensor<6xi32>
  "func.return"(%a) : (tensor<6xi32>) -> ()
}) {sym_name = "max_self_stays_different", function_type = (tensor<6xi32>, tensor<6xi32>) -> (tensor<6xi32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<6xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "min_self_fires"
"func.func"() ({
^bb0(%x: tensor<6xf32>):
  %a = "graph.min"(%x, %x) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  "func.return"(%a) : (tensor<6xf32>) -> ()
}) {sym_name = "min_self_fires", function_type = (tensor<6xf32>) -> (tensor<6xf32>)} : () -> ()

// CHECK:      "graph.min"(%arg0, %arg1)
// CHECK:      sym_name = "min_self_stays_different"
"func.func"() ({
^bb0(%x: tensor<6xf32>, %y: tensor<6xf32>):
  %a = "graph.min"(%x, %y) : (tensor<6xf32>, tensor<6xf32>) -> tensor<6xf32>
  "func.return"(%a) : (tensor<6xf32>) -> ()
}) {sym_name = "min_self_stays_different", function_type = (tensor<6xf32>, tensor<6xf32>) -> (tensor<6xf32>)} : () -> ()

// CHECK:      ^bb0(%{{arg[0-9]+}}: tensor<2x3xi1>, %[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "select_same_fires"
"func.func"() ({
^bb0(%c: tensor<2x3xi1>, %x: tensor<2x3xf32>):
  %a = "graph.select"(%c, %x, %x) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%a) : (tensor<2x3xf32>) -> ()
}) {sym_name = "select_same_fires", function_type = (tensor<2x3xi1>, tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// The condition broadcasts x to 2x3: the select is a broadcast, not x.
// CHECK:      "graph.select"(%arg0, %arg1, %arg1)
// CHECK:      sym_name = "select_same_stays_broadcast"
"func.func"() ({
^bb0(%c: tensor<2x3xi1>, %x: tensor<3xf32>):
  %a = "graph.select"(%c, %x, %x) : (tensor<2x3xi1>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  "func.return"(%a) : (tensor<2x3xf32>) -> ()
}) {sym_name = "select_same_stays_broadcast", function_type = (tensor<2x3xi1>, tensor<3xf32>) -> (tensor<2x3xf32>)} : () -> ()
