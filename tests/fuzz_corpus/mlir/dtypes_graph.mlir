"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<3xf32>):
    %0 = "graph.constant"() {value = dense<[1, -2, 3]> : tensor<3xi8>} : () -> tensor<3xi8>
    %1 = "graph.cast"(%0) {dtype = f32} : (tensor<3xi8>) -> tensor<3xf32>
    %2 = "graph.constant"() {value = dense<[100, -200, 300]> : tensor<3xi16>} : () -> tensor<3xi16>
    %3 = "graph.cast"(%2) {dtype = f32} : (tensor<3xi16>) -> tensor<3xf32>
    %4 = "graph.constant"() {value = dense<[7, 8, 9]> : tensor<3xi32>} : () -> tensor<3xi32>
    %5 = "graph.cast"(%4) {dtype = f32} : (tensor<3xi32>) -> tensor<3xf32>
    %6 = "graph.constant"() {value = dense<[1, 2, 3]> : tensor<3xi64>} : () -> tensor<3xi64>
    %7 = "graph.cast"(%6) {dtype = f32} : (tensor<3xi64>) -> tensor<3xf32>
    %8 = "graph.constant"() {value = dense<[1, 2, 255]> : tensor<3xui8>} : () -> tensor<3xui8>
    %9 = "graph.cast"(%8) {dtype = f32} : (tensor<3xui8>) -> tensor<3xf32>
    %10 = "graph.constant"() {value = dense<[0.5, 1.0, 2.0]> : tensor<3xf16>} : () -> tensor<3xf16>
    %11 = "graph.cast"(%10) {dtype = f32} : (tensor<3xf16>) -> tensor<3xf32>
    %12 = "graph.constant"() {value = dense<[0.25, 0.5, 0.75]> : tensor<3xf64>} : () -> tensor<3xf64>
    %13 = "graph.cast"(%12) {dtype = f32} : (tensor<3xf64>) -> tensor<3xf32>
    %14 = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xbf16>} : () -> tensor<3xbf16>
    %15 = "graph.cast"(%14) {dtype = f32} : (tensor<3xbf16>) -> tensor<3xf32>
    %16 = "graph.constant"() {value = dense<[0.1, 0.2, 0.3]> : tensor<3xf32>} : () -> tensor<3xf32>
    %17 = "graph.add"(%1, %3) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %18 = "graph.add"(%17, %5) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %19 = "graph.add"(%18, %7) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %20 = "graph.add"(%19, %9) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %21 = "graph.add"(%20, %11) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %22 = "graph.add"(%21, %13) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %23 = "graph.add"(%22, %15) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %24 = "graph.add"(%23, %16) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %25 = "graph.add"(%24, %arg0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %26 = "graph.constant"() {value = dense<[true, false, true]> : tensor<3xi1>} : () -> tensor<3xi1>
    %27 = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
    %28 = "graph.select"(%26, %25, %27) : (tensor<3xi1>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %29 = "graph.cast"(%28) {dtype = i32} : (tensor<3xf32>) -> tensor<3xi32>
    "func.return"(%28, %29) : (tensor<3xf32>, tensor<3xi32>) -> ()
  }) {tf.arg_names = ["x"], tf.result_names = ["y", "yi"], sym_name = "main", function_type = (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xi32>)} : () -> ()
}) : () -> ()
