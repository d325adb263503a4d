"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<1x3x8x8xf32>):
    %0 = "graph.constant"() {value = dense_resource<tf_928a6ad55bb4cdb9179ceec6f776f836> : tensor<4x3x3x3xf32>} : () -> tensor<4x3x3x3xf32>
    %1 = "graph.constant"() {value = dense<[-1.1250706, 0.1931848, -0.29082042, 0.05463985]> : tensor<4xf32>} : () -> tensor<4xf32>
    %2 = "structured.kernel"(%arg0, %0, %1) ({
    ^bb0(%arg1: tensor<1x3x8x8xf32>, %arg2: tensor<4x3x3x3xf32>, %arg3: tensor<4xf32>):
      %3 = "structured.compute"() ({
      ^bb0(%arg4: index, %arg5: index, %arg6: index, %arg7: index, %arg8: index, %arg9: index, %arg10: index):
        %4 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
        %5 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
        %6 = "scalar.add"(%arg6, %arg9) : (index, index) -> index
        %7 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
        %8 = "scalar.sub"(%6, %7) : (index, index) -> index
        %9 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
        %10 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
        %11 = "scalar.add"(%arg7, %arg10) : (index, index) -> index
        %12 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
        %13 = "scalar.sub"(%11, %12) : (index, index) -> index
        %14 = "structured.read"(%arg1, %arg4, %arg8, %8, %13) {pad = 0.0 : f64} : (tensor<1x3x8x8xf32>, index, index, index, index) -> f32
        %15 = "structured.read"(%arg2, %arg5, %arg8, %arg9, %arg10) : (tensor<4x3x3x3xf32>, index, index, index, index) -> f32
        %16 = "scalar.mul"(%14, %15) : (f32, f32) -> f32
        "structured.yield"(%16) : (f32) -> ()
      }) {domain = array<i64: 1, 4, 8, 8, 3, 3, 3>, iterators = "pppprrr", combiner = "add", dtype = f32} : () -> tensor<1x4x8x8xf32>
      %17 = "structured.compute"() ({
      ^bb0(%arg11: index, %arg12: index, %arg13: index, %arg14: index):
        %18 = "structured.read"(%3, %arg11, %arg12, %arg13, %arg14) : (tensor<1x4x8x8xf32>, index, index, index, index) -> f32
        %19 = "structured.read"(%arg3, %arg12) : (tensor<4xf32>, index) -> f32
        %20 = "scalar.add"(%18, %19) : (f32, f32) -> f32
        %21 = "scalar.relu"(%20) : (f32) -> f32
        "structured.yield"(%21) : (f32) -> ()
      }) {domain = array<i64: 1, 4, 8, 8>, iterators = "pppp", combiner = "none", dtype = f32} : () -> tensor<1x4x8x8xf32>
      "structured.return"(%17) : (tensor<1x4x8x8xf32>) -> ()
    }) {sym_name = "conv_relu", tf.fusion = "out_elementwise_fusable"} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
    %22 = "structured.kernel"(%2) ({
    ^bb0(%arg15: tensor<1x4x8x8xf32>):
      %23 = "structured.compute"() ({
      ^bb0(%arg16: index, %arg17: index, %arg18: index, %arg19: index, %arg20: index, %arg21: index):
        %24 = "scalar.const"() {value = 2 : i64, type = index} : () -> index
        %25 = "scalar.mul"(%arg18, %24) : (index, index) -> index
        %26 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
        %27 = "scalar.add"(%25, %arg20) : (index, index) -> index
        %28 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %29 = "scalar.const"() {value = 2 : i64, type = index} : () -> index
        %30 = "scalar.mul"(%arg19, %29) : (index, index) -> index
        %31 = "scalar.const"() {value = 1 : i64, type = index} : () -> index
        %32 = "scalar.add"(%30, %arg21) : (index, index) -> index
        %33 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %34 = "structured.read"(%arg15, %arg16, %arg17, %27, %32) : (tensor<1x4x8x8xf32>, index, index, index, index) -> f32
        "structured.yield"(%34) : (f32) -> ()
      }) {domain = array<i64: 1, 4, 4, 4, 2, 2>, iterators = "pppprr", combiner = "max", dtype = f32} : () -> tensor<1x4x4x4xf32>
      %35 = "structured.compute"() ({
      ^bb0(%arg22: index, %arg23: index, %arg24: index, %arg25: index, %arg26: index, %arg27: index):
        %36 = "structured.read"(%23, %arg22, %arg23, %arg26, %arg27) : (tensor<1x4x4x4xf32>, index, index, index, index) -> f32
        "structured.yield"(%36) : (f32) -> ()
      }) {domain = array<i64: 1, 4, 1, 1, 4, 4>, iterators = "pppprr", combiner = "add", dtype = f32} : () -> tensor<1x4x1x1xf32>
      %37 = "structured.compute"() ({
      ^bb0(%arg28: index, %arg29: index, %arg30: index, %arg31: index):
        %38 = "structured.read"(%35, %arg28, %arg29, %arg30, %arg31) : (tensor<1x4x1x1xf32>, index, index, index, index) -> f32
        %39 = "scalar.const"() {value = 16.0 : f64, type = f32} : () -> f32
        %40 = "scalar.div"(%38, %39) : (f32, f32) -> f32
        "structured.yield"(%40) : (f32) -> ()
      }) {domain = array<i64: 1, 4, 1, 1>, iterators = "pppp", combiner = "none", dtype = f32} : () -> tensor<1x4x1x1xf32>
      "structured.return"(%37) : (tensor<1x4x1x1xf32>) -> ()
    }) {sym_name = "max_pool_global_avg_pool", tf.fusion = "reduction"} : (tensor<1x4x8x8xf32>) -> tensor<1x4x1x1xf32>
    %41 = "graph.constant"() {value = dense_resource<tf_a03d5ae96946d9664fe552b9345274ee> : tensor<5x4xf32>} : () -> tensor<5x4xf32>
    %42 = "graph.constant"() {value = dense<[0.17933598, 0.6612287, -0.0069573345, 0.52091986, 0.7011324]> : tensor<5xf32>} : () -> tensor<5xf32>
    %43 = "structured.kernel"(%22, %41, %42) ({
    ^bb0(%arg32: tensor<1x4x1x1xf32>, %arg33: tensor<5x4xf32>, %arg34: tensor<5xf32>):
      %44 = "structured.compute"() ({
      ^bb0(%arg35: index, %arg36: index, %arg37: index):
        %45 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %46 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %47 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %48 = "structured.read"(%arg32, %45, %arg37, %46, %47) : (tensor<1x4x1x1xf32>, index, index, index, index) -> f32
        %49 = "structured.read"(%arg33, %arg36, %arg37) : (tensor<5x4xf32>, index, index) -> f32
        %50 = "scalar.mul"(%48, %49) : (f32, f32) -> f32
        "structured.yield"(%50) : (f32) -> ()
      }) {domain = array<i64: 1, 5, 4>, iterators = "ppr", combiner = "add", dtype = f32} : () -> tensor<1x5xf32>
      %51 = "structured.compute"() ({
      ^bb0(%arg38: index, %arg39: index):
        %52 = "structured.read"(%44, %arg38, %arg39) : (tensor<1x5xf32>, index, index) -> f32
        %53 = "structured.read"(%arg34, %arg39) : (tensor<5xf32>, index) -> f32
        %54 = "scalar.add"(%52, %53) : (f32, f32) -> f32
        "structured.yield"(%54) : (f32) -> ()
      }) {domain = array<i64: 1, 5>, iterators = "pp", combiner = "none", dtype = f32} : () -> tensor<1x5xf32>
      "structured.return"(%51) : (tensor<1x5xf32>) -> ()
    }) {sym_name = "squeeze_gemm", tf.fusion = "out_elementwise_fusable"} : (tensor<1x4x1x1xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<1x5xf32>
    "func.return"(%43) : (tensor<1x5xf32>) -> ()
  }) {tf.arg_names = ["x"], sym_name = "main", function_type = (tensor<1x3x8x8xf32>) -> (tensor<1x5xf32>)} : () -> ()
}) : () -> ()

{-#
  dialect_resources: {
    builtin: {
      tf_928a6ad55bb4cdb9179ceec6f776f836: "0x040000006cbf803d7f4687bdbdf2a33edfd5563da12189befd22393e79e9263fe673f23efe27b4be55f921bfea8e9fbe6e45a93c4ecd94bfec0ae0bd037a1fbfe075bbbe8f548bbe18f221be3dc1523e1471053f979e83bd46e82e3f334aaabe21f9333ed249e73e8589403df855bebe32f6ebbe0a5b6abed57ae13d2b3b01bf1f32d6bde20ba3bddb748a3e9acfdb3d69f3353e5061a7be70b984bd9eb2c83ec0283f3f0f2921bf41c8413fa5452c3f0604c83eba66073e7eba20be6ca03a3fbfe97a3ff99b663f5255283f91fa363e2faa1abffaf311bbbe0ea83e07e924bf704d4a3e18175c3edb2fb23e2d9117bf5765a9be71745fbe12bc15bf9ba35e3f03e87dbeb56e283e9f6304be3daf4a3f9701293f6623a23e4e068dbf551cd53c0f06af3ed081003f282f9ebeab37693fe20329bfe759a9be705fef3e7eedc83c3327803f2d0bc13d0219a2be015041beadaa0bbf068b23bfa662a13e48c7943e1ab4253fd82dc1beac34583f7b2413be3686493f1b965dbea248bcbebdc7ff3da806043fb2dfa43d38e595be16ad2bbf046533bfd3af803ed55dfd3ed73ca8bdca8409bfb17fdf3ef3e323bfa18bb6be07fb9e3e",
      tf_a03d5ae96946d9664fe552b9345274ee: "0x0400000067091bbd13f7ce3d41b5b13e8524c2bebde2353f48e1b93eddfed73e431a153f629fc93e8a15d83ed3d01a3d87a036bf43498abde9fec4be671c36bfed53043e758c91bea2d003bf0f8105bff76d093e"
    }
  }
#-}
