"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<?x4xf32, "n">):
    %0 = "graph.constant"() {value = dense<1.5> : tensor<f32>} : () -> tensor<f32>
    %1 = "graph.expand"(%0) {shape = ["n", 4 : i64]} : (tensor<f32>) -> tensor<?x4xf32, "n">
    %2 = "graph.add"(%arg0, %1) : (tensor<?x4xf32, "n">, tensor<?x4xf32, "n">) -> tensor<?x4xf32, "n">
    %3 = "graph.constant"() {value = dense<[1.0]> : tensor<1xf32>} : () -> tensor<1xf32>
    %4 = "graph.expand"(%3) {shape = ["n", 4 : i64]} : (tensor<1xf32>) -> tensor<?x4xf32, "n">
    %5 = "graph.mul"(%2, %4) : (tensor<?x4xf32, "n">, tensor<?x4xf32, "n">) -> tensor<?x4xf32, "n">
    %6 = "graph.iota"() {size = 4 : i64, start = 0.0 : f64, step = 1.0 : f64, dtype = i64} : () -> tensor<4xi64>
    %7 = "graph.cast"(%6) {dtype = f32} : (tensor<4xi64>) -> tensor<4xf32>
    %8 = "graph.add"(%5, %7) : (tensor<?x4xf32, "n">, tensor<4xf32>) -> tensor<?x4xf32, "n">
    %9 = "graph.reduce_sum"(%8) {axes = array<i64: 0>, keepdims = false} : (tensor<?x4xf32, "n">) -> tensor<4xf32>
    "func.return"(%8, %9) : (tensor<?x4xf32, "n">, tensor<4xf32>) -> ()
  }) {tf.arg_names = ["x"], tf.result_names = ["y", "r"], sym_name = "main", function_type = (tensor<?x4xf32, "n">) -> (tensor<?x4xf32, "n">, tensor<4xf32>), tf.symbols = "[{\"divisor\": 1, \"hi\": null, \"hint\": 1, \"lo\": 1, \"name\": \"n\"}]"} : () -> ()
}) : () -> ()
