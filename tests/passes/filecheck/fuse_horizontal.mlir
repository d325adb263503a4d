// RUN: tf-opt %s -p fuse-horizontal --no-numerics | filecheck %s
// Horizontal fusion: kernels sharing an input run as one.

"builtin.module"() ({
// Q, K and V projections of one input: one GEMM over the weights (and biases) concatenated at
// compile time; the three slices of its result, siblings of one iteration space, one kernel.
// CHECK:      ^bb0(%arg0: tensor<5x3xf32>):
// CHECK-NEXT:   %[[W:[0-9]+]] = "graph.constant"() {{.*}} : () -> tensor<3x6xf32>
// CHECK-NEXT:   %[[B:[0-9]+]] = "graph.constant"() {value = dense<[0.1, -0.1, 0.2, 0.3, 0.0, 0.5]> : tensor<6xf32>}
// CHECK-NEXT:   %[[G:[0-9]+]] = "structured.kernel"(%arg0, %[[W]], %[[B]])
// CHECK:          iterators = "ppr", combiner = "add", dtype = f32} : () -> tensor<5x6xf32>
// CHECK:        }) {sym_name = "gemm", tf.fusion = "out_elementwise_fusable"}
// CHECK-NEXT:   %[[S:[0-9]+]]:3 = "structured.kernel"(%[[G]])
// CHECK:        "structured.return"(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) : (tensor<5x2xf32>, tensor<5x2xf32>, tensor<5x2xf32>)
// CHECK-NEXT:   }) {sym_name = "slice", tf.fusion = "injective"}
// CHECK-NEXT:   "func.return"(%[[S]]#0, %[[S]]#1, %[[S]]#2)
// CHECK-NEXT: sym_name = "qkv"
"func.func"() ({
^bb0(%x: tensor<5x3xf32>):
  %wq = "graph.constant"() {value = dense<[[0.5, -1.0], [0.25, 2.0], [1.5, -0.5]]> : tensor<3x2xf32>} : () -> tensor<3x2xf32>
  %bq = "graph.constant"() {value = dense<[0.1, -0.1]> : tensor<2xf32>} : () -> tensor<2xf32>
  %wk = "graph.constant"() {value = dense<[[-0.5, 1.0], [0.75, 0.5], [1.0, 0.25]]> : tensor<3x2xf32>} : () -> tensor<3x2xf32>
  %bk = "graph.constant"() {value = dense<[0.2, 0.3]> : tensor<2xf32>} : () -> tensor<2xf32>
  %wv = "graph.constant"() {value = dense<[[1.0, 0.0], [0.0, 1.0], [2.0, -2.0]]> : tensor<3x2xf32>} : () -> tensor<3x2xf32>
  %bv = "graph.constant"() {value = dense<[0.0, 0.5]> : tensor<2xf32>} : () -> tensor<2xf32>
  %q = "graph.gemm"(%x, %wq, %bq) : (tensor<5x3xf32>, tensor<3x2xf32>, tensor<2xf32>) -> tensor<5x2xf32>
  %k = "graph.gemm"(%x, %wk, %bk) : (tensor<5x3xf32>, tensor<3x2xf32>, tensor<2xf32>) -> tensor<5x2xf32>
  %v = "graph.gemm"(%x, %wv, %bv) : (tensor<5x3xf32>, tensor<3x2xf32>, tensor<2xf32>) -> tensor<5x2xf32>
  "func.return"(%q, %k, %v) : (tensor<5x2xf32>, tensor<5x2xf32>, tensor<5x2xf32>) -> ()
}) {sym_name = "qkv", function_type = (tensor<5x3xf32>) -> (tensor<5x2xf32>, tensor<5x2xf32>, tensor<5x2xf32>)} : () -> ()

// exp and tanh of x: one kernel, two results; the row sum (a reduction) is left to fuse-reuse.
// CHECK:      %[[E:[0-9]+]]:2 = "structured.kernel"(%arg0)
// CHECK:        "scalar.exp"
// CHECK:        "scalar.tanh"
// CHECK:      sym_name = "exp_tanh", tf.fusion = "elementwise"
// CHECK-NEXT: %[[R:[0-9]+]] = "structured.kernel"(%arg0)
// CHECK:      sym_name = "reduce_sum", tf.fusion = "reduction"
// CHECK-NEXT: "func.return"(%[[E]]#0, %[[E]]#1, %[[R]])
// CHECK-NEXT: sym_name = "siblings"
"func.func"() ({
^bb0(%x: tensor<4x8xf32>):
  %0 = "graph.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "graph.tanh"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "graph.reduce_sum"(%x) {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  "func.return"(%0, %1, %2) : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> ()
}) {sym_name = "siblings", function_type = (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>)} : () -> ()

// Must not concatenate: the first matmul's ReLU would fuse into it as an epilogue, which a
// sliced result could not take.
// CHECK:      "structured.kernel"(%arg0, %0)
// CHECK:      sym_name = "matmul"
// CHECK-NEXT: "structured.kernel"
// CHECK:      sym_name = "relu"
// CHECK-NEXT: "structured.kernel"(%arg0, %1)
// CHECK:      sym_name = "matmul"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "epilogue_blocks_concat"
"func.func"() ({
^bb0(%x: tensor<5x3xf32>):
  %w1 = "graph.constant"() {value = dense<[[0.5, -1.0], [0.25, 2.0], [1.5, -0.5]]> : tensor<3x2xf32>} : () -> tensor<3x2xf32>
  %w2 = "graph.constant"() {value = dense<[[-0.5, 1.0], [0.75, 0.5], [1.0, 0.25]]> : tensor<3x2xf32>} : () -> tensor<3x2xf32>
  %0 = "graph.matmul"(%x, %w1) : (tensor<5x3xf32>, tensor<3x2xf32>) -> tensor<5x2xf32>
  %1 = "graph.relu"(%0) : (tensor<5x2xf32>) -> tensor<5x2xf32>
  %2 = "graph.matmul"(%x, %w2) : (tensor<5x3xf32>, tensor<3x2xf32>) -> tensor<5x2xf32>
  "func.return"(%1, %2) : (tensor<5x2xf32>, tensor<5x2xf32>) -> ()
}) {sym_name = "epilogue_blocks_concat", function_type = (tensor<5x3xf32>) -> (tensor<5x2xf32>, tensor<5x2xf32>)} : () -> ()
}) : () -> ()
