"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<?x16xf32, "N">):
    %0 = "graph.constant"() {value = dense_resource<tf_4fb4f62d83ec9bc16cf70cf78115d790> : tensor<16x8xf32>} : () -> tensor<16x8xf32>
    %1 = "graph.matmul"(%arg0, %0) : (tensor<?x16xf32, "N">, tensor<16x8xf32>) -> tensor<?x8xf32, "N">
    %2 = "graph.constant"() {value = dense<[0.38389456, -0.3052433, -0.09288698, -0.7082447, -0.41370112, 1.3779038, 0.5206216, -0.39071202]> : tensor<8xf32>} : () -> tensor<8xf32>
    %3 = "graph.add"(%1, %2) : (tensor<?x8xf32, "N">, tensor<8xf32>) -> tensor<?x8xf32, "N">
    %4 = "graph.tanh"(%3) : (tensor<?x8xf32, "N">) -> tensor<?x8xf32, "N">
    %5 = "graph.softmax"(%4) {axis = 1 : i64} : (tensor<?x8xf32, "N">) -> tensor<?x8xf32, "N">
    "func.return"(%5) : (tensor<?x8xf32, "N">) -> ()
  }) {tf.arg_names = ["x"], tf.result_names = ["y"], sym_name = "main", function_type = (tensor<?x16xf32, "N">) -> (tensor<?x8xf32, "N">), tf.symbols = "[{\"divisor\": 1, \"hi\": null, \"hint\": 1, \"lo\": 1, \"name\": \"N\"}]"} : () -> ()
}) : () -> ()

{-#
  dialect_resources: {
    builtin: {
      tf_4fb4f62d83ec9bc16cf70cf78115d790: "0x04000000a138133f246197bf82451d3face22d3e8ff8583e85113e3ebff8433e438a233e7cc337bec96873bfaf0e5fbd5fc1cdbecb420a3f34d913be21f52a3dc77fd9be27b882be2bf5bcbbc6203ebf66f3193e693c59bdabc517bfa67c99bf6257833eef5c18bea2ae87be85d2f1bd4982683f1afccbbc7165313d67583ebf02dc523f7ee0ea3e5291083f7b44c33ce3a9ea3ebeec3d3ef6f99c3e79d89bbd5ca83cbf80b1033fc2ac77bff5b1f5bd586ed1bd717c05bfa3f59c3e3b23cdbd35ad5fbe5914853e2b0274be19ca313febf1333ec6db72beaddd78bf756427bf451d0b3f3546cfbcc5f510be1256523fda2d24bfabed95be03f771be331a963e71dda9bef4089dbe89754dbfa4b6ba3e265fce3ea7e773be9642a73d6e7525bf7e9171beb260303ffffc8a3dffdc933f7785c9be858d943eae32c8bd70d9903e454d6cbbaeaa8fbe221cdebef239c43f16671ebdf81081bfb00aa6be0394ad3e8d0080be1a232e3f964e003fa9fe9bbd4ac671be529d00bf0231b3bef48f3cbfa8291a3f159c4b3f22c920bf634117bf995e62bf27bff6be39cec6bf323612bf5301263ffdfb30be08c6da3e275a7abe8c5d613fcdffcb3dce9543beea5aa33f2d2126be0c511cbf7fc1ce3d7d119fbc537d083f33f0ebbeee01ce3eb94dda3e8eedaabe7029a73d29acd4beb821963f7e42b4be60f967be616d08bfcf3631beaf8b40bb"
    }
  }
#-}
