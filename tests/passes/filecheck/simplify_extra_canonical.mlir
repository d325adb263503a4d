// RUN: tf-opt %s -p 'simplify-extra{fold=false}' | filecheck %s
// Canonical forms of simplify-extra: constants on the right of add/mul, x - c as x + (-c),
// x / splat as x * (1/splat), reshapes that only add or drop unit dims as (un)squeeze.
// Folding is off so that the constants the rules make stay visible.

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.add"(%[[X]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "const_rhs_add_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %c = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %r = "graph.add"(%c, %x) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "const_rhs_add_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// Two constants: nothing to canonicalise (folding would do it).
// CHECK:      "graph.add"(%{{[0-9]+}}, %{{[0-9]+}})
// CHECK:      sym_name = "const_rhs_add_stays_both_constant"
"func.func"() ({
  %a = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %b = "graph.constant"() {value = dense<[3.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %r = "graph.add"(%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  "func.return"(%r) : (tensor<2xf32>) -> ()
}) {sym_name = "const_rhs_add_stays_both_constant", function_type = () -> (tensor<2xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<3.0> : tensor<f32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.mul"(%[[X]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "const_rhs_mul_fires"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %c = "graph.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.mul"(%c, %x) : (tensor<f32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "const_rhs_mul_fires", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// Already canonical.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"
// CHECK-NEXT:   "graph.mul"(%[[X]], %[[C]])
// CHECK:      sym_name = "const_rhs_mul_stays_canonical"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %c = "graph.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.mul"(%x, %c) : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "const_rhs_mul_stays_canonical", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// x - c -> x + neg(c); the neg of a constant folds in the full pass.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<3xi32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[1, -2, 3]> : tensor<3xi32>}
// CHECK-NEXT:   %[[N:[0-9]+]] = "graph.neg"(%[[C]])
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.add"(%[[X]], %[[N]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "sub_const_fires"
"func.func"() ({
^bb0(%x: tensor<3xi32>):
  %c = "graph.constant"() {value = dense<[1, -2, 3]> : tensor<3xi32>} : () -> tensor<3xi32>
  %r = "graph.sub"(%x, %c) : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  "func.return"(%r) : (tensor<3xi32>) -> ()
}) {sym_name = "sub_const_fires", function_type = (tensor<3xi32>) -> (tensor<3xi32>)} : () -> ()

// The constant is on the left: c - x is not an add of a constant.
// CHECK:      "graph.sub"(%{{[0-9]+}}, %arg0)
// CHECK:      sym_name = "sub_const_stays_lhs"
"func.func"() ({
^bb0(%x: tensor<3xf32>):
  %c = "graph.constant"() {value = dense<1.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %r = "graph.sub"(%c, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  "func.return"(%r) : (tensor<3xf32>) -> ()
}) {sym_name = "sub_const_stays_lhs", function_type = (tensor<3xf32>) -> (tensor<3xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<0.125> : tensor<f32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.mul"(%[[X]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "div_splat_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %c = "graph.constant"() {value = dense<8.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.div"(%x, %c) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "div_splat_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// Integer division truncates: no reciprocal.
// CHECK:      "graph.div"
// CHECK:      sym_name = "div_splat_stays_int"
"func.func"() ({
^bb0(%x: tensor<2x3xi32>):
  %c = "graph.constant"() {value = dense<4> : tensor<i32>} : () -> tensor<i32>
  %r = "graph.div"(%x, %c) : (tensor<2x3xi32>, tensor<i32>) -> tensor<2x3xi32>
  "func.return"(%r) : (tensor<2x3xi32>) -> ()
}) {sym_name = "div_splat_stays_int", function_type = (tensor<2x3xi32>) -> (tensor<2x3xi32>)} : () -> ()

// A divisor that is not a splat.
// CHECK:      "graph.div"
// CHECK:      sym_name = "div_splat_stays_not_splat"
"func.func"() ({
^bb0(%x: tensor<2x2xf32>):
  %c = "graph.constant"() {value = dense<[2.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %r = "graph.div"(%x, %c) : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  "func.return"(%r) : (tensor<2x2xf32>) -> ()
}) {sym_name = "div_splat_stays_not_splat", function_type = (tensor<2x2xf32>) -> (tensor<2x2xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<32x128xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.unsqueeze"(%[[X]]) {axes = array<i64: 0>} : (tensor<32x128xf32>) -> tensor<1x32x128xf32>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "reshape_as_unsqueeze_fires"
"func.func"() ({
^bb0(%x: tensor<32x128xf32>):
  %r = "graph.reshape"(%x) {shape = array<i64: 1, 32, 128>} : (tensor<32x128xf32>) -> tensor<1x32x128xf32>
  "func.return"(%r) : (tensor<1x32x128xf32>) -> ()
}) {sym_name = "reshape_as_unsqueeze_fires", function_type = (tensor<32x128xf32>) -> (tensor<1x32x128xf32>)} : () -> ()

// Dims are regrouped, not only unit dims added.
// CHECK:      "graph.reshape"
// CHECK:      sym_name = "reshape_as_unsqueeze_stays_regroup"
"func.func"() ({
^bb0(%x: tensor<4x6xf32>):
  %r = "graph.reshape"(%x) {shape = array<i64: 1, 2, 12>} : (tensor<4x6xf32>) -> tensor<1x2x12xf32>
  "func.return"(%r) : (tensor<1x2x12xf32>) -> ()
}) {sym_name = "reshape_as_unsqueeze_stays_regroup", function_type = (tensor<4x6xf32>) -> (tensor<1x2x12xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x32x1x8xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.squeeze"(%[[X]]) {axes = array<i64: 0, 2>} : (tensor<1x32x1x8xf32>) -> tensor<32x8xf32>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "reshape_as_squeeze_fires"
"func.func"() ({
^bb0(%x: tensor<1x32x1x8xf32>):
  %r = "graph.reshape"(%x) {shape = array<i64: 32, 8>} : (tensor<1x32x1x8xf32>) -> tensor<32x8xf32>
  "func.return"(%r) : (tensor<32x8xf32>) -> ()
}) {sym_name = "reshape_as_squeeze_fires", function_type = (tensor<1x32x1x8xf32>) -> (tensor<32x8xf32>)} : () -> ()

// CHECK:      "graph.reshape"
// CHECK:      sym_name = "reshape_as_squeeze_stays_merge"
"func.func"() ({
^bb0(%x: tensor<1x4x8xf32>):
  %r = "graph.reshape"(%x) {shape = array<i64: 32>} : (tensor<1x4x8xf32>) -> tensor<32xf32>
  "func.return"(%r) : (tensor<32xf32>) -> ()
}) {sym_name = "reshape_as_squeeze_stays_merge", function_type = (tensor<1x4x8xf32>) -> (tensor<32xf32>)} : () -> ()
