// RUN: tf-opt %s -p 'layout{block=4}' | filecheck %s
// Blocked NCHW4c convolutions (block 4 here; the pass's default is the host's vector width),
// weights packed to OIHW4i4o at compile time, and the layout conversions between blocked ops
// cancelled: elementwise ops, pools and channel concats work on the blocked tensors.

// The packed weight replaces the plain one where it was defined, shared by all its convs.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x4x3x3xf32>):
// CHECK-NEXT:   %[[W:[0-9]+]] = "graph.constant"() {{.*}} : () -> tensor<2x1x1x1x4x4xf32>
// CHECK-NEXT:   %[[B:[0-9]+]] = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>}
// CHECK-NEXT:   %[[XB:[0-9]+]] = "graph.layout_transform"(%[[X]]) {src = "NCHW", dst = "NCHW4c"{{.*}}} : (tensor<1x4x3x3xf32>) -> tensor<1x1x3x3x4xf32>
// CHECK-NEXT:   %[[Y:[0-9]+]] = "graph.conv_nchwc"(%[[XB]], %[[W]], %[[B]]) {{.*}} -> tensor<1x2x3x3x4xf32>
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.layout_transform"(%[[Y]]) {src = "NCHW4c", dst = "NCHW"{{.*}}} : (tensor<1x2x3x3x4xf32>) -> tensor<1x8x3x3xf32>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "conv_to_nchwc_fires"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>):
  %w = "graph.constant"() {value = dense<[[[[1.0]], [[2.0]], [[3.0]], [[4.0]]], [[[-1.0]], [[0.5]], [[0.0]], [[1.0]]], [[[2.0]], [[2.0]], [[-2.0]], [[1.0]]], [[[0.25]], [[1.0]], [[1.0]], [[0.5]]], [[[1.0]], [[0.0]], [[0.0]], [[0.0]]], [[[0.0]], [[1.0]], [[0.0]], [[0.0]]], [[[0.0]], [[0.0]], [[1.0]], [[0.0]]], [[[0.0]], [[0.0]], [[0.0]], [[1.0]]]]> : tensor<8x4x1x1xf32>} : () -> tensor<8x4x1x1xf32>
  %b = "graph.constant"() {value = dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>} : () -> tensor<8xf32>
  %y = "graph.conv"(%x, %w, %b) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<8x4x1x1xf32>, tensor<8xf32>) -> tensor<1x8x3x3xf32>
  "func.return"(%y) : (tensor<1x8x3x3xf32>) -> ()
}) {sym_name = "conv_to_nchwc_fires", function_type = (tensor<1x4x3x3xf32>) -> (tensor<1x8x3x3xf32>)} : () -> ()

// RGB input: 3 channels are one block of 3 (NCHW3c), the output is NCHW4c.
// CHECK:      "graph.constant"() {{.*}} : () -> tensor<1x1x3x3x3x4xf32>
// CHECK-NEXT: "graph.layout_transform"(%arg0) {src = "NCHW", dst = "NCHW3c"{{.*}}} : (tensor<1x3x4x4xf32>) -> tensor<1x1x4x4x3xf32>
// CHECK-NEXT: "graph.conv_nchwc"{{.*}}pads = array<i64: 1, 1, 1, 1>{{.*}} -> tensor<1x1x4x4x4xf32>
// CHECK:      sym_name = "conv_to_nchwc_fires_rgb"
"func.func"() ({
^bb0(%x: tensor<1x3x4x4xf32>):
  %w = "graph.constant"() {value = dense<0.5> : tensor<4x3x3x3xf32>} : () -> tensor<4x3x3x3xf32>
  %y = "graph.conv"(%x, %w) {strides = array<i64>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x3x4x4xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  "func.return"(%y) : (tensor<1x4x4x4xf32>) -> ()
}) {sym_name = "conv_to_nchwc_fires_rgb", function_type = (tensor<1x3x4x4xf32>) -> (tensor<1x4x4x4xf32>)} : () -> ()

// Grouped convs stay plain (no blocked variant yet).
// CHECK:      "graph.conv"
// CHECK-NOT:  "graph.layout_transform"
// CHECK:      sym_name = "conv_to_nchwc_stays_grouped"
"func.func"() ({
^bb0(%x: tensor<1x8x3x3xf32>):
  %w = "graph.constant"() {value = dense<0.5> : tensor<8x4x1x1xf32>} : () -> tensor<8x4x1x1xf32>
  %y = "graph.conv"(%x, %w) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 2 : i64} : (tensor<1x8x3x3xf32>, tensor<8x4x1x1xf32>) -> tensor<1x8x3x3xf32>
  "func.return"(%y) : (tensor<1x8x3x3xf32>) -> ()
}) {sym_name = "conv_to_nchwc_stays_grouped", function_type = (tensor<1x8x3x3xf32>) -> (tensor<1x8x3x3xf32>)} : () -> ()

// A conv whose bias is not a constant stays plain when its output channels (6) are not whole blocks
// of 4: the padded last block reads a whole block of bias.
// CHECK:      "graph.conv"
// CHECK-NOT:  "graph.layout_transform"
// CHECK:      sym_name = "conv_to_nchwc_stays_channels"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>, %b: tensor<6xf32>):
  %w = "graph.constant"() {value = dense<0.5> : tensor<6x4x1x1xf32>} : () -> tensor<6x4x1x1xf32>
  %y = "graph.conv"(%x, %w, %b) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<6x4x1x1xf32>, tensor<6xf32>) -> tensor<1x6x3x3xf32>
  "func.return"(%y) : (tensor<1x6x3x3xf32>) -> ()
}) {sym_name = "conv_to_nchwc_stays_channels", function_type = (tensor<1x4x3x3xf32>, tensor<6xf32>) -> (tensor<1x6x3x3xf32>)} : () -> ()

// conv -> tanh -> conv: one conversion in, one out; the tanh runs on the blocked tensor.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<1x4x3x3xf32>):
// CHECK-NEXT:   %[[W1:[0-9]+]] = "graph.constant"
// CHECK-NEXT:   %[[W2:[0-9]+]] = "graph.constant"
// CHECK-NEXT:   %[[XB:[0-9]+]] = "graph.layout_transform"(%[[X]]) {src = "NCHW", dst = "NCHW4c"{{.*}}}
// CHECK-NEXT:   %[[Y1:[0-9]+]] = "graph.conv_nchwc"(%[[XB]], %[[W1]])
// CHECK-NEXT:   %[[A:[0-9]+]] = "graph.tanh"(%[[Y1]]) : (tensor<1x1x3x3x4xf32>) -> tensor<1x1x3x3x4xf32>
// CHECK-NEXT:   %[[Y2:[0-9]+]] = "graph.conv_nchwc"(%[[A]], %[[W2]])
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.layout_transform"(%[[Y2]]) {src = "NCHW4c", dst = "NCHW"{{.*}}}
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "cancel_layout_fires"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %w2 = "graph.constant"() {value = dense<-0.25> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %a = "graph.tanh"(%y1) : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %y2 = "graph.conv"(%a, %w2) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  "func.return"(%y2) : (tensor<1x4x3x3xf32>) -> ()
}) {sym_name = "cancel_layout_fires", function_type = (tensor<1x4x3x3xf32>) -> (tensor<1x4x3x3xf32>)} : () -> ()

// Different blocks are not inverse conversions.
// CHECK:      "graph.layout_transform"(%arg0) {src = "NCHW4c", dst = "NCHW"{{.*}}}
// CHECK-NEXT: "graph.layout_transform"(%{{[0-9]+}}) {src = "NCHW", dst = "NCHW2c"{{.*}}}
// CHECK:      sym_name = "cancel_layout_stays_other_block"
"func.func"() ({
^bb0(%x: tensor<1x1x2x2x4xf32>):
  %p = "graph.layout_transform"(%x) {src = "NCHW4c", dst = "NCHW"} : (tensor<1x1x2x2x4xf32>) -> tensor<1x4x2x2xf32>
  %b = "graph.layout_transform"(%p) {src = "NCHW", dst = "NCHW2c"} : (tensor<1x4x2x2xf32>) -> tensor<1x2x2x2x2xf32>
  "func.return"(%b) : (tensor<1x2x2x2x2xf32>) -> ()
}) {sym_name = "cancel_layout_stays_other_block", function_type = (tensor<1x1x2x2x4xf32>) -> (tensor<1x2x2x2x2xf32>)} : () -> ()

// A difference of two blocked values and a per-channel scale, packed to (1, 1, 1, 1, 4).  (A residual
// add would go into the second conv's epilogue: fuse_conv_epilogue_fires.)
// CHECK:      %[[Y1:[0-9]+]] = "graph.conv_nchwc"
// CHECK:      %[[Y2:[0-9]+]] = "graph.conv_nchwc"
// CHECK-NEXT: %[[S:[0-9]+]] = "graph.sub"(%[[Y1]], %[[Y2]]) : (tensor<1x1x3x3x4xf32>, tensor<1x1x3x3x4xf32>) -> tensor<1x1x3x3x4xf32>
// CHECK-NEXT: %[[C:[0-9]+]] = "graph.constant"() {value = dense<{{\[\[\[\[\[}}1.0, 2.0, 3.0, 4.0]]]]]> : tensor<1x1x1x1x4xf32>}
// CHECK-NEXT: %[[M:[0-9]+]] = "graph.mul"(%[[S]], %[[C]])
// CHECK-NEXT: "graph.layout_transform"(%[[M]]) {src = "NCHW4c", dst = "NCHW"{{.*}}}
// CHECK:      sym_name = "sink_elementwise_fires"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %w2 = "graph.constant"() {value = dense<-0.25> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %c = "graph.constant"() {value = dense<[[[1.0]], [[2.0]], [[3.0]], [[4.0]]]> : tensor<4x1x1xf32>} : () -> tensor<4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %y2 = "graph.conv"(%x, %w2) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %s = "graph.sub"(%y1, %y2) : (tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %m = "graph.mul"(%s, %c) : (tensor<1x4x3x3xf32>, tensor<4x1x1xf32>) -> tensor<1x4x3x3xf32>
  "func.return"(%m) : (tensor<1x4x3x3xf32>) -> ()
}) {sym_name = "sink_elementwise_fires", function_type = (tensor<1x4x3x3xf32>) -> (tensor<1x4x3x3xf32>)} : () -> ()

// The other operand is a plain run-time tensor: the add stays plain.
// CHECK:      %[[P:[0-9]+]] = "graph.layout_transform"(%{{[0-9]+}}) {src = "NCHW4c", dst = "NCHW"{{.*}}}
// CHECK-NEXT: "graph.add"(%[[P]], %arg1) : (tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>)
// CHECK:      sym_name = "sink_elementwise_stays_plain_operand"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>, %z: tensor<1x4x3x3xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %s = "graph.add"(%y1, %z) : (tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  "func.return"(%s) : (tensor<1x4x3x3xf32>) -> ()
}) {sym_name = "sink_elementwise_stays_plain_operand", function_type = (tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>) -> (tensor<1x4x3x3xf32>)} : () -> ()

// CHECK:      %[[Y:[0-9]+]] = "graph.conv_nchwc"
// CHECK-NEXT: %[[P:[0-9]+]] = "graph.max_pool_nchwc"(%[[Y]]) {kernel = array<i64: 2, 2>{{.*}} : (tensor<1x1x4x4x4xf32>) -> tensor<1x1x2x2x4xf32>
// CHECK-NEXT: %[[G:[0-9]+]] = "graph.global_avg_pool_nchwc"(%[[P]]) : (tensor<1x1x2x2x4xf32>) -> tensor<1x1x1x1x4xf32>
// CHECK-NEXT: "graph.layout_transform"(%[[G]]) {src = "NCHW4c", dst = "NCHW"{{.*}}}
// CHECK:      sym_name = "sink_pool_fires"
"func.func"() ({
^bb0(%x: tensor<1x4x4x4xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x4x4xf32>
  %p = "graph.max_pool"(%y1) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64>, dilations = array<i64>, ceil_mode = false} : (tensor<1x4x4x4xf32>) -> tensor<1x4x2x2xf32>
  %g = "graph.global_avg_pool"(%p) : (tensor<1x4x2x2xf32>) -> tensor<1x4x1x1xf32>
  "func.return"(%g) : (tensor<1x4x1x1xf32>) -> ()
}) {sym_name = "sink_pool_fires", function_type = (tensor<1x4x4x4xf32>) -> (tensor<1x4x1x1xf32>)} : () -> ()

// A pool of a plain input has nothing to sink.
// CHECK:      "graph.max_pool"(%arg0)
// CHECK:      sym_name = "sink_pool_stays_plain"
"func.func"() ({
^bb0(%x: tensor<1x4x4x4xf32>):
  %p = "graph.max_pool"(%x) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64>, dilations = array<i64>, ceil_mode = false} : (tensor<1x4x4x4xf32>) -> tensor<1x4x2x2xf32>
  "func.return"(%p) : (tensor<1x4x2x2xf32>) -> ()
}) {sym_name = "sink_pool_stays_plain", function_type = (tensor<1x4x4x4xf32>) -> (tensor<1x4x2x2xf32>)} : () -> ()

// Inception/DenseNet channel concat of whole blocks: concat of the blocked tensors.
// CHECK:      %[[Y1:[0-9]+]] = "graph.conv_nchwc"
// CHECK:      %[[Y2:[0-9]+]] = "graph.conv_nchwc"
// CHECK-NEXT: %[[C:[0-9]+]] = "graph.concat"(%[[Y1]], %[[Y2]]) {axis = 1 : i64} : (tensor<1x1x3x3x4xf32>, tensor<1x2x3x3x4xf32>) -> tensor<1x3x3x3x4xf32>
// CHECK-NEXT: "graph.layout_transform"(%[[C]]) {src = "NCHW4c", dst = "NCHW"{{.*}}}
// CHECK:      sym_name = "sink_concat_fires"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %w2 = "graph.constant"() {value = dense<-0.25> : tensor<8x4x1x1xf32>} : () -> tensor<8x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %y2 = "graph.conv"(%x, %w2) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<8x4x1x1xf32>) -> tensor<1x8x3x3xf32>
  %c = "graph.concat"(%y1, %y2) {axis = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<1x8x3x3xf32>) -> tensor<1x12x3x3xf32>
  "func.return"(%c) : (tensor<1x12x3x3xf32>) -> ()
}) {sym_name = "sink_concat_fires", function_type = (tensor<1x4x3x3xf32>) -> (tensor<1x12x3x3xf32>)} : () -> ()

// A concat along a spatial axis is not a concat of blocks.
// CHECK:      "graph.concat"(%{{[0-9]+}}, %{{[0-9]+}}) {axis = 2 : i64} : (tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>)
// CHECK:      sym_name = "sink_concat_stays_spatial"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %w2 = "graph.constant"() {value = dense<-0.25> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %y2 = "graph.conv"(%x, %w2) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %c = "graph.concat"(%y1, %y2) {axis = 2 : i64} : (tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>) -> tensor<1x4x6x3xf32>
  "func.return"(%c) : (tensor<1x4x6x3xf32>) -> ()
}) {sym_name = "sink_concat_stays_spatial", function_type = (tensor<1x4x3x3xf32>) -> (tensor<1x4x6x3xf32>)} : () -> ()

// A conv takes its residual add (after the bias; a zero bias is made for it) and the relu after
// that into its epilogue: one conv_nchwc is left, the add and relu gone.
// CHECK:      %[[Y1:[0-9]+]] = "graph.conv_nchwc"
// CHECK:      %[[Z:[0-9]+]] = "graph.constant"() {value = dense<0.0> : tensor<4xf32>}
// CHECK-NEXT: %[[Y2:[0-9]+]] = "graph.conv_nchwc"(%{{[0-9]+}}, %{{[0-9]+}}, %[[Z]], %[[Y1]]) {{.*}}relu = true{{.*}} : (tensor<1x1x3x3x4xf32>, tensor<1x1x1x1x4x4xf32>, tensor<4xf32>, tensor<1x1x3x3x4xf32>) -> tensor<1x1x3x3x4xf32>
// CHECK-NOT:  "graph.add"
// CHECK-NOT:  "graph.relu"
// CHECK:      sym_name = "fuse_conv_epilogue_fires"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %w2 = "graph.constant"() {value = dense<-0.25> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %y2 = "graph.conv"(%y1, %w2) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %s = "graph.add"(%y2, %y1) : (tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %r = "graph.relu"(%s) : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  "func.return"(%r) : (tensor<1x4x3x3xf32>) -> ()
}) {sym_name = "fuse_conv_epilogue_fires", function_type = (tensor<1x4x3x3xf32>) -> (tensor<1x4x3x3xf32>)} : () -> ()

// A conv whose result has another user keeps its relu apart (the other user reads the sum before it).
// CHECK:      %[[Y:[0-9]+]] = "graph.conv_nchwc"
// CHECK-NEXT: "graph.relu"(%[[Y]])
// CHECK:      sym_name = "fuse_conv_epilogue_stays_two_users"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %r = "graph.relu"(%y1) : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %s = "graph.add"(%r, %y1) : (tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  "func.return"(%s) : (tensor<1x4x3x3xf32>) -> ()
}) {sym_name = "fuse_conv_epilogue_stays_two_users", function_type = (tensor<1x4x3x3xf32>) -> (tensor<1x4x3x3xf32>)} : () -> ()

// 6 output channels with a constant bias: the last block of 4 is padded (bias padded with zeros),
// the conversion back names the 6 channels.
// CHECK:      "graph.conv_nchwc"{{.*}}out_channels = 6{{.*}} -> tensor<1x2x3x3x4xf32>
// CHECK-NEXT: "graph.layout_transform"(%{{[0-9]+}}) {src = "NCHW4c", dst = "NCHW", channels = 6 : i64} : (tensor<1x2x3x3x4xf32>) -> tensor<1x6x3x3xf32>
// CHECK:      sym_name = "conv_to_nchwc_fires_padded"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>):
  %w = "graph.constant"() {value = dense<0.5> : tensor<6x4x1x1xf32>} : () -> tensor<6x4x1x1xf32>
  %b = "graph.constant"() {value = dense<1.0> : tensor<6xf32>} : () -> tensor<6xf32>
  %y = "graph.conv"(%x, %w, %b) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<6x4x1x1xf32>, tensor<6xf32>) -> tensor<1x6x3x3xf32>
  "func.return"(%y) : (tensor<1x6x3x3xf32>) -> ()
}) {sym_name = "conv_to_nchwc_fires_padded", function_type = (tensor<1x4x3x3xf32>) -> (tensor<1x6x3x3xf32>)} : () -> ()

// A global mean over the spatial dims (torchvision's pooling) runs on the blocked tensor.
// CHECK:      %[[Y:[0-9]+]] = "graph.conv_nchwc"
// CHECK-NEXT: %[[G:[0-9]+]] = "graph.global_avg_pool_nchwc"(%[[Y]]) : (tensor<1x1x4x4x4xf32>) -> tensor<1x1x1x1x4xf32>
// CHECK-NEXT: "graph.layout_transform"(%[[G]]) {src = "NCHW4c", dst = "NCHW"{{.*}}}
// CHECK:      sym_name = "sink_reduce_mean_fires"
"func.func"() ({
^bb0(%x: tensor<1x4x4x4xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x4x4xf32>
  %g = "graph.reduce_mean"(%y1) {axes = array<i64: 2, 3>, keepdims = true} : (tensor<1x4x4x4xf32>) -> tensor<1x4x1x1xf32>
  "func.return"(%g) : (tensor<1x4x1x1xf32>) -> ()
}) {sym_name = "sink_reduce_mean_fires", function_type = (tensor<1x4x4x4xf32>) -> (tensor<1x4x1x1xf32>)} : () -> ()

// A mean over the channels is not a pooling: it reads the plain tensor.
// CHECK:      "graph.conv_nchwc"
// CHECK-NEXT: %[[P:[0-9]+]] = "graph.layout_transform"
// CHECK-NEXT: "graph.reduce_mean"(%[[P]]) {axes = array<i64: 1>
// CHECK:      sym_name = "sink_reduce_mean_stays_channels"
"func.func"() ({
^bb0(%x: tensor<1x4x4x4xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x4x4xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x4x4xf32>
  %g = "graph.reduce_mean"(%y1) {axes = array<i64: 1>, keepdims = true} : (tensor<1x4x4x4xf32>) -> tensor<1x1x4x4xf32>
  "func.return"(%g) : (tensor<1x1x4x4xf32>) -> ()
}) {sym_name = "sink_reduce_mean_stays_channels", function_type = (tensor<1x4x4x4xf32>) -> (tensor<1x1x4x4xf32>)} : () -> ()

// A conv's SiLU (its result times its sigmoid) goes into its epilogue.
// CHECK:      "graph.conv_nchwc"{{.*}}silu = true
// CHECK-NOT:  "graph.sigmoid"
// CHECK:      sym_name = "fuse_conv_epilogue_fires_silu"
"func.func"() ({
^bb0(%x: tensor<1x4x3x3xf32>):
  %w1 = "graph.constant"() {value = dense<0.5> : tensor<4x4x1x1xf32>} : () -> tensor<4x4x1x1xf32>
  %y1 = "graph.conv"(%x, %w1) {strides = array<i64>, pads = array<i64>, dilations = array<i64>, groups = 1 : i64} : (tensor<1x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %s = "graph.sigmoid"(%y1) : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %m = "graph.mul"(%s, %y1) : (tensor<1x4x3x3xf32>, tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  "func.return"(%m) : (tensor<1x4x3x3xf32>) -> ()
}) {sym_name = "fuse_conv_epilogue_fires_silu", function_type = (tensor<1x4x3x3xf32>) -> (tensor<1x4x3x3xf32>)} : () -> ()
