// RUN: tf-opt %s -p simplify | filecheck %s
// cast(x, dtype(x)) -> x;  cast(cast(x, a), b) -> cast(x, b) when x -> a is exact (widening).

// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<2x3xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "cast_noop_fires"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.cast"(%x) {dtype = f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  "func.return"(%a) : (tensor<2x3xf32>) -> ()
}) {sym_name = "cast_noop_fires", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf32>)} : () -> ()

// CHECK:      "graph.cast"(%arg0) {dtype = f16}
// CHECK:      sym_name = "cast_noop_stays_f16"
"func.func"() ({
^bb0(%x: tensor<2x3xf32>):
  %a = "graph.cast"(%x) {dtype = f16} : (tensor<2x3xf32>) -> tensor<2x3xf16>
  "func.return"(%a) : (tensor<2x3xf16>) -> ()
}) {sym_name = "cast_noop_stays_f16", function_type = (tensor<2x3xf32>) -> (tensor<2x3xf16>)} : () -> ()

// f32 -> f64 -> f32 is exact: both casts go.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xf32>):
// CHECK-NEXT:   "func.return"(%[[X]])
// CHECK-NEXT: sym_name = "cast_cast_exact_fires_roundtrip"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %a = "graph.cast"(%x) {dtype = f64} : (tensor<4xf32>) -> tensor<4xf64>
  %b = "graph.cast"(%a) {dtype = f32} : (tensor<4xf64>) -> tensor<4xf32>
  "func.return"(%b) : (tensor<4xf32>) -> ()
}) {sym_name = "cast_cast_exact_fires_roundtrip", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// i8 -> i32 -> f32 is one cast i8 -> f32.
// CHECK:      ^bb0(%[[X:arg[0-9]+]]: tensor<4xi8>):
// CHECK-NEXT:   %[[R:[0-9]+]] = "graph.cast"(%[[X]]) {dtype = f32} : (tensor<4xi8>) -> tensor<4xf32>
// CHECK-NEXT:   "func.return"(%[[R]])
// CHECK-NEXT: sym_name = "cast_cast_exact_fires_chain"
"func.func"() ({
^bb0(%x: tensor<4xi8>):
  %a = "graph.cast"(%x) {dtype = i32} : (tensor<4xi8>) -> tensor<4xi32>
  %b = "graph.cast"(%a) {dtype = f32} : (tensor<4xi32>) -> tensor<4xf32>
  "func.return"(%b) : (tensor<4xf32>) -> ()
}) {sym_name = "cast_cast_exact_fires_chain", function_type = (tensor<4xi8>) -> (tensor<4xf32>)} : () -> ()

// f32 -> f16 rounds, so f32 -> f16 -> f32 is not x.
// CHECK:      "graph.cast"(%arg0) {dtype = f16}
// CHECK-NEXT: "graph.cast"(%0) {dtype = f32}
// CHECK:      sym_name = "cast_cast_exact_stays_narrowing"
"func.func"() ({
^bb0(%x: tensor<4xf32>):
  %a = "graph.cast"(%x) {dtype = f16} : (tensor<4xf32>) -> tensor<4xf16>
  %b = "graph.cast"(%a) {dtype = f32} : (tensor<4xf16>) -> tensor<4xf32>
  "func.return"(%b) : (tensor<4xf32>) -> ()
}) {sym_name = "cast_cast_exact_stays_narrowing", function_type = (tensor<4xf32>) -> (tensor<4xf32>)} : () -> ()

// f32 -> i32 truncates; i32 -> i64 -> i32 would be fine, but i32 -> f32 is not exact.
// CHECK:      "graph.cast"(%arg0) {dtype = f32}
// CHECK-NEXT: "graph.cast"(%0) {dtype = i32}
// CHECK:      sym_name = "cast_cast_exact_stays_int_to_float"
"func.func"() ({
^bb0(%x: tensor<4xi32>):
  %a = "graph.cast"(%x) {dtype = f32} : (tensor<4xi32>) -> tensor<4xf32>
  %b = "graph.cast"(%a) {dtype = i32} : (tensor<4xf32>) -> tensor<4xi32>
  "func.return"(%b) : (tensor<4xi32>) -> ()
}) {sym_name = "cast_cast_exact_stays_int_to_float", function_type = (tensor<4xi32>) -> (tensor<4xi32>)} : () -> ()
