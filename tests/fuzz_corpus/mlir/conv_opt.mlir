"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<1x3x8x8xf32>):
    %0 = "graph.constant"() {value = dense_resource<tf_928a6ad55bb4cdb9179ceec6f776f836> : tensor<4x3x3x3xf32>} : () -> tensor<4x3x3x3xf32>
    %1 = "graph.constant"() {value = dense<[-1.1250706, 0.1931848, -0.29082042, 0.05463985]> : tensor<4xf32>} : () -> tensor<4xf32>
    %2 = "graph.conv"(%arg0, %0, %1) {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
    %3 = "graph.relu"(%2) : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
    %4 = "graph.max_pool"(%3) {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, ceil_mode = false} : (tensor<1x4x8x8xf32>) -> tensor<1x4x4x4xf32>
    %5 = "graph.global_avg_pool"(%4) : (tensor<1x4x4x4xf32>) -> tensor<1x4x1x1xf32>
    %6 = "graph.squeeze"(%5) {axes = array<i64: 2, 3>} : (tensor<1x4x1x1xf32>) -> tensor<1x4xf32>
    %7 = "graph.constant"() {value = dense_resource<tf_a03d5ae96946d9664fe552b9345274ee> : tensor<5x4xf32>} : () -> tensor<5x4xf32>
    %8 = "graph.constant"() {value = dense<[0.17933598, 0.6612287, -0.0069573345, 0.52091986, 0.7011324]> : tensor<5xf32>} : () -> tensor<5xf32>
    %9 = "graph.gemm"(%6, %7, %8) {alpha = 1.0 : f64, beta = 1.0 : f64, trans_a = false, trans_b = true} : (tensor<1x4xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<1x5xf32>
    "func.return"(%9) : (tensor<1x5xf32>) -> ()
  }) {tf.arg_names = ["x"], tf.result_names = ["y"], sym_name = "main", function_type = (tensor<1x3x8x8xf32>) -> (tensor<1x5xf32>)} : () -> ()
}) : () -> ()

{-#
  dialect_resources: {
    builtin: {
      tf_928a6ad55bb4cdb9179ceec6f776f836: "0x040000006cbf803d7f4687bdbdf2a33edfd5563da12189befd22393e79e9263fe673f23efe27b4be55f921bfea8e9fbe6e45a93c4ecd94bfec0ae0bd037a1fbfe075bbbe8f548bbe18f221be3dc1523e1471053f979e83bd46e82e3f334aaabe21f9333ed249e73e8589403df855bebe32f6ebbe0a5b6abed57ae13d2b3b01bf1f32d6bde20ba3bddb748a3e9acfdb3d69f3353e5061a7be70b984bd9eb2c83ec0283f3f0f2921bf41c8413fa5452c3f0604c83eba66073e7eba20be6ca03a3fbfe97a3ff99b663f5255283f91fa363e2faa1abffaf311bbbe0ea83e07e924bf704d4a3e18175c3edb2fb23e2d9117bf5765a9be71745fbe12bc15bf9ba35e3f03e87dbeb56e283e9f6304be3daf4a3f9701293f6623a23e4e068dbf551cd53c0f06af3ed081003f282f9ebeab37693fe20329bfe759a9be705fef3e7eedc83c3327803f2d0bc13d0219a2be015041beadaa0bbf068b23bfa662a13e48c7943e1ab4253fd82dc1beac34583f7b2413be3686493f1b965dbea248bcbebdc7ff3da806043fb2dfa43d38e595be16ad2bbf046533bfd3af803ed55dfd3ed73ca8bdca8409bfb17fdf3ef3e323bfa18bb6be07fb9e3e",
      tf_a03d5ae96946d9664fe552b9345274ee: "0x0400000067091bbd13f7ce3d41b5b13e8524c2bebde2353f48e1b93eddfed73e431a153f629fc93e8a15d83ed3d01a3d87a036bf43498abde9fec4be671c36bfed53043e758c91bea2d003bf0f8105bff76d093e"
    }
  }
#-}
