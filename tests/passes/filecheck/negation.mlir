// RUN: tf-opt %s -p simplify | filecheck %s
// neg(neg(x)) -> x;  x - neg(y) -> x + y;  x * reciprocal(y) stays (1/y overflows for a denormal y).

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "neg_neg_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.neg"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = "graph.neg"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%b) : (tensor<2x3xf32>) -> ()
}) {sym_name = "neg_neg_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      "graph.abs"
// CHECK-NEXT: "graph.neg"
// CHECK:      sym_name = "neg_neg_stays_abs"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.abs"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = "graph.neg"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%b) : (tensor<2x3xf32>) -> ()
}) {sym_name = "neg_neg_stays_abs", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>, %[[Y:arg[0-9]+]]: tensor<3xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.add"(%[[X]], %[[Y]]) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "sub_neg_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>, %y: tensor<3xf32>):
  %n = "graph.neg"(%y) : (tensor<3xf32>) -> tensor<3xf32>
  %r = "graph.sub"(%x, %n) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "sub_neg_fires", function_type = (tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// The negation is on the left: -x - y is not x + y.
// CHECK:      "graph.neg"
// CHECK-NEXT: "graph.sub"
// CHECK:      sym_name = "sub_neg_stays_lhs"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>):
  %n = "graph.neg"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %r = "graph.sub"(%n, %y) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "sub_neg_stays_lhs", function_type = (tensor<2x3xf32>, tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>, %[[Y:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[Q:[0-9]+]] = "graph.reciprocal"(%[[Y]])
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.mul"(%[[X]], %[[Q]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "mul_reciprocal_stays"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %q = "graph.reciprocal"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.mul"(%x, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "mul_reciprocal_stays", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// rsqrt is not a reciprocal.
// CHECK:      "graph.rsqrt"
// CHECK-NEXT: "graph.mul"
// CHECK:      sym_name = "mul_reciprocal_stays_rsqrt"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %q = "graph.rsqrt"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.mul"(%x, %q) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "mul_reciprocal_stays_rsqrt", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<3x4xf32>, %[[Y:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[Q:[0-9]+]] = "graph.reciprocal"(%[[Y]])
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.mul"(%[[Q]], %[[X]]) : (tensor<4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "reciprocal_mul_stays"
"func.func"() ({
^bb0(%x: tensor<3x4xf32>, %y: tensor<4xf32>):
  %q = "graph.reciprocal"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.mul"(%q, %x) : (tensor<4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  "func.return"(%r) : (tensor<3x4xf32>) -> ()
}) {sym_name = "reciprocal_mul_stays", function_type = (tensor<3x4xf32>, tensor<4xf32>) -> (tensor<3x4xf32>)} : () -> ()

// reciprocal(y) / x is 1 / (x * y), not x / y.
// CHECK:      "graph.reciprocal"
// CHECK-NEXT: "graph.div"
// CHECK:      sym_name = "reciprocal_mul_stays_div"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %q = "graph.reciprocal"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.div"(%q, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "reciprocal_mul_stays_div", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()
