// RUN: tf-opt %s -p 'simplify-extra' --rtol=1e-5 | filecheck %s
// Constant reassociation (scale/shift chains collapse, constants fold) and transposed GEMM
// operands as trans_a/trans_b flags.

// (x * a) * b -> x * (a * b): one multiply, its constant folded.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[2.0, 6.0, 12.0]> : tensor<3xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.mul"(%[[X]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "mul_mul_const_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %b = "graph.constant"() {value = dense<[2.0, 3.0, 4.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %t = "graph.mul"(%x, %a) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %r = "graph.mul"(%t, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  "func.return"(%r) : (tensor<2x3xf32>) -> ()
}) {sym_name = "mul_mul_const_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// The inner product is used twice: merging would compute it twice.
// CHECK:      "graph.mul"
// CHECK-NEXT: "graph.mul"
// CHECK:      sym_name = "mul_mul_const_stays_shared"
"func.func"() ({
^bb0(%x: tensor<3xf32>):
  %a = "graph.constant"() {value = dense<2.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %b = "graph.constant"() {value = dense<3.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %t = "graph.mul"(%x, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %r = "graph.mul"(%t, %b) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  "func.return"(%r, %t) : (tensor<3xf32>, tensor<3xf32>) -> ()
}) {sym_name = "mul_mul_const_stays_shared", function_type = (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x2xf32>):
// CHECK-NEXT:   %[[C:[0-9]+]] = "graph.constant"() {value = dense<[11.0, 22.0]> : tensor<2xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.add"(%[[X]], %[[C]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "add_add_const_fires"
"func.func"() ({
^bb0(%x: tensor<2x2xf32>):
  %a = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %b = "graph.constant"() {value = dense<[10.0, 20.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %t = "graph.add"(%x, %a) : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  %r = "graph.add"(%t, %b) : (tensor<2x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
  "func.return"(%r) : (tensor<2x2xf32>) -> ()
}) {sym_name = "add_add_const_fires", function_type = (tensor<2x2xf32>) -> (tensor<2x2xf32>)} : () -> ()

// The second operand is not a constant.
// CHECK:      "graph.add"
// CHECK-NEXT: "graph.add"
// CHECK:      sym_name = "add_add_const_stays_variable"
"func.func"() ({
^bb0(%x: tensor<2xf32>, %y: tensor<2xf32>):
  %a = "graph.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
  %t = "graph.add"(%x, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %r = "graph.add"(%t, %y) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  "func.return"(%r) : (tensor<2xf32>) -> ()
}) {sym_name = "add_add_const_stays_variable", function_type = (tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>)} : () -> ()

// A decomposed BatchNorm followed by a scale and a shift: (((x * a) + b) * c) + d collapses to
// x * (a c) + (b c + d).
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x2x3xf32>):
// CHECK-NEXT:   %[[S:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}6.0], [-2.0]]> : tensor<2x1xf32>}
// CHECK-NEXT:   %[[M:[0-9]+]] = "graph.mul"(%[[X]], %[[S]])
// CHECK-NEXT:   %[[T:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[}}3.5], [0.0]]> : tensor<2x1xf32>}
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.add"(%[[M]], %[[T]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "mul_add_const_fires"
"func.func"() ({
^bb0(%x: tensor<1x2x3xf32>):
  %a = "graph.constant"() {value = dense<[[2.0], [1.0]]> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
  %b = "graph.constant"() {value = dense<[[1.0], [0.5]]> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
  %c = "graph.constant"() {value = dense<[[3.0], [-2.0]]> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
  %d = "graph.constant"() {value = dense<[[0.5], [1.0]]> : tensor<2x1xf32>} : () -> tensor<2x1xf32>
  %m = "graph.mul"(%x, %a) : (tensor<1x2x3xf32>, tensor<2x1xf32>) -> tensor<1x2x3xf32>
  %t = "graph.add"(%m, %b) : (tensor<1x2x3xf32>, tensor<2x1xf32>) -> tensor<1x2x3xf32>
  %u = "graph.mul"(%t, %c) : (tensor<1x2x3xf32>, tensor<2x1xf32>) -> tensor<1x2x3xf32>
  %r = "graph.add"(%u, %d) : (tensor<1x2x3xf32>, tensor<2x1xf32>) -> tensor<1x2x3xf32>
  "func.return"(%r) : (tensor<1x2x3xf32>) -> ()
}) {sym_name = "mul_add_const_fires", function_type = (tensor<1x2x3xf32>) -> (tensor<1x2x3xf32>)} : () -> ()

// The shifted value is used elsewhere too: distributing would add a multiply.
// CHECK:      %[[T:[0-9]+]] = "graph.add"
// CHECK-NEXT: "graph.mul"(%[[T]]
// CHECK:      sym_name = "mul_add_const_stays_shared"
"func.func"() ({
^bb0(%x: tensor<3xf32>):
  %a = "graph.constant"() {value = dense<1.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %b = "graph.constant"() {value = dense<2.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %t = "graph.add"(%x, %a) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %r = "graph.mul"(%t, %b) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  "func.return"(%r, %t) : (tensor<3xf32>, tensor<3xf32>) -> ()
}) {sym_name = "mul_add_const_stays_shared", function_type = (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)} : () -> ()

// A transposed weight that something else also reads: a flag instead of a copy.
// CHECK:      ^bb0(%[[A:arg[0-9]+]]: tensor<2x3xf32>, %[[B:arg[0-9]+]]: tensor<4x3xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gemm"(%[[A]], %[[B]]) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = true}
// CHECK-NEXT:   "func.return"(%[[R]], %[[B]])
// CHECK-NEXT: sym_name = "transpose_into_gemm_b_fires"
"func.func"() ({
^bb0(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>):
  %t = "graph.transpose"(%b) {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %r = "graph.gemm"(%a, %t) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  "func.return"(%r, %b) : (tensor<2x4xf32>, tensor<4x3xf32>) -> ()
}) {sym_name = "transpose_into_gemm_b_fires", function_type = (tensor<2x3xf32>, tensor<4x3xf32>) -> (tensor<2x4xf32>, tensor<4x3xf32>)} : () -> ()

// trans_b already set: the flag toggles back to false.
// CHECK:      ^bb0(%[[A:arg[0-9]+]]: tensor<2x3xf32>, %[[B:arg[0-9]+]]: tensor<3x4xf32>, %[[C:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gemm"(%[[A]], %[[B]], %[[C]]) {alpha = 0.5 : f64, beta = 2.0 : f64, trans_a = false, trans_b = false}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "transpose_into_gemm_b_bias_fires"
"func.func"() ({
^bb0(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %c: tensor<4xf32>):
  %t = "graph.transpose"(%b) {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %r = "graph.gemm"(%a, %t, %c) {alpha = 0.5 : f64, beta = 2.0 : f64, trans_a = false, trans_b = true} : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  "func.return"(%r) : (tensor<2x4xf32>) -> ()
}) {sym_name = "transpose_into_gemm_b_bias_fires", function_type = (tensor<2x3xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[A:arg[0-9]+]]: tensor<3x2xf32>, %[[B:arg[0-9]+]]: tensor<3x4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gemm"(%[[A]], %[[B]]) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = true, trans_b = false}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "transpose_into_gemm_a_fires"
"func.func"() ({
^bb0(%a: tensor<3x2xf32>, %b: tensor<3x4xf32>):
  %t = "graph.transpose"(%a) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %r = "graph.gemm"(%t, %b) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  "func.return"(%r) : (tensor<2x4xf32>) -> ()
}) {sym_name = "transpose_into_gemm_a_fires", function_type = (tensor<3x2xf32>, tensor<3x4xf32>) -> (tensor<2x4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[A:arg[0-9]+]]: tensor<3x2xf32>, %[[B:arg[0-9]+]]: tensor<3x4xf32>, %[[C:arg[0-9]+]]: tensor<2x4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gemm"(%[[A]], %[[B]], %[[C]]) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = true, trans_b = false}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "transpose_into_gemm_a_bias_fires"
"func.func"() ({
^bb0(%a: tensor<3x2xf32>, %b: tensor<3x4xf32>, %c: tensor<2x4xf32>):
  %t = "graph.transpose"(%a) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %r = "graph.gemm"(%t, %b, %c) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  "func.return"(%r) : (tensor<2x4xf32>) -> ()
}) {sym_name = "transpose_into_gemm_a_bias_fires", function_type = (tensor<3x2xf32>, tensor<3x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>)} : () -> ()

// Only a 2-D transpose is a GEMM flag; the gemm operands are matrices anyway, so the stays
// case is a transposed operand that reaches a gemm through another op.
// CHECK:      "graph.transpose"
// CHECK-NEXT: "graph.softmax"
// CHECK-NEXT: "graph.gemm"({{.*}}) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false}
// CHECK:      sym_name = "transpose_into_gemm_b_stays_indirect"
"func.func"() ({
^bb0(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>):
  %t = "graph.transpose"(%b) {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %n = "graph.softmax"(%t) {axis = 1} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %r = "graph.gemm"(%a, %n) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  "func.return"(%r) : (tensor<2x4xf32>) -> ()
}) {sym_name = "transpose_into_gemm_b_stays_indirect", function_type = (tensor<2x3xf32>, tensor<4x3xf32>) -> (tensor<2x4xf32>)} : () -> ()

// CHECK:      "graph.transpose"
// CHECK-NEXT: "graph.gemm"({{.*}}, %{{[0-9]+}}) {{.*}} trans_a = false, trans_b = false
// CHECK:      sym_name = "transpose_into_gemm_b_bias_stays_indirect"
"func.func"() ({
^bb0(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %c: tensor<4x2xf32>):
  %t = "graph.transpose"(%c) {perm = array<i64: 1, 0>} : (tensor<4x2xf32>) -> tensor<2x4xf32>
  %r = "graph.gemm"(%a, %b, %t) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  "func.return"(%r) : (tensor<2x4xf32>) -> ()
}) {sym_name = "transpose_into_gemm_b_bias_stays_indirect", function_type = (tensor<2x3xf32>, tensor<3x4xf32>, tensor<4x2xf32>) -> (tensor<2x4xf32>)} : () -> ()

// CHECK:      "graph.neg"
// CHECK-NEXT: "graph.transpose"
// CHECK-NEXT: "graph.softmax"
// CHECK-NEXT: "graph.gemm"({{.*}}) {{.*}} trans_a = false
// CHECK:      sym_name = "transpose_into_gemm_a_stays_indirect"
"func.func"() ({
^bb0(%a: tensor<3x2xf32>, %b: tensor<3x4xf32>):
  %n = "graph.neg"(%a) : (tensor<3x2xf32>) -> tensor<3x2xf32>
  %t = "graph.transpose"(%n) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %e = "graph.softmax"(%t) {axis = 1} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %r = "graph.gemm"(%e, %b) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  "func.return"(%r) : (tensor<2x4xf32>) -> ()
}) {sym_name = "transpose_into_gemm_a_stays_indirect", function_type = (tensor<3x2xf32>, tensor<3x4xf32>) -> (tensor<2x4xf32>)} : () -> ()

// CHECK:      "graph.softmax"
// CHECK-NEXT: "graph.gemm"({{.*}}) {{.*}} trans_a = false
// CHECK:      sym_name = "transpose_into_gemm_a_bias_stays_indirect"
"func.func"() ({
^bb0(%a: tensor<3x2xf32>, %b: tensor<3x4xf32>, %c: tensor<4xf32>):
  %t = "graph.transpose"(%a) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %e = "graph.softmax"(%t) {axis = 1} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %r = "graph.gemm"(%e, %b, %c) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = false} : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  "func.return"(%r) : (tensor<2x4xf32>) -> ()
}) {sym_name = "transpose_into_gemm_a_bias_stays_indirect", function_type = (tensor<3x2xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<2x4xf32>)} : () -> ()

// GPT-2's LM head: hidden states times the transposed token embedding.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4x3xf32>, %[[W:arg[0-9]+]]: tensor<5x3xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.gemm"(%[[X]], %[[W]]) {trans_b = true
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "matmul_transposed_rhs_fires"
"func.func"() ({
^bb0(%x: tensor<4x3xf32>, %w: tensor<5x3xf32>):
  %t = "graph.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<5x3xf32>) -> tensor<3x5xf32>
  %r = "graph.matmul"(%x, %t) : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  "func.return"(%r) : (tensor<4x5xf32>) -> ()
}) {sym_name = "matmul_transposed_rhs_fires", function_type = (tensor<4x3xf32>, tensor<5x3xf32>) -> (tensor<4x5xf32>)} : () -> ()

// A batched transpose is not a matrix transpose.
// CHECK:      "graph.transpose"
// CHECK-NEXT: "graph.matmul"
// CHECK:      sym_name = "matmul_transposed_rhs_stays_batched_rhs"
"func.func"() ({
^bb0(%x: tensor<2x4x3xf32>, %w: tensor<2x5x3xf32>):
  %t = "graph.transpose"(%w) {perm = array<i64: 0, 2, 1>} : (tensor<2x5x3xf32>) -> tensor<2x3x5xf32>
  %r = "graph.matmul"(%x, %t) : (tensor<2x4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
  "func.return"(%r) : (tensor<2x4x5xf32>) -> ()
}) {sym_name = "matmul_transposed_rhs_stays_batched_rhs", function_type = (tensor<2x4x3xf32>, tensor<2x5x3xf32>) -> (tensor<2x4x5xf32>)} : () -> ()

// Batched lhs: flattened to rows, one GEMM, the batch dims restored.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x4x3xf32>, %[[W:arg[0-9]+]]: tensor<5x3xf32>):
// CHECK-NEXT:   %[[F:[0-9]+]] = "graph.reshape"(%[[X]]) {shape = array<i64: 8, 3>}
// CHECK-NEXT:   %[[G:[0-9]+]] = "graph.gemm"(%[[F]], %[[W]]) {trans_b = true
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.reshape"(%[[G]]) {shape = array<i64: 2, 4, 5>}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "matmul_transposed_rhs_batched_fires"
"func.func"() ({
^bb0(%x: tensor<2x4x3xf32>, %w: tensor<5x3xf32>):
  %t = "graph.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<5x3xf32>) -> tensor<3x5xf32>
  %r = "graph.matmul"(%x, %t) : (tensor<2x4x3xf32>, tensor<3x5xf32>) -> tensor<2x4x5xf32>
  "func.return"(%r) : (tensor<2x4x5xf32>) -> ()
}) {sym_name = "matmul_transposed_rhs_batched_fires", function_type = (tensor<2x4x3xf32>, tensor<5x3xf32>) -> (tensor<2x4x5xf32>)} : () -> ()

// A 1-D lhs has no rows to flatten.
// CHECK:      "graph.transpose"
// CHECK-NEXT: "graph.matmul"
// CHECK:      sym_name = "matmul_transposed_rhs_batched_stays_vector"
"func.func"() ({
^bb0(%x: tensor<3xf32>, %w: tensor<5x3xf32>):
  %t = "graph.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<5x3xf32>) -> tensor<3x5xf32>
  %r = "graph.matmul"(%x, %t) : (tensor<3xf32>, tensor<3x5xf32>) -> tensor<5xf32>
  "func.return"(%r) : (tensor<5xf32>) -> ()
}) {sym_name = "matmul_transposed_rhs_batched_stays_vector", function_type = (tensor<3xf32>, tensor<5x3xf32>) -> (tensor<5xf32>)} : () -> ()
