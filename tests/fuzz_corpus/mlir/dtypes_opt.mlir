"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<3xf32>):
    %0 = "graph.constant"() {value = dense<[111.85, -186.3, 576.05]> : tensor<3xf32>} : () -> tensor<3xf32>
    %1 = "graph.add"(%arg0, %0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %2 = "graph.constant"() {value = dense<[true, false, true]> : tensor<3xi1>} : () -> tensor<3xi1>
    %3 = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
    %4 = "graph.select"(%2, %1, %3) : (tensor<3xi1>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %5 = "graph.cast"(%4) {dtype = i32} : (tensor<3xf32>) -> tensor<3xi32>
    "func.return"(%4, %5) : (tensor<3xf32>, tensor<3xi32>) -> ()
  }) {tf.arg_names = ["x"], tf.result_names = ["y", "yi"], sym_name = "main", function_type = (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xi32>)} : () -> ()
}) : () -> ()
