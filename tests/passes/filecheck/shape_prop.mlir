// RUN: tf-opt %s -p 'shape-prop' | filecheck %s
// Constant propagation through shape computations, splats and iota.

// The static dim of a partly symbolic shape is a constant: the attention scale 1/sqrt(d)
// computed from the key's shape folds although the batch is dynamic.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<?x64xf32, "N">):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<8.0> : tensor<f32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.div"(%[[X]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "partial_shape_fires"
"func.func"() ({
^bb0(%x: tensor<?x64xf32, "N">):
  %s = "graph.shape_of"(%x) : (tensor<?x64xf32, "N">) -> tensor<2xi64>
  %i = "graph.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
  %d = "graph.gather"(%s, %i) {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  %f = "graph.cast"(%d) {dtype = f32} : (tensor<i64>) -> tensor<f32>
  %q = "graph.sqrt"(%f) : (tensor<f32>) -> tensor<f32>
  %r = "graph.div"(%x, %q) : (tensor<?x64xf32, "N">, tensor<f32>) -> tensor<?x64xf32, "N">
  "func.return"(%r) : (tensor<?x64xf32, "N">) -> ()
}) {sym_name = "partial_shape_fires", function_type = (tensor<?x64xf32, "N">) -> (tensor<?x64xf32, "N">)} : () -> ()

// A target shape assembled from the static dims and constants: [8, 4, 16].
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<?x8x64xf32, "N">):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[8, 4, 16]> : tensor<3xi64>}
// CHECK-NEXT:   "func.return"(%[[C]])
// CHECK-NEXT: sym_name = "partial_shape_fires_concat"
"func.func"() ({
^bb0(%x: tensor<?x8x64xf32, "N">):
  %s = "graph.shape_of"(%x) : (tensor<?x8x64xf32, "N">) -> tensor<3xi64>
  %t = "graph.slice"(%s) {starts = array<i64: 1>, ends = array<i64: 2>, axes = array<i64: 0>, steps = array<i64: 1>} : (tensor<3xi64>) -> tensor<1xi64>
  %h = "graph.constant"() {value = dense<[4, 16]> : tensor<2xi64>} : () -> tensor<2xi64>
  %r = "graph.concat"(%t, %h) {axis = 0 : i64} : (tensor<1xi64>, tensor<2xi64>) -> tensor<3xi64>
  "func.return"(%r) : (tensor<3xi64>) -> ()
}) {sym_name = "partial_shape_fires_concat", function_type = (tensor<?x8x64xf32, "N">) -> (tensor<3xi64>)} : () -> ()

// The symbolic dim itself is known only at run time.
// CHECK:      "graph.shape_of"
// CHECK-NEXT: "graph.constant"
// CHECK-NEXT: "graph.gather"
// CHECK:      sym_name = "partial_shape_stays_symbolic"
"func.func"() ({
^bb0(%x: tensor<?x64xf32, "N">):
  %s = "graph.shape_of"(%x) : (tensor<?x64xf32, "N">) -> tensor<2xi64>
  %i = "graph.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %d = "graph.gather"(%s, %i) {axis = 0 : i64} : (tensor<2xi64>, tensor<i64>) -> tensor<i64>
  "func.return"(%d) : (tensor<i64>) -> ()
}) {sym_name = "partial_shape_stays_symbolic", function_type = (tensor<?x64xf32, "N">) -> (tensor<i64>)} : () -> ()

// ONNX ConstantOfShape: a broadcast splat above the fold limit (90000 elements) is stored as
// one element.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<300x300xf32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<0.5> : tensor<300x300xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.mul"(%[[X]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "splat_broadcast_fires"
"func.func"() ({
^bb0(%x: tensor<300x300xf32>):
  %c = "graph.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
  %e = "graph.expand"(%c) {shape = array<i64: 300, 300>} : (tensor<f32>) -> tensor<300x300xf32>
  %r = "graph.mul"(%x, %e) : (tensor<300x300xf32>, tensor<300x300xf32>) -> tensor<300x300xf32>
  "func.return"(%r) : (tensor<300x300xf32>) -> ()
}) {sym_name = "splat_broadcast_fires", function_type = (tensor<300x300xf32>) -> (tensor<300x300xf32>)} : () -> ()

// An elementwise op of splats is a splat.
// CHECK:      %[[C:[0-9]+]] = "graph.constant"() {value = dense<1.5> : tensor<300x300xf32>}
// CHECK-NEXT: "func.return"(%[[C]])
// CHECK-NEXT: sym_name = "splat_broadcast_fires_elementwise"
"func.func"() ({
  %a = "graph.constant"() {value = dense<0.5> : tensor<300x300xf32>} : () -> tensor<300x300xf32>
  %b = "graph.constant"() {value = dense<1.0> : tensor<300xf32>} : () -> tensor<300xf32>
  %r = "graph.add"(%a, %b) : (tensor<300x300xf32>, tensor<300xf32>) -> tensor<300x300xf32>
  "func.return"(%r) : (tensor<300x300xf32>) -> ()
}) {sym_name = "splat_broadcast_fires_elementwise", function_type = () -> (tensor<300x300xf32>)} : () -> ()

// Broadcasting values that differ would store 90000 of them: left for run time.
// CHECK:      "graph.expand"
// CHECK:      sym_name = "splat_broadcast_stays_not_splat"
"func.func"() ({
  %c = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %e = "graph.expand"(%c) {shape = array<i64: 30000, 3>} : (tensor<3xf32>) -> tensor<30000x3xf32>
  "func.return"(%e) : (tensor<30000x3xf32>) -> ()
}) {sym_name = "splat_broadcast_stays_not_splat", function_type = () -> (tensor<30000x3xf32>)} : () -> ()

// GPT-2's positions: iota feeding an embedding of a constant table folds to the rows.
// CHECK:      %[[C:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>}
// CHECK-NEXT: "func.return"(%[[C]])
// CHECK-NEXT: sym_name = "iota_into_users_fires"
"func.func"() ({
  %t = "graph.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]> : tensor<4x2xf32>} : () -> tensor<4x2xf32>
  %i = "graph.iota"() {size = 3 : i64, start = 0.0 : f64, step = 1.0 : f64, dtype = i64} : () -> tensor<3xi64>
  %r = "graph.embedding"(%t, %i) : (tensor<4x2xf32>, tensor<3xi64>) -> tensor<3x2xf32>
  "func.return"(%r) : (tensor<3x2xf32>) -> ()
}) {sym_name = "iota_into_users_fires", function_type = () -> (tensor<3x2xf32>)} : () -> ()

// A user that also reads a run-time value cannot fold: the iota stays compact.
// CHECK:      "graph.iota"
// CHECK-NEXT: "graph.add"
// CHECK:      sym_name = "iota_into_users_stays_runtime_user"
"func.func"() ({
^bb0(%x: tensor<3xi64>):
  %i = "graph.iota"() {size = 3 : i64, start = 0.0 : f64, step = 1.0 : f64, dtype = i64} : () -> tensor<3xi64>
  %r = "graph.add"(%x, %i) : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  "func.return"(%r) : (tensor<3xi64>) -> ()
}) {sym_name = "iota_into_users_stays_runtime_user", function_type = (tensor<3xi64>) -> (tensor<3xi64>)} : () -> ()
