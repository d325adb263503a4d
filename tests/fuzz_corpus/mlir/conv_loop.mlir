"builtin.module"() ({
  "loop.func"() ({
  ^bb0(%arg0: memref<1x3x8x8xf32>, %arg1: memref<4x3x3x3xf32>, %arg2: memref<4xf32>, %arg3: memref<1x4x8x8xf32>):
    %0 = "loop.alloc"() {type = memref<1x4x8x8xf32>, tag = "0.buf"} : () -> memref<1x4x8x8xf32>
    "loop.for"() ({
    ^bb0(%arg4: index):
      "loop.for"() ({
      ^bb0(%arg5: index):
        "loop.for"() ({
        ^bb0(%arg6: index):
          "loop.for"() ({
          ^bb0(%arg7: index):
            %1 = "loop.alloc"() {type = memref<f32>, tag = "0.acc"} : () -> memref<f32>
            %2 = "scalar.const"() {value = 0.0 : f64, type = f32} : () -> f32
            "loop.store"(%2, %1) : (f32, memref<f32>) -> ()
            "loop.for"() ({
            ^bb0(%arg8: index):
              "loop.for"() ({
              ^bb0(%arg9: index):
                "loop.for"() ({
                ^bb0(%arg10: index):
                  %3 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
                  %4 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
                  %5 = "scalar.add"(%arg6, %arg9) : (index, index) -> index
                  %6 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
                  %7 = "scalar.sub"(%5, %6) : (index, index) -> index
                  %8 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
                  %9 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
                  %10 = "scalar.add"(%arg7, %arg10) : (index, index) -> index
                  %11 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
                  %12 = "scalar.sub"(%10, %11) : (index, index) -> index
                  %13 = "loop.load"(%arg0, %arg4, %arg8, %7, %12) {pad = 0.0 : f64} : (memref<1x3x8x8xf32>, index, index, index, index) -> f32
                  %14 = "loop.load"(%arg1, %arg5, %arg8, %arg9, %arg10) : (memref<4x3x3x3xf32>, index, index, index, index) -> f32
                  %15 = "scalar.mul"(%13, %14) : (f32, f32) -> f32
                  %16 = "loop.load"(%1) : (memref<f32>) -> f32
                  %17 = "scalar.add"(%16, %15) : (f32, f32) -> f32
                  "loop.store"(%17, %1) : (f32, memref<f32>) -> ()
                }) {lb = 0 : i64, ub = 3 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "0.6", unroll = 0 : i64} : () -> ()
              }) {lb = 0 : i64, ub = 3 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "0.5", unroll = 0 : i64} : () -> ()
            }) {lb = 0 : i64, ub = 3 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "0.4", unroll = 0 : i64} : () -> ()
            %18 = "loop.load"(%1) : (memref<f32>) -> f32
            "loop.store"(%18, %0, %arg4, %arg5, %arg6, %arg7) : (f32, memref<1x4x8x8xf32>, index, index, index, index) -> ()
          }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.3", unroll = 0 : i64} : () -> ()
        }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.2", unroll = 0 : i64} : () -> ()
      }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.0", unroll = 0 : i64} : () -> ()
    "loop.for"() ({
    ^bb0(%arg11: index):
      "loop.for"() ({
      ^bb0(%arg12: index):
        "loop.for"() ({
        ^bb0(%arg13: index):
          "loop.for"() ({
          ^bb0(%arg14: index):
            %19 = "loop.load"(%0, %arg11, %arg12, %arg13, %arg14) : (memref<1x4x8x8xf32>, index, index, index, index) -> f32
            %20 = "loop.load"(%arg2, %arg12) : (memref<4xf32>, index) -> f32
            %21 = "scalar.add"(%19, %20) : (f32, f32) -> f32
            %22 = "scalar.relu"(%21) : (f32) -> f32
            "loop.store"(%22, %arg3, %arg11, %arg12, %arg13, %arg14) : (f32, memref<1x4x8x8xf32>, index, index, index, index) -> ()
          }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.3", unroll = 0 : i64} : () -> ()
        }) {lb = 0 : i64, ub = 8 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.2", unroll = 0 : i64} : () -> ()
      }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.0", unroll = 0 : i64} : () -> ()
    "loop.return"() : () -> ()
  }) {sym_name = "conv_relu", num_inputs = 3 : i64} : () -> ()
  "loop.func"() ({
  ^bb0(%arg15: memref<1x4x8x8xf32>, %arg16: memref<1x4x1x1xf32>):
    %23 = "loop.alloc"() {type = memref<1x4x4x4xf32>, tag = "0.buf"} : () -> memref<1x4x4x4xf32>
    "loop.for"() ({
    ^bb0(%arg17: index):
      "loop.for"() ({
      ^bb0(%arg18: index):
        "loop.for"() ({
        ^bb0(%arg19: index):
          "loop.for"() ({
          ^bb0(%arg20: index):
            %24 = "loop.alloc"() {type = memref<f32>, tag = "0.acc"} : () -> memref<f32>
            %25 = "scalar.const"() {value = 0xFFF0000000000000 : f64, type = f32} : () -> f32
            "loop.store"(%25, %24) : (f32, memref<f32>) -> ()
            "loop.for"() ({
            ^bb0(%arg21: index):
              "loop.for"() ({
              ^bb0(%arg22: index):
                %26 = "scalar.const"() {value = 2 : i64, type = index} : () -> index
                %27 = "scalar.mul"(%arg19, %26) : (index, index) -> index
                %28 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
                %29 = "scalar.add"(%27, %arg21) : (index, index) -> index
                %30 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
                %31 = "scalar.const"() {value = 2 : i64, type = index} : () -> index
                %32 = "scalar.mul"(%arg20, %31) : (index, index) -> index
                %33 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
                %34 = "scalar.add"(%32, %arg22) : (index, index) -> index
                %35 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
                %36 = "loop.load"(%arg15, %arg17, %arg18, %29, %34) : (memref<1x4x8x8xf32>, index, index, index, index) -> f32
                %37 = "loop.load"(%24) : (memref<f32>) -> f32
                %38 = "scalar.max"(%37, %36) : (f32, f32) -> f32
                "loop.store"(%38, %24) : (f32, memref<f32>) -> ()
              }) {lb = 0 : i64, ub = 2 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "0.5", unroll = 0 : i64} : () -> ()
            }) {lb = 0 : i64, ub = 2 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "0.4", unroll = 0 : i64} : () -> ()
            %39 = "loop.load"(%24) : (memref<f32>) -> f32
            "loop.store"(%39, %23, %arg17, %arg18, %arg19, %arg20) : (f32, memref<1x4x4x4xf32>, index, index, index, index) -> ()
          }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.3", unroll = 0 : i64} : () -> ()
        }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.2", unroll = 0 : i64} : () -> ()
      }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.0", unroll = 0 : i64} : () -> ()
    %40 = "loop.alloc"() {type = memref<1x4x1x1xf32>, tag = "1.buf"} : () -> memref<1x4x1x1xf32>
    "loop.for"() ({
    ^bb0(%arg23: index):
      "loop.for"() ({
      ^bb0(%arg24: index):
        "loop.for"() ({
        ^bb0(%arg25: index):
          "loop.for"() ({
          ^bb0(%arg26: index):
            %41 = "loop.alloc"() {type = memref<f32>, tag = "1.acc"} : () -> memref<f32>
            %42 = "scalar.const"() {value = 0.0 : f64, type = f32} : () -> f32
            "loop.store"(%42, %41) : (f32, memref<f32>) -> ()
            "loop.for"() ({
            ^bb0(%arg27: index):
              "loop.for"() ({
              ^bb0(%arg28: index):
                %43 = "loop.load"(%23, %arg23, %arg24, %arg27, %arg28) : (memref<1x4x4x4xf32>, index, index, index, index) -> f32
                %44 = "loop.load"(%41) : (memref<f32>) -> f32
                %45 = "scalar.add"(%44, %43) : (f32, f32) -> f32
                "loop.store"(%45, %41) : (f32, memref<f32>) -> ()
              }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "1.5", unroll = 0 : i64} : () -> ()
            }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "1.4", unroll = 0 : i64} : () -> ()
            %46 = "loop.load"(%41) : (memref<f32>) -> f32
            "loop.store"(%46, %40, %arg23, %arg24, %arg25, %arg26) : (f32, memref<1x4x1x1xf32>, index, index, index, index) -> ()
          }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.3", unroll = 0 : i64} : () -> ()
        }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.2", unroll = 0 : i64} : () -> ()
      }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.0", unroll = 0 : i64} : () -> ()
    "loop.for"() ({
    ^bb0(%arg29: index):
      "loop.for"() ({
      ^bb0(%arg30: index):
        "loop.for"() ({
        ^bb0(%arg31: index):
          "loop.for"() ({
          ^bb0(%arg32: index):
            %47 = "loop.load"(%40, %arg29, %arg30, %arg31, %arg32) : (memref<1x4x1x1xf32>, index, index, index, index) -> f32
            %48 = "scalar.const"() {value = 16.0 : f64, type = f32} : () -> f32
            %49 = "scalar.div"(%47, %48) : (f32, f32) -> f32
            "loop.store"(%49, %arg16, %arg29, %arg30, %arg31, %arg32) : (f32, memref<1x4x1x1xf32>, index, index, index, index) -> ()
          }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "2.3", unroll = 0 : i64} : () -> ()
        }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "2.2", unroll = 0 : i64} : () -> ()
      }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "2.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "2.0", unroll = 0 : i64} : () -> ()
    "loop.return"() : () -> ()
  }) {sym_name = "max_pool_global_avg_pool", num_inputs = 1 : i64} : () -> ()
  "loop.func"() ({
  ^bb0(%arg33: memref<1x4x1x1xf32>, %arg34: memref<5x4xf32>, %arg35: memref<5xf32>, %arg36: memref<1x5xf32>):
    %50 = "loop.alloc"() {type = memref<1x5xf32>, tag = "0.buf"} : () -> memref<1x5xf32>
    "loop.for"() ({
    ^bb0(%arg37: index):
      "loop.for"() ({
      ^bb0(%arg38: index):
        %51 = "loop.alloc"() {type = memref<f32>, tag = "0.acc"} : () -> memref<f32>
        %52 = "scalar.const"() {value = 0.0 : f64, type = f32} : () -> f32
        "loop.store"(%52, %51) : (f32, memref<f32>) -> ()
        "loop.for"() ({
        ^bb0(%arg39: index):
          %53 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
          %54 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
          %55 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
          %56 = "loop.load"(%arg33, %53, %arg39, %54, %55) : (memref<1x4x1x1xf32>, index, index, index, index) -> f32
          %57 = "loop.load"(%arg34, %arg38, %arg39) : (memref<5x4xf32>, index, index) -> f32
          %58 = "scalar.mul"(%56, %57) : (f32, f32) -> f32
          %59 = "loop.load"(%51) : (memref<f32>) -> f32
          %60 = "scalar.add"(%59, %58) : (f32, f32) -> f32
          "loop.store"(%60, %51) : (f32, memref<f32>) -> ()
        }) {lb = 0 : i64, ub = 4 : i64, step = 1 : i64, kind = "serial", reduction = true, tag = "0.2", unroll = 0 : i64} : () -> ()
        %61 = "loop.load"(%51) : (memref<f32>) -> f32
        "loop.store"(%61, %50, %arg37, %arg38) : (f32, memref<1x5xf32>, index, index) -> ()
      }) {lb = 0 : i64, ub = 5 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.0", unroll = 0 : i64} : () -> ()
    "loop.for"() ({
    ^bb0(%arg40: index):
      "loop.for"() ({
      ^bb0(%arg41: index):
        %62 = "loop.load"(%50, %arg40, %arg41) : (memref<1x5xf32>, index, index) -> f32
        %63 = "loop.load"(%arg35, %arg41) : (memref<5xf32>, index) -> f32
        %64 = "scalar.add"(%62, %63) : (f32, f32) -> f32
        "loop.store"(%64, %arg36, %arg40, %arg41) : (f32, memref<1x5xf32>, index, index) -> ()
      }) {lb = 0 : i64, ub = 5 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.1", unroll = 0 : i64} : () -> ()
    }) {lb = 0 : i64, ub = 1 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.0", unroll = 0 : i64} : () -> ()
    "loop.return"() : () -> ()
  }) {sym_name = "squeeze_gemm", num_inputs = 3 : i64} : () -> ()
}) : () -> ()
