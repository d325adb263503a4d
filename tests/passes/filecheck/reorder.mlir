// RUN: tf-opt %s -p 'reorder' | filecheck %s
// RUN: tf-opt %s -p 'reorder{goal=siblings}' | filecheck %s --check-prefix=SIB
// reorder: the same ops in another topological order.  goal=memory finishes a branch before
// starting the next when that lowers the peak of live bytes; goal=siblings puts ops of one
// kind that read the same value next to each other (candidates for horizontal fusion).

// Two 64 KiB branches reduced to scalars.  As written both big tensors are alive at once
// (peak 128 KiB + 4 bytes); run branch by branch the peak is 64 KiB + 8 bytes.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<128x128xf32>):
// CHECK-NEXT:   %[[A:[0-9]+]] = "graph.exp"(%[[X]])
// CHECK-NEXT:   %[[SA:[0-9]+]] = "graph.reduce_sum"(%[[A]])
// CHECK-NEXT:   %[[B:[0-9]+]] = "graph.tanh"(%[[X]])
// CHECK-NEXT:   %[[SB:[0-9]+]] = "graph.reduce_sum"(%[[B]])
// CHECK-NEXT:   "graph.add"(%[[SA]], %[[SB]])
// CHECK:      sym_name = "branches"
// SIB:        "graph.exp"
// SIB-NEXT:   "graph.tanh"
// SIB:        sym_name = "branches"
"func.func"() ({
^bb0(%x: tensor<128x128xf32>):
  %a = "graph.exp"(%x) : (tensor<128x128xf32>) -> tensor<128x128xf32>
  %b = "graph.tanh"(%x) : (tensor<128x128xf32>) -> tensor<128x128xf32>
  %sa = "graph.reduce_sum"(%a) {axes = array<i64>, keepdims = false} : (tensor<128x128xf32>) -> tensor<f32>
  %sb = "graph.reduce_sum"(%b) {axes = array<i64>, keepdims = false} : (tensor<128x128xf32>) -> tensor<f32>
  %r = "graph.add"(%sa, %sb) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  "func.return"(%r) : (tensor<f32>) -> ()
}) {sym_name = "branches", function_type = (tensor<128x128xf32>) -> (tensor<f32>)} : () -> ()

// Q, K and V projections of one input, each followed by its own op: siblings first (only their
// weights, placed before their first user, come in between).
// SIB:        ^bb0(%[[X:arg[0-9]+]]: tensor<4x8xf32>):
// SIB:          %[[Q:[0-9]+]] = "graph.matmul"(%[[X]], %{{[0-9]+}})
// SIB-NEXT:     "graph.constant"
// SIB-NEXT:     %[[K:[0-9]+]] = "graph.matmul"(%[[X]], %{{[0-9]+}})
// SIB-NEXT:     "graph.constant"
// SIB-NEXT:     %[[V:[0-9]+]] = "graph.matmul"(%[[X]], %{{[0-9]+}})
// SIB-NEXT:     "graph.relu"(%[[Q]])
// SIB:        sym_name = "projections"
// Already minimal in memory: the memory goal keeps the order.
// CHECK:      "graph.matmul"
// CHECK-NEXT: "graph.relu"
// CHECK:      sym_name = "projections"
"func.func"() ({
^bb0(%x: tensor<4x8xf32>):
  %wq = "graph.constant"() {value = dense<0.5> : tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %wk = "graph.constant"() {value = dense<0.25> : tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %wv = "graph.constant"() {value = dense<-0.5> : tensor<8x8xf32>} : () -> tensor<8x8xf32>
  %q = "graph.matmul"(%x, %wq) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %qa = "graph.relu"(%q) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %k = "graph.matmul"(%x, %wk) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %ka = "graph.tanh"(%k) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %v = "graph.matmul"(%x, %wv) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = "graph.add"(%qa, %ka) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = "graph.add"(%s, %v) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  "func.return"(%r) : (tensor<4x8xf32>) -> ()
}) {sym_name = "projections", function_type = (tensor<4x8xf32>) -> (tensor<4x8xf32>)} : () -> ()
