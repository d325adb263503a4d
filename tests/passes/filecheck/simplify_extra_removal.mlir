// RUN: tf-opt %s -p 'simplify-extra' | filecheck %s
// Ops that cancel or do nothing, integer cast chains, and zero padding into a conv.

// x + neg(y) -> x - y
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>, %[[Y:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.sub"(%[[X]], %[[Y]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "add_neg_fires"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %n = "graph.neg"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.add"(%x, %n) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "add_neg_fires", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// abs is not neg.
// CHECK:      "graph.abs"
// CHECK-NEXT: "graph.add"
// CHECK:      sym_name = "add_neg_stays_abs"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %n = "graph.abs"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.add"(%x, %n) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "add_neg_stays_abs", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// neg(x - y) -> y - x
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>, %[[Y:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.sub"(%[[Y]], %[[X]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "neg_sub_fires"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %s = "graph.sub"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.neg"(%s) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "neg_sub_fires", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      "graph.add"
// CHECK-NEXT: "graph.neg"
// CHECK:      sym_name = "neg_sub_stays_add"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %s = "graph.add"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.neg"(%s) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "neg_sub_stays_add", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>, %[[Y:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.mul"(%[[X]], %[[Y]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "mul_neg_neg_fires"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %a = "graph.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %b = "graph.neg"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.mul"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "mul_neg_neg_fires", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// Only one negation.
// CHECK:      "graph.neg"
// CHECK-NEXT: "graph.mul"
// CHECK:      sym_name = "mul_neg_neg_stays_one"
"func.func"() ({
^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
  %a = "graph.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.mul"(%a, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "mul_neg_neg_stays_one", function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.relu"(%[[X]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "relu_relu_fires"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %a = "graph.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.relu"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "relu_relu_fires", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      "graph.relu"
// CHECK-NEXT: "graph.neg"
// CHECK-NEXT: "graph.relu"
// CHECK:      sym_name = "relu_relu_stays_between"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %a = "graph.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %n = "graph.neg"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.relu"(%n) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "relu_relu_stays_between", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xi32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.abs"(%[[X]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "abs_abs_fires"
"func.func"() ({
^bb0(%x: tensor<4xi32>):
  %a = "graph.abs"(%x) : (tensor<4xi32>) -> tensor<4xi32>
  %r = "graph.abs"(%a) : (tensor<4xi32>) -> tensor<4xi32>
  "func.return"(%r) : (tensor<4xi32>) -> ()
}) {sym_name = "abs_abs_fires", function_type = (tensor<4xi32>) -> (tensor<4xi32>)} : () -> ()

// CHECK:      "graph.abs"
// CHECK-NEXT: "graph.exp"
// CHECK-NEXT: "graph.abs"
// CHECK:      sym_name = "abs_abs_stays_between"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %a = "graph.abs"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %e = "graph.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.abs"(%e) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "abs_abs_stays_between", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.abs"(%[[X]])
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "abs_neg_fires"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %a = "graph.neg"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.abs"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "abs_neg_fires", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// CHECK:      "graph.sqrt"
// CHECK-NEXT: "graph.abs"
// CHECK:      sym_name = "abs_neg_stays_sqrt"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %a = "graph.sqrt"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %r = "graph.abs"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  "func.return"(%r) : (tensor<4xf32>) -> ()
}) {sym_name = "abs_neg_stays_sqrt", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// i64 -> i32 -> i8 truncates to the low 8 bits either way.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xi64>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.cast"(%[[X]]) {dtype = i8}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "cast_int_chain_fires"
"func.func"() ({
^bb0(%x: tensor<4xi64>):
  %a = "graph.cast"(%x) {dtype = i32} : (tensor<4xi64>) -> tensor<4xi32>
  %r = "graph.cast"(%a) {dtype = i8} : (tensor<4xi32>) -> tensor<4xi8>
  "func.return"(%r) : (tensor<4xi8>) -> ()
}) {sym_name = "cast_int_chain_fires", function_type = (tensor<4xi64>) -> (tensor<4xi8>)} : () -> ()

// i32 -> i8 -> i32 loses the high bits: not the identity.
// CHECK:      "graph.cast"(%arg0) {dtype = i8}
// CHECK-NEXT: "graph.cast"(%{{[0-9]+}}) {dtype = i32}
// CHECK:      sym_name = "cast_int_chain_stays_narrowing"
"func.func"() ({
^bb0(%x: tensor<4xi32>):
  %a = "graph.cast"(%x) {dtype = i8} : (tensor<4xi32>) -> tensor<4xi8>
  %r = "graph.cast"(%a) {dtype = i32} : (tensor<4xi8>) -> tensor<4xi32>
  "func.return"(%r) : (tensor<4xi32>) -> ()
}) {sym_name = "cast_int_chain_stays_narrowing", function_type = (tensor<4xi32>) -> (tensor<4xi32>)} : () -> ()

// BERT's attention mask: (N, L) -> (N, 1, L) -> (N, 1, 1, L) in one unsqueeze.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x5xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.unsqueeze"(%[[X]]) {axes = array<i64: 1, 2>} : (tensor<2x5xf32>) -> tensor<2x1x1x5xf32>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "unsqueeze_unsqueeze_fires"
"func.func"() ({
^bb0(%x: tensor<2x5xf32>):
  %a = "graph.unsqueeze"(%x) {axes = array<i64: 1>} : (tensor<2x5xf32>) -> tensor<2x1x5xf32>
  %r = "graph.unsqueeze"(%a) {axes = array<i64: 2>} : (tensor<2x1x5xf32>) -> tensor<2x1x1x5xf32>
  "func.return"(%r) : (tensor<2x1x1x5xf32>) -> ()
}) {sym_name = "unsqueeze_unsqueeze_fires", function_type = (tensor<2x5xf32>) -> (tensor<2x1x1x5xf32>)} : () -> ()

// Another op in between.
// CHECK:      "graph.unsqueeze"(%arg0) {axes = array<i64: 0>}
// CHECK-NEXT: "graph.exp"
// CHECK-NEXT: "graph.unsqueeze"(%{{[0-9]+}}) {axes = array<i64: 3>}
// CHECK:      sym_name = "unsqueeze_unsqueeze_stays_between"
"func.func"() ({
^bb0(%x: tensor<2x5xf32>):
  %a = "graph.unsqueeze"(%x) {axes = array<i64: 0>} : (tensor<2x5xf32>) -> tensor<1x2x5xf32>
  %b = "graph.exp"(%a) : (tensor<1x2x5xf32>) -> tensor<1x2x5xf32>
  %r = "graph.unsqueeze"(%b) {axes = array<i64: 3>} : (tensor<1x2x5xf32>) -> tensor<1x2x5x1xf32>
  "func.return"(%r, %a) : (tensor<1x2x5x1xf32>, tensor<1x2x5xf32>) -> ()
}) {sym_name = "unsqueeze_unsqueeze_stays_between", function_type = (tensor<2x5xf32>) -> (tensor<1x2x5x1xf32>, tensor<1x2x5xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<3x4xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "slice_noop_fires"
"func.func"() ({
^bb0(%x: tensor<3x4xf32>):
  %r = "graph.slice"(%x) {starts = array<i64: 0>, ends = array<i64: 9223372036854775807>, axes = array<i64: 1>, steps = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  "func.return"(%r) : (tensor<3x4xf32>) -> ()
}) {sym_name = "slice_noop_fires", function_type = (tensor<3x4xf32>) -> (tensor<3x4xf32>)} : () -> ()

// Same shape, but reversed.
// CHECK:      "graph.slice"
// CHECK:      sym_name = "slice_noop_stays_reverse"
"func.func"() ({
^bb0(%x: tensor<3x4xf32>):
  %r = "graph.slice"(%x) {starts = array<i64: -1>, ends = array<i64: -9223372036854775807>, axes = array<i64: 1>, steps = array<i64: -1>} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  "func.return"(%r) : (tensor<3x4xf32>) -> ()
}) {sym_name = "slice_noop_stays_reverse", function_type = (tensor<3x4xf32>) -> (tensor<3x4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<3x4xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "expand_noop_fires"
"func.func"() ({
^bb0(%x: tensor<3x4xf32>):
  %r = "graph.expand"(%x) {shape = array<i64: 1, 4>} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  "func.return"(%r) : (tensor<3x4xf32>) -> ()
}) {sym_name = "expand_noop_fires", function_type = (tensor<3x4xf32>) -> (tensor<3x4xf32>)} : () -> ()

// CHECK:      "graph.expand"
// CHECK:      sym_name = "expand_noop_stays_broadcast"
"func.func"() ({
^bb0(%x: tensor<1x4xf32>):
  %r = "graph.expand"(%x) {shape = array<i64: 3, 4>} : (tensor<1x4xf32>) -> tensor<3x4xf32>
  "func.return"(%r) : (tensor<3x4xf32>) -> ()
}) {sym_name = "expand_noop_stays_broadcast", function_type = (tensor<1x4xf32>) -> (tensor<3x4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<3x4xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "tile_noop_fires"
"func.func"() ({
^bb0(%x: tensor<3x4xf32>):
  %r = "graph.tile"(%x) {repeats = array<i64: 1, 1>} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  "func.return"(%r) : (tensor<3x4xf32>) -> ()
}) {sym_name = "tile_noop_fires", function_type = (tensor<3x4xf32>) -> (tensor<3x4xf32>)} : () -> ()

// CHECK:      "graph.tile"
// CHECK:      sym_name = "tile_noop_stays_repeat"
"func.func"() ({
^bb0(%x: tensor<3x4xf32>):
  %r = "graph.tile"(%x) {repeats = array<i64: 2, 1>} : (tensor<3x4xf32>) -> tensor<6x4xf32>
  "func.return"(%r) : (tensor<6x4xf32>) -> ()
}) {sym_name = "tile_noop_stays_repeat", function_type = (tensor<3x4xf32>) -> (tensor<6x4xf32>)} : () -> ()

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<3x4xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "pad_noop_fires"
"func.func"() ({
^bb0(%x: tensor<3x4xf32>):
  %r = "graph.pad"(%x) {pads = array<i64: 0, 0, 0, 0>, mode = "constant", value = 0.0 : f64} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  "func.return"(%r) : (tensor<3x4xf32>) -> ()
}) {sym_name = "pad_noop_fires", function_type = (tensor<3x4xf32>) -> (tensor<3x4xf32>)} : () -> ()

// Crop one, pad one: same shape, shifted contents.
// CHECK:      "graph.pad"
// CHECK:      sym_name = "pad_noop_stays_shift"
"func.func"() ({
^bb0(%x: tensor<3x4xf32>):
  %r = "graph.pad"(%x) {pads = array<i64: 0, -1, 0, 1>, mode = "constant", value = 0.0 : f64} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  "func.return"(%r) : (tensor<3x4xf32>) -> ()
}) {sym_name = "pad_noop_stays_shift", function_type = (tensor<3x4xf32>) -> (tensor<3x4xf32>)} : () -> ()

// The explicit zero padding of a conv input becomes the conv's own pads (added to them).
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x2x4x4xf32>):
// CHECK-NEXT:   %[[W:[0-9]+]] = "graph.constant"
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.conv"(%[[X]], %[[W]]) {strides = array<i64: 1, 1>, pads = array<i64: 1, 2, 1, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "pad_into_conv_fires"
"func.func"() ({
^bb0(%x: tensor<1x2x4x4xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0, -1.0], [0.5, 2.0]], [[0.25, 1.0], [-2.0, 1.5]]]]> : tensor<1x2x2x2xf32>} : () -> tensor<1x2x2x2xf32>
  %p = "graph.pad"(%x) {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 0>, mode = "constant", value = 0.0 : f64} : (tensor<1x2x4x4xf32>) -> tensor<1x2x6x5xf32>
  %r = "graph.conv"(%p, %w) {strides = array<i64: 1, 1>, pads = array<i64: 0, 1, 0, 0>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x2x6x5xf32>, tensor<1x2x2x2xf32>) -> tensor<1x1x5x5xf32>
  "func.return"(%r) : (tensor<1x1x5x5xf32>) -> ()
}) {sym_name = "pad_into_conv_fires", function_type = (tensor<1x2x4x4xf32>) -> (tensor<1x1x5x5xf32>)} : () -> ()

// Edge padding repeats the border; a conv pads with zeros.
// CHECK:      "graph.pad"
// CHECK-NEXT: "graph.conv"
// CHECK:      sym_name = "pad_into_conv_stays_edge"
"func.func"() ({
^bb0(%x: tensor<1x1x4x4xf32>):
  %w = "graph.constant"() {value = dense<1.0> : tensor<1x1x3x3xf32>} : () -> tensor<1x1x3x3xf32>
  %p = "graph.pad"(%x) {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, mode = "edge", value = 0.0 : f64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x6x6xf32>
  %r = "graph.conv"(%p, %w) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x1x6x6xf32>, tensor<1x1x3x3xf32>) -> tensor<1x1x4x4xf32>
  "func.return"(%r) : (tensor<1x1x4x4xf32>) -> ()
}) {sym_name = "pad_into_conv_stays_edge", function_type = (tensor<1x1x4x4xf32>) -> (tensor<1x1x4x4xf32>)} : () -> ()

// With a bias, and default (empty) conv pads.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x1x4x4xf32>, %[[B:arg[0-9]+]]: tensor<1xf32>):
// CHECK-NEXT:   %[[W:[0-9]+]] = "graph.constant"
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.conv"(%[[X]], %[[W]], %[[B]]) {{.*}}pads = array<i64: 1, 1, 1, 1>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "pad_into_conv_bias_fires"
"func.func"() ({
^bb0(%x: tensor<1x1x4x4xf32>, %b: tensor<1xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0, 2.0, 1.0], [0.0, -1.0, 0.5], [1.0, 1.0, -2.0]]]]> : tensor<1x1x3x3xf32>} : () -> tensor<1x1x3x3xf32>
  %p = "graph.pad"(%x) {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, mode = "constant", value = 0.0 : f64} : (tensor<1x1x4x4xf32>) -> tensor<1x1x6x6xf32>
  %r = "graph.conv"(%p, %w, %b) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x1x6x6xf32>, tensor<1x1x3x3xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  "func.return"(%r) : (tensor<1x1x4x4xf32>) -> ()
}) {sym_name = "pad_into_conv_bias_fires", function_type = (tensor<1x1x4x4xf32>, tensor<1xf32>) -> (tensor<1x1x4x4xf32>)} : () -> ()

// Padding the channel dim is not spatial padding.
// CHECK:      "graph.pad"
// CHECK-NEXT: "graph.conv"
// CHECK:      sym_name = "pad_into_conv_bias_stays_channels"
"func.func"() ({
^bb0(%x: tensor<1x1x4x4xf32>, %b: tensor<1xf32>):
  %w = "graph.constant"() {value = dense<1.0> : tensor<1x2x1x1xf32>} : () -> tensor<1x2x1x1xf32>
  %p = "graph.pad"(%x) {pads = array<i64: 0, 1, 0, 0, 0, 0, 0, 0>, mode = "constant", value = 0.0 : f64} : (tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %r = "graph.conv"(%p, %w, %b) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x2x4x4xf32>, tensor<1x2x1x1xf32>, tensor<1xf32>) -> tensor<1x1x4x4xf32>
  "func.return"(%r) : (tensor<1x1x4x4xf32>) -> ()
}) {sym_name = "pad_into_conv_bias_stays_channels", function_type = (tensor<1x1x4x4xf32>, tensor<1xf32>) -> (tensor<1x1x4x4xf32>)} : () -> ()

// A max over every axis of a reshaped tensor reads the tensor itself (the same values).
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.reduce_max"(%[[X]]) {axes = array<i64>, keepdims = false}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "reduce_max_whole_reshape_fires"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %t = "graph.reshape"(%x) {shape = array<i64: 3, 8>} : (tensor<2x3x4xf32>) -> tensor<3x8xf32>
  %r = "graph.reduce_max"(%t) {axes = array<i64>, keepdims = false} : (tensor<3x8xf32>) -> tensor<f32>
  "func.return"(%r) : (tensor<f32>) -> ()
}) {sym_name = "reduce_max_whole_reshape_fires", function_type = (tensor<2x3x4xf32>) -> (tensor<f32>)} : () -> ()

// Over some axes only, the reshape stays.
// CHECK:      "graph.reshape"
// CHECK-NEXT: "graph.reduce_max"
// CHECK:      sym_name = "reduce_max_whole_reshape_stays_partial"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %t = "graph.reshape"(%x) {shape = array<i64: 3, 8>} : (tensor<2x3x4xf32>) -> tensor<3x8xf32>
  %r = "graph.reduce_max"(%t) {axes = array<i64: 1>, keepdims = false} : (tensor<3x8xf32>) -> tensor<3xf32>
  "func.return"(%r) : (tensor<3xf32>) -> ()
}) {sym_name = "reduce_max_whole_reshape_stays_partial", function_type = (tensor<2x3x4xf32>) -> (tensor<3xf32>)} : () -> ()

// A max over every axis of a transposed tensor reads the tensor itself (the same values).
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.reduce_max"(%[[X]]) {axes = array<i64>, keepdims = false}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "reduce_max_whole_transpose_fires"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %t = "graph.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %r = "graph.reduce_max"(%t) {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<3x2x4xf32>) -> tensor<f32>
  "func.return"(%r) : (tensor<f32>) -> ()
}) {sym_name = "reduce_max_whole_transpose_fires", function_type = (tensor<2x3x4xf32>) -> (tensor<f32>)} : () -> ()

// Over some axes only this rule does not fire (sink-transpose moves the transpose below the
// reduction, which then reads the input's axes 1 and 2; a rank-1 transpose is none).
// CHECK:      "graph.reduce_max"(%arg0) {axes = array<i64: 1, 2>, keepdims = false}
// CHECK-NEXT: "func.return"
// CHECK:      sym_name = "reduce_max_whole_transpose_stays_partial"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %t = "graph.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %r = "graph.reduce_max"(%t) {axes = array<i64: 0, 2>, keepdims = false} : (tensor<3x2x4xf32>) -> tensor<2xf32>
  "func.return"(%r) : (tensor<2xf32>) -> ()
}) {sym_name = "reduce_max_whole_transpose_stays_partial", function_type = (tensor<2x3x4xf32>) -> (tensor<2xf32>)} : () -> ()

// A min over every axis of a reshaped tensor reads the tensor itself (the same values).
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.reduce_min"(%[[X]]) {axes = array<i64>, keepdims = false}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "reduce_min_whole_reshape_fires"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %t = "graph.reshape"(%x) {shape = array<i64: 3, 8>} : (tensor<2x3x4xf32>) -> tensor<3x8xf32>
  %r = "graph.reduce_min"(%t) {axes = array<i64>, keepdims = false} : (tensor<3x8xf32>) -> tensor<f32>
  "func.return"(%r) : (tensor<f32>) -> ()
}) {sym_name = "reduce_min_whole_reshape_fires", function_type = (tensor<2x3x4xf32>) -> (tensor<f32>)} : () -> ()

// Over some axes only, the reshape stays.
// CHECK:      "graph.reshape"
// CHECK-NEXT: "graph.reduce_min"
// CHECK:      sym_name = "reduce_min_whole_reshape_stays_partial"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %t = "graph.reshape"(%x) {shape = array<i64: 3, 8>} : (tensor<2x3x4xf32>) -> tensor<3x8xf32>
  %r = "graph.reduce_min"(%t) {axes = array<i64: 1>, keepdims = false} : (tensor<3x8xf32>) -> tensor<3xf32>
  "func.return"(%r) : (tensor<3xf32>) -> ()
}) {sym_name = "reduce_min_whole_reshape_stays_partial", function_type = (tensor<2x3x4xf32>) -> (tensor<3xf32>)} : () -> ()

// A min over every axis of a transposed tensor reads the tensor itself (the same values).
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3x4xf32>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.reduce_min"(%[[X]]) {axes = array<i64>, keepdims = false}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "reduce_min_whole_transpose_fires"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %t = "graph.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %r = "graph.reduce_min"(%t) {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<3x2x4xf32>) -> tensor<f32>
  "func.return"(%r) : (tensor<f32>) -> ()
}) {sym_name = "reduce_min_whole_transpose_fires", function_type = (tensor<2x3x4xf32>) -> (tensor<f32>)} : () -> ()

// Over some axes only this rule does not fire (sink-transpose moves the transpose below the
// reduction, which then reads the input's axes 1 and 2; a rank-1 transpose is none).
// CHECK:      "graph.reduce_min"(%arg0) {axes = array<i64: 1, 2>, keepdims = false}
// CHECK-NEXT: "func.return"
// CHECK:      sym_name = "reduce_min_whole_transpose_stays_partial"
"func.func"() ({
^bb0(%x: tensor<2x3x4xf32>):
  %t = "graph.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %r = "graph.reduce_min"(%t) {axes = array<i64: 0, 2>, keepdims = false} : (tensor<3x2x4xf32>) -> tensor<2xf32>
  "func.return"(%r) : (tensor<2xf32>) -> ()
}) {sym_name = "reduce_min_whole_transpose_stays_partial", function_type = (tensor<2x3x4xf32>) -> (tensor<2xf32>)} : () -> ()
