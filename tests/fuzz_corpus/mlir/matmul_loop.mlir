"builtin.module"() ({
  "loop.func"() ({
  ^bb0(%arg0: memref<2x16xf32>, %arg1: memref<16x8xf32>, %arg2: memref<8xf32>, %arg3: memref<2x8xf32>):
    %0 = "loop.alloc"() {type = memref<2x8xf32>, tag = "0.buf"} : () -> memref<2x8xf32>
    "loop.for"() ({
    ^bb0(%arg4: index):
      "loop.for"() ({
      ^bb0(%arg5: index):
        %1 = "loop.alloc"() {type = memref<f32>, tag = "0.acc"} : () -> memref<f32>
        %2 = "scalar.const"() {value = 0.0 : f64, type = f32} : () -> f32
        "loop.store"(%2, %1) : (f32, memref<f32>) -> ()
        "loop.for"() ({
        ^bb0(%arg6: index):
          %3 = "loop.load"(%arg0, %arg4, %arg6) : (memref<2x16xf32>, index, index) -> f32
          %4 = "loop.load"(%arg1, %arg6, %arg5) : (memref<16x8xf32>, index, index) -> f32
          %5 = "scalar.mul"(%3, %4) : (f32, f32) -> f32
          %6 = "loop.load"(%1) : (memref<f32>) -> f32
          %7 = "scalar.add"(%6, %5) : (f32, f32) -> f32
          "loop.store"(%7, %1) : (f32, memref<f32>) -> ()
        }) {lb = 0 : i64, ub = 16 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "0.2", unroll = 0 : i64} : () -> ()
        %8 = "loop.load"(%1) : (memref<f32>) -> f32
        "loop.store"(%8, %0, %arg4, %arg5) : (f32, memref<2x8xf32>, index, index) -> ()
      }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 2 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.0", unroll = 0 : i64} : () -> ()
    "loop.for"() ({
    ^bb0(%arg7: index):
      "loop.for"() ({
      ^bb0(%arg8: index):
        %9 = "loop.load"(%0, %arg7, %arg8) : (memref<2x8xf32>, index, index) -> f32
        %10 = "loop.load"(%arg2, %arg8) : (memref<8xf32>, index) -> f32
        %11 = "scalar.add"(%9, %10) : (f32, f32) -> f32
        %12 = "scalar.tanh"(%11) : (f32) -> f32
        "loop.store"(%12, %arg3, %arg7, %arg8) : (f32, memref<2x8xf32>, index, index) -> ()
      }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 2 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.0", unroll = 0 : i64} : () -> ()
    "loop.return"() : () -> ()
  }) {sym_name = "gemm_tanh", num_inputs = 3 : i64} : () -> ()
  "loop.func"() ({
  ^bb0(%arg9: memref<2x8xf32>, %arg10: memref<2x8xf32>):
    %13 = "loop.alloc"() {type = memref<2x1xf32>, tag = "0.buf"} : () -> memref<2x1xf32>
    "loop.for"() ({
    ^bb0(%arg11: index):
      "loop.for"() ({
      ^bb0(%arg12: index):
        %14 = "loop.alloc"() {type = memref<f32>, tag = "0.acc"} : () -> memref<f32>
        %15 = "scalar.const"() {value = 0xFFF0000000000000 : f64, type = f32} : () -> f32
        "loop.store"(%15, %14) : (f32, memref<f32>) -> ()
        "loop.for"() ({
        ^bb0(%arg13: index):
          %16 = "loop.load"(%arg9, %arg11, %arg13) : (memref<2x8xf32>, index, index) -> f32
          %17 = "loop.load"(%14) : (memref<f32>) -> f32
          %18 = "scalar.max"(%17, %16) : (f32, f32) -> f32
          "loop.store"(%18, %14) : (f32, memref<f32>) -> ()
        }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "0.2", unroll = 0 : i64} : () -> ()
        %19 = "loop.load"(%14) : (memref<f32>) -> f32
        "loop.store"(%19, %13, %arg11, %arg12) : (f32, memref<2x1xf32>, index, index) -> ()
      }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 2 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.0", unroll = 0 : i64} : () -> ()
    %20 = "loop.alloc"() {type = memref<2x1x8xf32>, tag = "1.buf"} : () -> memref<2x1x8xf32>
    "loop.for"() ({
    ^bb0(%arg14: index):
      "loop.for"() ({
      ^bb0(%arg15: index):
        "loop.for"() ({
        ^bb0(%arg16: index):
          %21 = "loop.load"(%arg9, %arg14, %arg16) : (memref<2x8xf32>, index, index) -> f32
          %22 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
          %23 = "loop.load"(%13, %arg14, %22) : (memref<2x1xf32>, index, index) -> f32
          %24 = "scalar.sub"(%21, %23) : (f32, f32) -> f32
          %25 = "scalar.exp"(%24) : (f32) -> f32
          "loop.store"(%25, %20, %arg14, %arg15, %arg16) : (f32, memref<2x1x8xf32>, index, index, index) -> ()
        }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.2", unroll = 0 : i64} : () -> ()
      }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 2 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.0", unroll = 0 : i64} : () -> ()
    %26 = "loop.alloc"() {type = memref<2x1xf32>, tag = "2.buf"} : () -> memref<2x1xf32>
    "loop.for"() ({
    ^bb0(%arg17: index):
      "loop.for"() ({
      ^bb0(%arg18: index):
        %27 = "loop.alloc"() {type = memref<f32>, tag = "2.acc"} : () -> memref<f32>
        %28 = "scalar.const"() {value = 0.0 : f64, type = f32} : () -> f32
        "loop.store"(%28, %27) : (f32, memref<f32>) -> ()
        "loop.for"() ({
        ^bb0(%arg19: index):
          %29 = "loop.load"(%20, %arg17, %arg18, %arg19) : (memref<2x1x8xf32>, index, index, index) -> f32
          %30 = "loop.load"(%27) : (memref<f32>) -> f32
          %31 = "scalar.add"(%30, %29) : (f32, f32) -> f32
          "loop.store"(%31, %27) : (f32, memref<f32>) -> ()
        }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "2.2", unroll = 0 : i64} : () -> ()
        %32 = "loop.load"(%27) : (memref<f32>) -> f32
        "loop.store"(%32, %26, %arg17, %arg18) : (f32, memref<2x1xf32>, index, index) -> ()
      }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "2.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 2 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "2.0", unroll = 0 : i64} : () -> ()
    "loop.for"() ({
    ^bb0(%arg20: index):
      "loop.for"() ({
      ^bb0(%arg21: index):
        %33 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %34 = "loop.load"(%20, %arg20, %33, %arg21) : (memref<2x1x8xf32>, index, index, index) -> f32
        %35 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %36 = "loop.load"(%26, %arg20, %35) : (memref<2x1xf32>, index, index) -> f32
        %37 = "scalar.div"(%34, %36) : (f32, f32) -> f32
        "loop.store"(%37, %arg10, %arg20, %arg21) : (f32, memref<2x8xf32>, index, index) -> ()
      }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "3.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 2 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "3.0", unroll = 0 : i64} : () -> ()
    "loop.return"() : () -> ()
  }) {sym_name = "softmax", num_inputs = 1 : i64} : () -> ()
}) : () -> ()
