// RUN: tf-opt %s -p fuse-category --no-numerics | filecheck %s
// Category fusion: runs of cheap kernels of one kind, adjacent in program order, become one.

"builtin.module"() ({
// Three small, unrelated elementwise ops: one kernel with three results.
// CHECK:      %[[K:[0-9]+]]:3 = "structured.kernel"(%arg0, %arg1, %arg2)
// CHECK:      sym_name = "exp_neg_abs", tf.fusion = "elementwise"
// CHECK-NEXT: "func.return"(%[[K]]#0, %[[K]]#1, %[[K]]#2)
// CHECK-NEXT: sym_name = "small_run"
"func.func"() ({
^bb0(%x: tensor<8xf32>, %y: tensor<4x4xf32>, %z: tensor<16xf32>):
  %0 = "graph.exp"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %1 = "graph.neg"(%y) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = "graph.abs"(%z) : (tensor<16xf32>) -> tensor<16xf32>
  "func.return"(%0, %1, %2) : (tensor<8xf32>, tensor<4x4xf32>, tensor<16xf32>) -> ()
}) {sym_name = "small_run", function_type = (tensor<8xf32>, tensor<4x4xf32>, tensor<16xf32>) -> (tensor<8xf32>, tensor<4x4xf32>, tensor<16xf32>)} : () -> ()

// Must not fuse: a large result (128 KiB) is not cheap and breaks the run, so does a kernel of
// another kind (the reduction); nothing is left adjacent.
// CHECK:      sym_name = "exp"
// CHECK-NEXT: "structured.kernel"(%arg1)
// CHECK:      sym_name = "neg"
// CHECK-NEXT: "structured.kernel"(%arg2)
// CHECK:      sym_name = "abs"
// CHECK-NEXT: "structured.kernel"(%arg2)
// CHECK:      sym_name = "reduce_sum"
// CHECK-NEXT: "structured.kernel"(%arg0)
// CHECK:      sym_name = "sqrt"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "broken_runs"
"func.func"() ({
^bb0(%x: tensor<8xf32>, %big: tensor<128x256xf32>, %z: tensor<16xf32>):
  %0 = "graph.exp"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %1 = "graph.neg"(%big) : (tensor<128x256xf32>) -> tensor<128x256xf32>
  %2 = "graph.abs"(%z) : (tensor<16xf32>) -> tensor<16xf32>
  %3 = "graph.reduce_sum"(%z) {axes = array<i64: 0>} : (tensor<16xf32>) -> tensor<f32>
  %4 = "graph.sqrt"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  "func.return"(%0, %1, %2, %3, %4) : (tensor<8xf32>, tensor<128x256xf32>, tensor<16xf32>, tensor<f32>, tensor<8xf32>) -> ()
}) {sym_name = "broken_runs", function_type = (tensor<8xf32>, tensor<128x256xf32>, tensor<16xf32>) -> (tensor<8xf32>, tensor<128x256xf32>, tensor<16xf32>, tensor<f32>, tensor<8xf32>)} : () -> ()
}) : () -> ()
