// RUN: tf-opt %s -p fuse-vertical --no-numerics | filecheck %s
// Vertical fusion: producers into consumers.  (Numerics: tests/passes/test_fusion_filecheck.py runs
// every fuse_*.mlir before and after its pipeline through the graph and structured interpreters.)

"builtin.module"() ({
// An elementwise chain becomes one compute: add, relu and exp in one expression.
// CHECK:      ^bb0(%arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>):
// CHECK-NEXT:   %[[K:[0-9]+]] = "structured.kernel"(%arg0, %arg1)
// CHECK:          "structured.compute"
// CHECK:            "scalar.add"
// CHECK-NEXT:       "scalar.relu"
// CHECK-NEXT:       "scalar.exp"
// CHECK-NEXT:       "structured.yield"
// CHECK-NEXT:     }) {domain = array<i64: 4, 8>, iterators = "pp"
// CHECK-NEXT:     "structured.return"
// CHECK-NEXT:   }) {sym_name = "add_relu_exp", tf.fusion = "elementwise"}
// CHECK-NEXT:   "func.return"(%[[K]])
// CHECK-NEXT: sym_name = "chain"
"func.func"() ({
^bb0(%x: tensor<4x8xf32>, %b: tensor<8xf32>):
  %0 = "graph.add"(%x, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = "graph.relu"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "graph.exp"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  "func.return"(%2) : (tensor<4x8xf32>) -> ()
}) {sym_name = "chain", function_type = (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>)} : () -> ()

// Epilogues into a GEMM: bias, activation and residual add become one compute after the
// contraction, reading its result at the output index.
// CHECK:      %[[K:[0-9]+]] = "structured.kernel"(%arg0, %arg1, %arg2, %arg3)
// CHECK:        %[[ACC:[0-9]+]] = "structured.compute"
// CHECK:          "scalar.mul"
// CHECK:        iterators = "ppr", combiner = "add"
// CHECK-NEXT:   "structured.compute"
// CHECK-NEXT:   ^bb0(%[[I:arg[0-9]+]]: index, %[[J:arg[0-9]+]]: index):
// CHECK-NEXT:     "structured.read"(%[[ACC]], %[[I]], %[[J]])
// CHECK:          "scalar.add"
// CHECK-NEXT:     "scalar.relu"
// CHECK:          "scalar.add"
// CHECK-NEXT:     "structured.yield"
// CHECK:        sym_name = "matmul_add_relu_add", tf.fusion = "out_elementwise_fusable"
// CHECK-NEXT:   "func.return"(%[[K]])
// CHECK-NEXT: sym_name = "epilogue"
"func.func"() ({
^bb0(%x: tensor<4x6xf32>, %w: tensor<6x3xf32>, %b: tensor<3xf32>, %r: tensor<4x3xf32>):
  %0 = "graph.matmul"(%x, %w) : (tensor<4x6xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
  %1 = "graph.add"(%0, %b) : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %2 = "graph.relu"(%1) : (tensor<4x3xf32>) -> tensor<4x3xf32>
  %3 = "graph.add"(%2, %r) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  "func.return"(%3) : (tensor<4x3xf32>) -> ()
}) {sym_name = "epilogue", function_type = (tensor<4x6xf32>, tensor<6x3xf32>, tensor<3xf32>, tensor<4x3xf32>) -> (tensor<4x3xf32>)} : () -> ()

// A transpose feeding a GEMM folds into its loads: the contraction reads x[k, i].
// CHECK:      "structured.kernel"(%arg0, %arg1)
// CHECK-NEXT: ^bb0(%[[X:arg[0-9]+]]: tensor<6x4xf32>, %[[W:arg[0-9]+]]: tensor<6x3xf32>):
// CHECK-NEXT:   "structured.compute"
// CHECK-NEXT:   ^bb0(%[[I:arg[0-9]+]]: index, %[[J:arg[0-9]+]]: index, %[[K:arg[0-9]+]]: index):
// CHECK-NEXT:     "structured.read"(%[[X]], %[[K]], %[[I]])
// CHECK-NEXT:     "structured.read"(%[[W]], %[[K]], %[[J]])
// CHECK-NOT:    "structured.compute"
// CHECK:      sym_name = "transpose_matmul"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "prologue"
"func.func"() ({
^bb0(%x: tensor<6x4xf32>, %w: tensor<6x3xf32>):
  %0 = "graph.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %1 = "graph.matmul"(%0, %w) : (tensor<4x6xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
  "func.return"(%1) : (tensor<4x3xf32>) -> ()
}) {sym_name = "prologue", function_type = (tensor<6x4xf32>, tensor<6x3xf32>) -> (tensor<4x3xf32>)} : () -> ()

// A pad feeding a convolution becomes a bounds-checked load of the unpadded input.
// CHECK:      "structured.kernel"(%arg0, %{{[0-9]+}})
// CHECK:        "structured.read"(%arg1, {{.*}}) {pad = 0.0 : f64} : (tensor<1x2x4x4xf32>
// CHECK-NOT:    "structured.compute"
// CHECK:      sym_name = "pad_conv", tf.fusion = "out_elementwise_fusable"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "pad_conv"
"func.func"() ({
^bb0(%x: tensor<1x2x4x4xf32>):
  %w = "graph.constant"() {value = dense<[[[[0.5]], [[-1.0]]], [[[2.0]], [[0.25]]], [[[1.5]], [[-0.5]]]]> : tensor<3x2x1x1xf32>} : () -> tensor<3x2x1x1xf32>
  %0 = "graph.pad"(%x) {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, mode = "constant", value = 0.0 : f64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x6x6xf32>
  %1 = "graph.conv"(%0, %w) {strides = array<i64: 2, 2>} : (tensor<1x2x6x6xf32>, tensor<3x2x1x1xf32>) -> tensor<1x3x3x3xf32>
  "func.return"(%1) : (tensor<1x3x3x3xf32>) -> ()
}) {sym_name = "pad_conv", function_type = (tensor<1x2x4x4xf32>) -> (tensor<1x3x3x3xf32>)} : () -> ()

// conv + batch_norm + relu (BatchNorm not folded): one kernel, the contraction first, then a
// single epilogue.  The per-channel scale and shift read only constants, so they are evaluated
// at compile time and passed in (the BatchNorm's four vectors become two).
// CHECK:      ^bb0(%arg0: tensor<1x4x10x10xf32>):
// CHECK-NEXT:   %[[W:[0-9]+]] = "graph.constant"() {{.*}} : () -> tensor<3x4x1x1xf32>
// CHECK-NEXT:   %[[B:[0-9]+]] = "graph.constant"() {value = dense<[0.1, -0.2, 0.3]>
// CHECK-NEXT:   %[[SCALE:[0-9]+]] = "graph.constant"() {value = dense<[1.4999{{[0-9]*}}, 0.7070{{[0-9]*}}, 1.4142{{[0-9]*}}]>
// CHECK-NEXT:   %[[SHIFT:[0-9]+]] = "graph.constant"()
// CHECK-NEXT:   "structured.kernel"(%arg0, %[[W]], %[[B]], %[[SCALE]], %[[SHIFT]])
// CHECK:        %[[ACC:[0-9]+]] = "structured.compute"
// CHECK:        iterators = "pppprrr", combiner = "add"
// CHECK-NEXT:   "structured.compute"
// CHECK-NEXT:   ^bb0
// CHECK-NEXT:     "structured.read"(%[[ACC]]
// CHECK-NEXT:     "structured.read"
// CHECK-NEXT:     "scalar.add"
// CHECK-NEXT:     "structured.read"
// CHECK-NEXT:     "scalar.mul"
// CHECK-NEXT:     "structured.read"
// CHECK-NEXT:     "scalar.add"
// CHECK-NEXT:     "scalar.relu"
// CHECK-NEXT:     "structured.yield"
// CHECK-NEXT:   }) {domain = array<i64: 1, 3, 10, 10>
// CHECK-NEXT:   "structured.return"
// CHECK-NEXT: }) {sym_name = "conv_batch_norm_relu", tf.fusion = "out_elementwise_fusable"}
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "conv_bn_relu"
"func.func"() ({
^bb0(%x: tensor<1x4x10x10xf32>):
  %w = "graph.constant"() {value = dense<[[[[0.5]], [[-1.0]], [[0.75]], [[0.5]]], [[[2.0]], [[0.25]], [[-0.5]], [[1.0]]], [[[1.5]], [[-0.5]], [[0.25]], [[-1.0]]]]> : tensor<3x4x1x1xf32>} : () -> tensor<3x4x1x1xf32>
  %b = "graph.constant"() {value = dense<[0.1, -0.2, 0.3]> : tensor<3xf32>} : () -> tensor<3xf32>
  %scale = "graph.constant"() {value = dense<[1.5, 0.5, 2.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %shift = "graph.constant"() {value = dense<[0.25, -0.5, 0.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %mean = "graph.constant"() {value = dense<[0.1, 0.2, -0.3]> : tensor<3xf32>} : () -> tensor<3xf32>
  %var = "graph.constant"() {value = dense<[1.0, 0.5, 2.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %0 = "graph.conv"(%x, %w, %b) : (tensor<1x4x10x10xf32>, tensor<3x4x1x1xf32>, tensor<3xf32>) -> tensor<1x3x10x10xf32>
  %1 = "graph.batch_norm"(%0, %scale, %shift, %mean, %var) {epsilon = 1.0e-05 : f64} : (tensor<1x3x10x10xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<1x3x10x10xf32>
  %2 = "graph.relu"(%1) : (tensor<1x3x10x10xf32>) -> tensor<1x3x10x10xf32>
  "func.return"(%2) : (tensor<1x3x10x10xf32>) -> ()
}) {sym_name = "conv_bn_relu", function_type = (tensor<1x4x10x10xf32>) -> (tensor<1x3x10x10xf32>)} : () -> ()

// A reduction whose result is broadcast back over its own rows: the row sum and the
// centring share one kernel (the mean's division is recomputed inside the subtraction).
// CHECK:      "structured.kernel"(%arg0)
// CHECK:        %[[SUM:[0-9]+]] = "structured.compute"
// CHECK:        iterators = "ppr", combiner = "add"
// CHECK-NEXT:   "structured.compute"
// CHECK:          "structured.read"(%[[SUM]]
// CHECK:          "scalar.div"
// CHECK-NEXT:     "scalar.sub"
// CHECK:      sym_name = "reduce_mean_sub", tf.fusion = "reduction"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "broadcast_back"
"func.func"() ({
^bb0(%x: tensor<4x16xf32>):
  %0 = "graph.reduce_mean"(%x) {axes = array<i64: 1>, keepdims = true} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %1 = "graph.sub"(%x, %0) : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  "func.return"(%1) : (tensor<4x16xf32>) -> ()
}) {sym_name = "broadcast_back", function_type = (tensor<4x16xf32>) -> (tensor<4x16xf32>)} : () -> ()

// exp read by both the row sum and the division: exp's consumers meet at its post-dominator
// (the division), so the three join; the exponentials stay one buffer read twice (reuse beats
// recomputing exp).
// CHECK:      "structured.kernel"(%arg0)
// CHECK:        %[[E:[0-9]+]] = "structured.compute"
// CHECK:          "scalar.exp"
// CHECK:        %[[S:[0-9]+]] = "structured.compute"
// CHECK-NEXT:   ^bb0
// CHECK-NEXT:     "structured.read"(%[[E]]
// CHECK:        combiner = "add"
// CHECK-NEXT:   "structured.compute"
// CHECK-NEXT:   ^bb0
// CHECK-NEXT:     "structured.read"(%[[E]]
// CHECK:          "structured.read"(%[[S]]
// CHECK-NEXT:     "scalar.div"
// CHECK:      sym_name = "exp_reduce_sum_div", tf.fusion = "reduction"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "diamond"
"func.func"() ({
^bb0(%x: tensor<4x16xf32>):
  %0 = "graph.exp"(%x) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %1 = "graph.reduce_sum"(%0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %2 = "graph.div"(%0, %1) : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  "func.return"(%2) : (tensor<4x16xf32>) -> ()
}) {sym_name = "diamond", function_type = (tensor<4x16xf32>) -> (tensor<4x16xf32>)} : () -> ()

// Must not fuse: one contraction per kernel.
// CHECK:      %[[A:[0-9]+]] = "structured.kernel"(%arg0, %arg1)
// CHECK:      sym_name = "matmul"
// CHECK-NEXT: %[[B:[0-9]+]] = "structured.kernel"(%[[A]], %arg2)
// CHECK:      sym_name = "matmul"
// CHECK-NEXT: "func.return"(%[[B]])
// CHECK-NEXT: sym_name = "two_contractions"
"func.func"() ({
^bb0(%x: tensor<4x6xf32>, %a: tensor<6x5xf32>, %b: tensor<5x3xf32>):
  %0 = "graph.matmul"(%x, %a) : (tensor<4x6xf32>, tensor<6x5xf32>) -> tensor<4x5xf32>
  %1 = "graph.matmul"(%0, %b) : (tensor<4x5xf32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  "func.return"(%1) : (tensor<4x3xf32>) -> ()
}) {sym_name = "two_contractions", function_type = (tensor<4x6xf32>, tensor<6x5xf32>, tensor<5x3xf32>) -> (tensor<4x3xf32>)} : () -> ()

// Must not fuse: an elementwise op feeding a GEMM operand would be recomputed for every tile.
// CHECK:      %[[T:[0-9]+]] = "structured.kernel"(%arg0)
// CHECK:      sym_name = "tanh"
// CHECK-NEXT: "structured.kernel"(%[[T]], %arg1)
// CHECK:      sym_name = "matmul"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "elementwise_operand"
"func.func"() ({
^bb0(%x: tensor<4x6xf32>, %w: tensor<6x3xf32>):
  %0 = "graph.tanh"(%x) : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %1 = "graph.matmul"(%0, %w) : (tensor<4x6xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
  "func.return"(%1) : (tensor<4x3xf32>) -> ()
}) {sym_name = "elementwise_operand", function_type = (tensor<4x6xf32>, tensor<6x3xf32>) -> (tensor<4x3xf32>)} : () -> ()

// Must not fuse: a softmax (a reduction) after a GEMM needs whole rows, not an epilogue.
// CHECK:      %[[M:[0-9]+]] = "structured.kernel"(%arg0, %arg1)
// CHECK:      sym_name = "matmul"
// CHECK-NEXT: "structured.kernel"(%[[M]])
// CHECK:      sym_name = "softmax"
// CHECK-NEXT: "func.return"
// CHECK-NEXT: sym_name = "reduction_after_contraction"
"func.func"() ({
^bb0(%x: tensor<4x6xf32>, %w: tensor<6x3xf32>):
  %0 = "graph.matmul"(%x, %w) : (tensor<4x6xf32>, tensor<6x3xf32>) -> tensor<4x3xf32>
  %1 = "graph.softmax"(%0) {axis = -1 : i64} : (tensor<4x3xf32>) -> tensor<4x3xf32>
  "func.return"(%1) : (tensor<4x3xf32>) -> ()
}) {sym_name = "reduction_after_contraction", function_type = (tensor<4x6xf32>, tensor<6x3xf32>) -> (tensor<4x3xf32>)} : () -> ()
}) : () -> ()
