"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<2x16xf32>):
    %0 = "graph.constant"() {value = dense_resource<tf_4fb4f62d83ec9bc16cf70cf78115d790> : tensor<16x8xf32>} : () -> tensor<16x8xf32>
    %1 = "graph.constant"() {value = dense<[0.38389456, -0.3052433, -0.09288698, -0.7082447, -0.41370112, 1.3779038, 0.5206216, -0.39071202]> : tensor<8xf32>} : () -> tensor<8xf32>
    %2 = "structured.kernel"(%arg0, %0, %1) ({
    ^bb0(%arg1: tensor<2x16xf32>, %arg2: tensor<16x8xf32>, %arg3: tensor<8xf32>):
      %3 = "structured.compute"() ({
      ^bb0(%arg4: index, %arg5: index, %arg6: index):
        %4 = "structured.read"(%arg1, %arg4, %arg6) : (tensor<2x16xf32>, index, index) -> f32
        %5 = "structured.read"(%arg2, %arg6, %arg5) : (tensor<16x8xf32>, index, index) -> f32
        %6 = "scalar.mul"(%4, %5) : (f32, f32) -> f32
        "structured.yield"(%6) : (f32) -> ()
      }) {domain = array<i64: 2, 8, 16>, iterators = "ppr", combiner = "add", dtype = f32} : () -> tensor<2x8xf32>
      %7 = "structured.compute"() ({
      ^bb0(%arg7: index, %arg8: index):
        %8 = "structured.read"(%3, %arg7, %arg8) : (tensor<2x8xf32>, index, index) -> f32
        %9 = "structured.read"(%arg3, %arg8) : (tensor<8xf32>, index) -> f32
        %10 = "scalar.add"(%8, %9) : (f32, f32) -> f32
        %11 = "scalar.tanh"(%10) : (f32) -> f32
        "structured.yield"(%11) : (f32) -> ()
      }) {domain = array<i64: 2, 8>, iterators = "pp", combiner = "none", dtype = f32} : () -> tensor<2x8xf32>
      "structured.return"(%7) : (tensor<2x8xf32>) -> ()
    }) {sym_name = "gemm_tanh", tf.fusion = "out_elementwise_fusable"} : (tensor<2x16xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    %12 = "structured.kernel"(%2) ({
    ^bb0(%arg9: tensor<2x8xf32>):
      %13 = "structured.compute"() ({
      ^bb0(%arg10: index, %arg11: index, %arg12: index):
        %14 = "structured.read"(%arg9, %arg10, %arg12) : (tensor<2x8xf32>, index, index) -> f32
        "structured.yield"(%14) : (f32) -> ()
      }) {domain = array<i64: 2, 1, 8>, iterators = "ppr", combiner = "max", dtype = f32} : () -> tensor<2x1xf32>
      %15 = "structured.compute"() ({
      ^bb0(%arg13: index, %arg14: index, %arg15: index):
        %16 = "structured.read"(%arg9, %arg13, %arg15) : (tensor<2x8xf32>, index, index) -> f32
        %17 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %18 = "structured.read"(%13, %arg13, %17) : (tensor<2x1xf32>, index, index) -> f32
        %19 = "scalar.sub"(%16, %18) : (f32, f32) -> f32
        %20 = "scalar.exp"(%19) : (f32) -> f32
        "structured.yield"(%20) : (f32) -> ()
      }) {domain = array<i64: 2, 1, 8>, iterators = "ppp", combiner = "none", dtype = f32} : () -> tensor<2x1x8xf32>
      %21 = "structured.compute"() ({
      ^bb0(%arg16: index, %arg17: index, %arg18: index):
        %22 = "structured.read"(%15, %arg16, %arg17, %arg18) : (tensor<2x1x8xf32>, index, index, index) -> f32
        "structured.yield"(%22) : (f32) -> ()
      }) {domain = array<i64: 2, 1, 8>, iterators = "ppr", combiner = "add", dtype = f32} : () -> tensor<2x1xf32>
      %23 = "structured.compute"() ({
      ^bb0(%arg19: index, %arg20: index):
        %24 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %25 = "structured.read"(%15, %arg19, %24, %arg20) : (tensor<2x1x8xf32>, index, index, index) -> f32
        %26 = "scalar.const"() {value = 0 : i64, type = index} : () -> index
        %27 = "structured.read"(%21, %arg19, %26) : (tensor<2x1xf32>, index, index) -> f32
        %28 = "scalar.div"(%25, %27) : (f32, f32) -> f32
        "structured.yield"(%28) : (f32) -> ()
      }) {domain = array<i64: 2, 8>, iterators = "pp", combiner = "none", dtype = f32} : () -> tensor<2x8xf32>
      "structured.return"(%23) : (tensor<2x8xf32>) -> ()
    }) {sym_name = "softmax", tf.fusion = "reduction"} : (tensor<2x8xf32>) -> tensor<2x8xf32>
    "func.return"(%12) : (tensor<2x8xf32>) -> ()
  }) {tf.arg_names = ["x"], sym_name = "main", function_type = (tensor<2x16xf32>) -> (tensor<2x8xf32>)} : () -> ()
}) : () -> ()

{-#
  dialect_resources: {
    builtin: {
      tf_4fb4f62d83ec9bc16cf70cf78115d790: "0x04000000a138133f246197bf82451d3face22d3e8ff8583e85113e3ebff8433e438a233e7cc337bec96873bfaf0e5fbd5fc1cdbecb420a3f34d913be21f52a3dc77fd9be27b882be2bf5bcbbc6203ebf66f3193e693c59bdabc517bfa67c99bf6257833eef5c18bea2ae87be85d2f1bd4982683f1afccbbc7165313d67583ebf02dc523f7ee0ea3e5291083f7b44c33ce3a9ea3ebeec3d3ef6f99c3e79d89bbd5ca83cbf80b1033fc2ac77bff5b1f5bd586ed1bd717c05bfa3f59c3e3b23cdbd35ad5fbe5914853e2b0274be19ca313febf1333ec6db72beaddd78bf756427bf451d0b3f3546cfbcc5f510be1256523fda2d24bfabed95be03f771be331a963e71dda9bef4089dbe89754dbfa4b6ba3e265fce3ea7e773be9642a73d6e7525bf7e9171beb260303ffffc8a3dffdc933f7785c9be858d943eae32c8bd70d9903e454d6cbbaeaa8fbe221cdebef239c43f16671ebdf81081bfb00aa6be0394ad3e8d0080be1a232e3f964e003fa9fe9bbd4ac671be529d00bf0231b3bef48f3cbfa8291a3f159c4b3f22c920bf634117bf995e62bf27bff6be39cec6bf323612bf5301263ffdfb30be08c6da3e275a7abe8c5d613fcdffcb3dce9543beea5aa33f2d2126be0c511cbf7fc1ce3d7d119fbc537d083f33f0ebbeee01ce3eb94dda3e8eedaabe7029a73d29acd4beb821963f7e42b4be60f967be616d08bfcf3631beaf8b40bb"
    }
  }
#-}
