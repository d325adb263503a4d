// RUN: tf-opt %s -p fuse-reuse --no-numerics | filecheck %s
// Reuse (multi-output) fusion: one kernel, one pass over the data, several results.

"builtin.module"() ({
// A value needed inside and outside the group: exp is a function result and feeds the add; the
// merged kernel returns it as an extra output, and the add reads the buffer it just wrote
// (recomputing exp would cost more than the read).
// CHECK:      %[[K:[0-9]+]]:2 = "structured.kernel"(%arg0, %0)
// CHECK:        %[[E:[0-9]+]] = "structured.compute"
// CHECK:          "scalar.exp"
// CHECK:        %[[A:[0-9]+]] = "structured.compute"
// CHECK-NEXT:   ^bb0
// CHECK-NEXT:     "structured.read"(%[[E]]
// CHECK:        "structured.return"(%[[E]], %[[A]])
// CHECK-NEXT: }) {sym_name = "exp_add", tf.fusion = "elementwise"}
// CHECK-NEXT: "func.return"(%[[K]]#0, %[[K]]#1)
// CHECK-NEXT: sym_name = "extra_output"
"func.func"() ({
^bb0(%x: tensor<4x8xf32>):
  %one = "graph.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "graph.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "graph.add"(%0, %one) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  "func.return"(%0, %1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> ()
}) {sym_name = "extra_output", function_type = (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)} : () -> ()

// Two reductions of x over the same rows share one kernel; the column max reduces over another
// domain and stays apart.
// CHECK:      %[[R:[0-9]+]]:2 = "structured.kernel"(%arg0)
// CHECK:      sym_name = "reduce_mean_reduce_max", tf.fusion = "reduction"
// CHECK-NEXT: %[[C:[0-9]+]] = "structured.kernel"(%arg0)
// CHECK:      sym_name = "reduce_max", tf.fusion = "reduction"
// CHECK-NEXT: "func.return"(%[[R]]#0, %[[R]]#1, %[[C]])
// CHECK-NEXT: sym_name = "sibling_reductions"
"func.func"() ({
^bb0(%x: tensor<4x8xf32>):
  %0 = "graph.reduce_mean"(%x) {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  %1 = "graph.reduce_max"(%x) {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  %2 = "graph.reduce_max"(%x) {axes = array<i64: 0>} : (tensor<4x8xf32>) -> tensor<8xf32>
  "func.return"(%0, %1, %2) : (tensor<4xf32>, tensor<4xf32>, tensor<8xf32>) -> ()
}) {sym_name = "sibling_reductions", function_type = (tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<8xf32>)} : () -> ()

// Must not fuse (a cycle): exp feeds the add both directly and through cumsum, which fuses with
// nothing; exp + add as one kernel would have to run both before and after the cumsum.
// CHECK:      %[[E:[0-9]+]] = "structured.kernel"(%arg0)
// CHECK:      sym_name = "exp"
// CHECK-NEXT: %[[C:[0-9]+]] = "structured.kernel"(%[[E]])
// CHECK:      sym_name = "cumsum", tf.fusion = "opaque"
// CHECK-NEXT: %[[A:[0-9]+]] = "structured.kernel"(%[[E]], %[[C]])
// CHECK:      sym_name = "add"
// CHECK-NEXT: "func.return"(%[[A]])
// CHECK-NEXT: sym_name = "cycle"
"func.func"() ({
^bb0(%x: tensor<4x8xf32>):
  %0 = "graph.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "graph.cumsum"(%0) {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "graph.add"(%0, %1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  "func.return"(%2) : (tensor<4x8xf32>) -> ()
}) {sym_name = "cycle", function_type = (tensor<4x8xf32>) -> (tensor<4x8xf32>)} : () -> ()

// Inside one kernel: softmax sums exp(x - max) and then divides exp(x - max) again.  The sum's
// term is an exponential (worth a buffer) and the output evaluates the same expression: it is
// computed once (E) and read by both the sum and the output.
// CHECK:      ^bb0(%arg0: tensor<2x3x16xf32>):
// CHECK-NEXT:   %[[K:[0-9]+]] = "structured.kernel"(%arg0)
// CHECK:          %[[M:[0-9]+]] = "structured.compute"
// CHECK:          combiner = "max"
// CHECK-NEXT:     %[[E:[0-9]+]] = "structured.compute"
// CHECK:            "scalar.exp"
// CHECK-NEXT:       "structured.yield"
// CHECK-NEXT:     }) {domain = array<i64: 2, 3, 1, 16>, iterators = "pppp", combiner = "none"
// CHECK-NEXT:     %[[S:[0-9]+]] = "structured.compute"
// CHECK-NEXT:     ^bb0
// CHECK-NEXT:       "structured.read"(%[[E]]
// CHECK-NEXT:       "structured.yield"
// CHECK-NEXT:     }) {domain = array<i64: 2, 3, 1, 16>, iterators = "pppr", combiner = "add"
// CHECK-NEXT:     "structured.compute"
// CHECK-NOT:        "scalar.exp"
// CHECK:            "structured.read"(%[[E]]
// CHECK-NOT:        "scalar.exp"
// CHECK:            "scalar.div"
// CHECK:        sym_name = "softmax"
// CHECK-NEXT:   "func.return"(%[[K]])
// CHECK-NEXT: sym_name = "softmax_exp_reuse"
"func.func"() ({
^bb0(%x: tensor<2x3x16xf32>):
  %0 = "graph.softmax"(%x) {axis = -1 : i64} : (tensor<2x3x16xf32>) -> tensor<2x3x16xf32>
  "func.return"(%0) : (tensor<2x3x16xf32>) -> ()
}) {sym_name = "softmax_exp_reuse", function_type = (tensor<2x3x16xf32>) -> (tensor<2x3x16xf32>)} : () -> ()
}) : () -> ()
