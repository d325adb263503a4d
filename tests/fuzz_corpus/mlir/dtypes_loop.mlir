"builtin.module"() ({
  "loop.func"() ({
  ^bb0(%arg0: memref<3xf32>, %arg1: memref<3xf32>, %arg2: memref<3xi1>, %arg3: memref<3xf32>, %arg4: memref<3xf32>, %arg5: memref<3xi32>):
    "loop.for"() ({
    ^bb0(%arg6: index):
      %0 = "loop.load"(%arg2, %arg6) : (memref<3xi1>, index) -> i1
      %1 = "loop.load"(%arg0, %arg6) : (memref<3xf32>, index) -> f32
      %2 = "loop.load"(%arg1, %arg6) : (memref<3xf32>, index) -> f32
      %3 = "scalar.add"(%1, %2) : (f32, f32) -> f32
      %4 = "loop.load"(%arg3, %arg6) : (memref<3xf32>, index) -> f32
      %5 = "scalar.select"(%0, %3, %4) : (i1, f32, f32) -> f32
      "loop.store"(%5, %arg4, %arg6) : (f32, memref<3xf32>, index) -> ()
    }) {lb = 0 : i64, ub = 3 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "0.0", unroll = 0 : i64} : () -> ()
    "loop.for"() ({
    ^bb0(%arg7: index):
      %6 = "loop.load"(%arg4, %arg7) : (memref<3xf32>, index) -> f32
      %7 = "scalar.cast"(%6) {dtype = i32} : (f32) -> i32
      "loop.store"(%7, %arg5, %arg7) : (i32, memref<3xi32>, index) -> ()
    }) {lb = 0 : i64, ub = 3 : i64, step = 1 : i64, kind = "serial", reduction = false, tag = "1.0", unroll = 0 : i64} : () -> ()
    "loop.return"() : () -> ()
  }) {sym_name = "add_select_cast", num_inputs = 4 : i64} : () -> ()
}) : () -> ()
