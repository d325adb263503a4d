// RUN: tf-opt %s -p simplify | filecheck %s
// Additive and multiplicative identities: x+0, 0+x, x-0, x*1, 1*x, x/1, x**1 -> x.
// Each "_stays" case is a near miss, most often a constant that broadcasts x to a bigger
// shape: replacing the op by x would change the value's type, so the rule must not fire.

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "add_zero_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %r = "graph.add"(%x, %z) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "add_zero_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// A rank-0 zero broadcasts to x's shape: the type is kept, so it fires.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "add_zero_fires_scalar"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.add"(%x, %z) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "add_zero_fires_scalar", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      "graph.add"
// CHECK:      sym_name = "add_zero_stays_broadcast"
"func.func"() ({
^bb0(%x: tensor<3xf32>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %r = "graph.add"(%x, %z) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "add_zero_stays_broadcast", function_type = (tensor<3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      "graph.add"
// CHECK:      sym_name = "add_zero_stays_nonzero"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %z = "graph.constant"() {value = dense<[[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %r = "graph.add"(%x, %z) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "add_zero_stays_nonzero", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xi32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "zero_add_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xi32>):
  %z = "graph.constant"() {value = dense<0> : tensor<3xi32>} : () -> tensor<3xi32>
  %r = "graph.add"(%z, %x) : (tensor<3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  "func.return"(%r) : (tensor<2x3xi32>) -> ()
}) {sym_name = "zero_add_fires", function_type = (tensor<2x3xi32>) -> (tensor<2x3xi32>)} : () -> ()

// CHECK:      "graph.add"
// CHECK:      sym_name = "zero_add_stays_broadcast"
"func.func"() ({
^bb0(%x: tensor<1x3xi32>):
  %z = "graph.constant"() {value = dense<0> : tensor<4x1xi32>} : () -> tensor<4x1xi32>
  %r = "graph.add"(%z, %x) : (tensor<4x1xi32>, tensor<1x3xi32>) -> tensor<4x3xi32>
  "func.return"(%r) : (tensor<4x3xi32>) -> ()
}) {sym_name = "zero_add_stays_broadcast", function_type = (tensor<1x3xi32>) -> (tensor<4x3xi32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "sub_zero_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.sub"(%x, %z) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "sub_zero_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// 0 - x is a negation, not x.
// CHECK:      "graph.sub"
// CHECK:      sym_name = "sub_zero_stays_reversed"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.sub"(%z, %x) : (tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "sub_zero_stays_reversed", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "mul_one_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %o = "graph.constant"() {value = dense<1.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %r = "graph.mul"(%x, %o) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "mul_one_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      "graph.mul"
// CHECK:      sym_name = "mul_one_stays_broadcast"
"func.func"() ({
^bb0(%x: tensor<3xf32>):
  %o = "graph.constant"() {value = dense<1.0> : tensor<2x3xf32>} : () -> tensor<2x3xf32>
  %r = "graph.mul"(%x, %o) : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "mul_one_stays_broadcast", function_type = (tensor<3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xi64>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "one_mul_fires"
"func.func"() ({
^bb0(%x: tensor<4xi64>):
  %o = "graph.constant"() {value = dense<1> : tensor<4xi64>} : () -> tensor<4xi64>
  %r = "graph.mul"(%o, %x) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  "func.return"(%r) : (tensor<4xi64>) -> ()
}) {sym_name = "one_mul_fires", function_type = (tensor<4xi64>) -> (tensor<4xi64>)} : () -> ()

// CHECK:      "graph.mul"
// CHECK:      sym_name = "one_mul_stays_minus_one"
"func.func"() ({
^bb0(%x: tensor<4xi64>):
  %o = "graph.constant"() {value = dense<-1> : tensor<4xi64>} : () -> tensor<4xi64>
  %r = "graph.mul"(%o, %x) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  "func.return"(%r) : (tensor<4xi64>) -> ()
}) {sym_name = "one_mul_stays_minus_one", function_type = (tensor<4xi64>) -> (tensor<4xi64>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "div_one_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %o = "graph.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.div"(%x, %o) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "div_one_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// 1 / x is a reciprocal, not x.
// CHECK:      "graph.div"
// CHECK:      sym_name = "div_one_stays_reversed"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %o = "graph.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.div"(%o, %x) : (tensor<f32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "div_one_stays_reversed", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<5xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "pow_one_fires"
"func.func"() ({
^bb0(%x: tensor<5xf32>):
  %o = "graph.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.pow"(%x, %o) : (tensor<5xf32>, tensor<f32>) -> tensor<5xf32>
  "func.return"(%r) : (tensor<5xf32>) -> ()
}) {sym_name = "pow_one_fires", function_type = (tensor<5xf32>) -> (tensor<5xf32>)} : () -> ()

// CHECK:      "graph.pow"
// CHECK:      sym_name = "pow_one_stays_broadcast"
"func.func"() ({
^bb0(%x: tensor<5xf32>):
  %o = "graph.constant"() {value = dense<1.0> : tensor<2x5xf32>} : () -> tensor<2x5xf32>
  %r = "graph.pow"(%x, %o) : (tensor<5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
  "func.return"(%r) : (tensor<2x5xf32>) -> ()
}) {sym_name = "pow_one_stays_broadcast", function_type = (tensor<5xf32>) -> (tensor<2x5xf32>)} : () -> ()
