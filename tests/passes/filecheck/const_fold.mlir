// RUN: tf-opt %s -p 'const-fold' | filecheck %s
// RUN: tf-opt %s -p 'fold' | filecheck %s --check-prefix=FOLD
// const-fold counts what folding adds to the model: the result minus the constants only the
// folded op reads.  Re-laying out a weight nothing else reads is free whatever its size; a
// copy of a weight that stays in use (90000 elements, above the limit of 65536) is not made.
// The driver's `fold` makes that copy: it only refuses results bigger than their inputs.

// CHECK:      %[[C:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}1.0, 3.0], [2.0, 4.0]]> : tensor<2x2xf32>}
// CHECK-NEXT: "func.return"(%[[C]])
// CHECK-NEXT: sym_name = "const_fold_fires"
"func.func"() ({
  %w = "graph.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %t = "graph.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  "func.return"(%t) : (tensor<2x2xf32>) -> ()
}) {sym_name = "const_fold_fires", function_type = () -> (tensor<2x2xf32>)} : () -> ()

// Large, but the only reader of its input: folds (no growth).
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4x300xf32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<2.0> : tensor<300x300xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.matmul"(%[[X]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "const_fold_fires_relayout"
"func.func"() ({
^bb0(%x: tensor<4x300xf32>):
  %w = "graph.constant"() {value = dense<2.0> : tensor<300x300xf32>} : () -> tensor<300x300xf32>
  %t = "graph.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<300x300xf32>) -> tensor<300x300xf32>
  %r = "graph.matmul"(%x, %t) : (tensor<4x300xf32>, tensor<300x300xf32>) -> tensor<4x300xf32>
  "func.return"(%r) : (tensor<4x300xf32>) -> ()
}) {sym_name = "const_fold_fires_relayout", function_type = (tensor<4x300xf32>) -> (tensor<4x300xf32>)} : () -> ()

// The weight is also read directly (a tied embedding: a gather of its rows): no second copy.
// CHECK:      "graph.constant"() {value = dense<2.0> : tensor<300x300xf32>}
// CHECK-NEXT: "graph.transpose"
// CHECK:      sym_name = "const_fold_stays_shared"
// FOLD:       sym_name = "const_fold_fires_relayout"
// FOLD:       "graph.constant"() {value = dense<2.0> : tensor<300x300xf32>}
// FOLD-NEXT:  "graph.constant"() {value = dense<2.0> : tensor<300x300xf32>}
// FOLD-NOT:   "graph.transpose"
// FOLD:       sym_name = "const_fold_stays_shared"
"func.func"() ({
^bb0(%x: tensor<4x300xf32>, %ids: tensor<4xi64>):
  %w = "graph.constant"() {value = dense<2.0> : tensor<300x300xf32>} : () -> tensor<300x300xf32>
  %t = "graph.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<300x300xf32>) -> tensor<300x300xf32>
  %r = "graph.matmul"(%x, %t) : (tensor<4x300xf32>, tensor<300x300xf32>) -> tensor<4x300xf32>
  %e = "graph.gather"(%w, %ids) {axis = 0 : i64} : (tensor<300x300xf32>, tensor<4xi64>) -> tensor<4x300xf32>
  "func.return"(%r, %e) : (tensor<4x300xf32>, tensor<4x300xf32>) -> ()
}) {sym_name = "const_fold_stays_shared", function_type = (tensor<4x300xf32>, tensor<4xi64>) -> (tensor<4x300xf32>, tensor<4x300xf32>)} : () -> ()
