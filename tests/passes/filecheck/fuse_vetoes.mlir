// RUN: tf-opt %s -p fuse-vertical --no-numerics | filecheck %s --check-prefix=FUSE
// RUN: tf-opt %s -p 'fuse-vertical{vector-registers=8 cache-bytes=1024}' --no-numerics | filecheck %s --check-prefix=VETO
// Hardware limits veto fusions the kind rules allow.  The same functions fuse completely on the
// default machine (prefix FUSE) and are cut where a limit of a small machine (prefix VETO, with
// 8 vector registers and 1 KiB of cache per core) would be exceeded.

"builtin.module"() ({
// Register pressure: twelve functions of x multiplied in a right-nested product keep every
// factor live until the end.  Eight registers hold only part of it: two kernels.
// FUSE:      ^bb0(%arg0: tensor<4x16xf32>):
// FUSE-NEXT:   %[[K:[0-9]+]] = "structured.kernel"(%arg0)
// FUSE-NOT:    "structured.kernel"
// FUSE:        "func.return"(%[[K]])
// FUSE-NEXT: sym_name = "pressure"
// VETO:      ^bb0(%arg0: tensor<4x16xf32>):
// VETO-NEXT:   %[[A:[0-9]+]] = "structured.kernel"(%arg0)
// VETO:        %[[B:[0-9]+]] = "structured.kernel"(%arg0, %[[A]])
// VETO:        "func.return"(%[[B]])
// VETO-NEXT: sym_name = "pressure"
"func.func"() ({
^bb0(%arg0: tensor<4x16xf32>):
  %0 = "graph.exp"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %1 = "graph.tanh"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %2 = "graph.sigmoid"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %3 = "graph.sin"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %4 = "graph.cos"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %5 = "graph.abs"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %6 = "graph.neg"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %7 = "graph.relu"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %8 = "graph.erf"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %9 = "graph.softplus"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %10 = "graph.silu"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %11 = "graph.floor"(%arg0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %12 = "graph.mul"(%10, %11) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %13 = "graph.mul"(%9, %12) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %14 = "graph.mul"(%8, %13) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %15 = "graph.mul"(%7, %14) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %16 = "graph.mul"(%6, %15) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %17 = "graph.mul"(%5, %16) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %18 = "graph.mul"(%4, %17) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %19 = "graph.mul"(%3, %18) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %20 = "graph.mul"(%2, %19) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %21 = "graph.mul"(%1, %20) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %22 = "graph.mul"(%0, %21) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  "func.return"(%22) : (tensor<4x16xf32>) -> ()
}) {sym_name = "pressure", function_type = (tensor<4x16xf32>) -> (tensor<4x16xf32>)} : () -> ()

// Cache footprint: a row of 512 floats (2 KiB) is reduced and broadcast back; with 1 KiB of
// cache the subtraction would find nothing of the row left, so the max stays a kernel of its own.
// FUSE:      %[[K:[0-9]+]] = "structured.kernel"(%arg0)
// FUSE:      sym_name = "reduce_max_sub", tf.fusion = "reduction"
// FUSE-NEXT: "func.return"(%[[K]])
// FUSE-NEXT: sym_name = "long_row"
// VETO:      %[[M:[0-9]+]] = "structured.kernel"(%arg0)
// VETO:      sym_name = "reduce_max", tf.fusion = "reduction"
// VETO-NEXT: %[[S:[0-9]+]] = "structured.kernel"(%arg0, %[[M]])
// VETO:      sym_name = "sub", tf.fusion = "elementwise"
// VETO-NEXT: "func.return"(%[[S]])
// VETO-NEXT: sym_name = "long_row"
"func.func"() ({
^bb0(%arg0: tensor<4x512xf32>):
  %0 = "graph.reduce_max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x512xf32>) -> tensor<4x1xf32>
  %1 = "graph.sub"(%arg0, %0) : (tensor<4x512xf32>, tensor<4x1xf32>) -> tensor<4x512xf32>
  "func.return"(%1) : (tensor<4x512xf32>) -> ()
}) {sym_name = "long_row", function_type = (tensor<4x512xf32>) -> (tensor<4x512xf32>)} : () -> ()

// A column reduction broadcast back: each sum needs a cache line per row (512 x 64 B = 32 KiB),
// which the default machine holds and the small one does not.
// FUSE:      sym_name = "reduce_sum_div", tf.fusion = "reduction"
// FUSE-NEXT: "func.return"
// FUSE-NEXT: sym_name = "column"
// VETO:      sym_name = "reduce_sum", tf.fusion = "reduction"
// VETO-NEXT: "structured.kernel"
// VETO:      sym_name = "div", tf.fusion = "elementwise"
// VETO-NEXT: "func.return"
// VETO-NEXT: sym_name = "column"
"func.func"() ({
^bb0(%arg0: tensor<512x8xf32>):
  %0 = "graph.reduce_sum"(%arg0) {axes = array<i64: 0>, keepdims = true} : (tensor<512x8xf32>) -> tensor<1x8xf32>
  %1 = "graph.div"(%arg0, %0) : (tensor<512x8xf32>, tensor<1x8xf32>) -> tensor<512x8xf32>
  "func.return"(%1) : (tensor<512x8xf32>) -> ()
}) {sym_name = "column", function_type = (tensor<512x8xf32>) -> (tensor<512x8xf32>)} : () -> ()
}) : () -> ()
