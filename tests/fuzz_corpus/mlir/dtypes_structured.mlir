"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<3xf32>):
    %0 = "graph.constant"() {value = dense<[111.85, -186.3, 576.05]> : tensor<3xf32>} : () -> tensor<3xf32>
    %1 = "graph.constant"() {value = dense<[true, false, true]> : tensor<3xi1>} : () -> tensor<3xi1>
    %2 = "graph.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
    %3:2 = "structured.kernel"(%arg0, %0, %1, %2) ({
    ^bb0(%arg1: tensor<3xf32>, %arg2: tensor<3xf32>, %arg3: tensor<3xi1>, %arg4: tensor<3xf32>):
      %4 = "structured.compute"() ({
      ^bb0(%arg5: index):
        %5 = "structured.read"(%arg3, %arg5) : (tensor<3xi1>, index) -> i1
        %6 = "structured.read"(%arg1, %arg5) : (tensor<3xf32>, index) -> f32
        %7 = "structured.read"(%arg2, %arg5) : (tensor<3xf32>, index) -> f32
        %8 = "scalar.add"(%6, %7) : (f32, f32) -> f32
        %9 = "structured.read"(%arg4, %arg5) : (tensor<3xf32>, index) -> f32
        %10 = "scalar.select"(%5, %8, %9) : (i1, f32, f32) -> f32
        "structured.yield"(%10) : (f32) -> ()
      }) {domain = array<i64: 3>, iterators = "p", combiner = "none", dtype = f32} : () -> tensor<3xf32>
      %11 = "structured.compute"() ({
      ^bb0(%arg6: index):
        %12 = "structured.read"(%4, %arg6) : (tensor<3xf32>, index) -> f32
        %13 = "scalar.cast"(%12) {dtype = i32} : (f32) -> i32
        "structured.yield"(%13) : (i32) -> ()
      }) {domain = array<i64: 3>, iterators = "p", combiner = "none", dtype = i32} : () -> tensor<3xi32>
      "structured.return"(%4, %11) : (tensor<3xf32>, tensor<3xi32>) -> ()
    }) {sym_name = "add_select_cast", tf.fusion = "elementwise"} : (tensor<3xf32>, tensor<3xf32>, tensor<3xi1>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xi32>)
    "func.return"(%3#0, %3#1) : (tensor<3xf32>, tensor<3xi32>) -> ()
  }) {tf.arg_names = ["x"], sym_name = "main", function_type = (tensor<3xf32>) -> (tensor<3xf32>, tensor<3xi32>)} : () -> ()
}) : () -> ()
