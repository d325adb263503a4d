// RUN: tf-opt %s -p simplify | filecheck %s
// x*0, 0*x and x-x become a zero constant of the op's type, for integers only: in IEEE
// floats NaN*0, inf*0 and inf-inf are NaN, so the float versions must stay.

// CHECK:      %[[Z:[0-9]+]] = "graph.constant"() {value = dense<0> : tensor<2x3xi32>}
// CHECK-NEXT: "func.return"(%[[Z]])
// CHECK-NEXT: sym_name = "mul_zero_int_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xi32>):
  %z = "graph.constant"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
  %r = "graph.mul"(%x, %z) : (tensor<2x3xi32>, tensor<i32>) -> tensor<2x3xi32>
  "func.return"(%r) : (tensor<2x3xi32>) -> ()
}) {sym_name = "mul_zero_int_fires", function_type = (tensor<2x3xi32>) -> (tensor<2x3xi32>)} : () -> ()

// The zero broadcasts x: the result is still a zero constant, of the broadcast type.
// CHECK:      %[[Z:[0-9]+]] = "graph.constant"() {value = dense<0> : tensor<4x3xi64>}
// CHECK-NEXT: "func.return"(%[[Z]])
// CHECK-NEXT: sym_name = "mul_zero_int_fires_broadcast"
"func.func"() ({
^bb0(%x: tensor<3xi64>):
  %z = "graph.constant"() {value = dense<0> : tensor<4x1xi64>} : () -> tensor<4x1xi64>
  %r = "graph.mul"(%x, %z) : (tensor<3xi64>, tensor<4x1xi64>) -> tensor<4x3xi64>
  "func.return"(%r) : (tensor<4x3xi64>) -> ()
}) {sym_name = "mul_zero_int_fires_broadcast", function_type = (tensor<3xi64>) -> (tensor<4x3xi64>)} : () -> ()

// CHECK:      "graph.mul"
// CHECK:      sym_name = "mul_zero_int_stays_float"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %r = "graph.mul"(%x, %z) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "mul_zero_int_stays_float", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      %[[Z:[0-9]+]] = "graph.constant"() {value = dense<0> : tensor<5xi8>}
// CHECK-NEXT: "func.return"(%[[Z]])
// CHECK-NEXT: sym_name = "zero_mul_int_fires"
"func.func"() ({
^bb0(%x: tensor<5xi8>):
  %z = "graph.constant"() {value = dense<0> : tensor<5xi8>} : () -> tensor<5xi8>
  %r = "graph.mul"(%z, %x) : (tensor<5xi8>, tensor<5xi8>) -> tensor<5xi8>
  "func.return"(%r) : (tensor<5xi8>) -> ()
}) {sym_name = "zero_mul_int_fires", function_type = (tensor<5xi8>) -> (tensor<5xi8>)} : () -> ()

// CHECK:      "graph.mul"
// CHECK:      sym_name = "zero_mul_int_stays_float"
"func.func"() ({
^bb0(%x: tensor<5xf64>):
  %z = "graph.constant"() {value = dense<0.0> : tensor<5xf64>} : () -> tensor<5xf64>
  %r = "graph.mul"(%z, %x) : (tensor<5xf64>, tensor<5xf64>) -> tensor<5xf64>
  "func.return"(%r) : (tensor<5xf64>) -> ()
}) {sym_name = "zero_mul_int_stays_float", function_type = (tensor<5xf64>) -> (tensor<5xf64>)} : () -> ()

// CHECK:      %[[Z:[0-9]+]] = "graph.constant"() {value = dense<0> : tensor<2x2xi32>}
// CHECK-NEXT: "func.return"(%[[Z]])
// CHECK-NEXT: sym_name = "sub_self_int_fires"
"func.func"() ({
^bb0(%x: tensor<2x2xi32>):
  %r = "graph.sub"(%x, %x) : (tensor<2x2xi32>, tensor<2x2xi32>) -> tensor<2x2xi32>
  "func.return"(%r) : (tensor<2x2xi32>) -> ()
}) {sym_name = "sub_self_int_fires", function_type = (tensor<2x2xi32>) -> (tensor<2x2xi32>)} : () -> ()

// CHECK:      "graph.sub"(%arg0, %arg0)
// CHECK:      sym_name = "sub_self_int_stays_float"
"func.func"() ({
^bb0(%x: tensor<2x2xf32>):
  %r = "graph.sub"(%x, %x) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  "func.return"(%r) : (tensor<2x2xf32>) -> ()
}) {sym_name = "sub_self_int_stays_float", function_type = (tensor<2x2xf32>) -> (tensor<2x2xf32>)} : () -> ()

// CHECK:      "graph.sub"(%arg0, %arg1)
// CHECK:      sym_name = "sub_self_int_stays_different"
"func.func"() ({
^bb0(%x: tensor<2x2xi32>, %y: tensor<2x2xi32>):
  %r = "graph.sub"(%x, %y) : (tensor<2x2xi32>, tensor<2x2xi32>) -> tensor<2x2xi32>
  "func.return"(%r) : (tensor<2x2xi32>) -> ()
}) {sym_name = "sub_self_int_stays_different", function_type = (tensor<2x2xi32>, tensor<2x2xi32>) -> (tensor<2x2xi32>)} : () -> ()
