// tile-expand: argmax/argmin (tile.arg_reduce) become a reduction of the value, the first
// index where it is reached (an iota along the axis, as float32) and a min reduction that
// puts a NaN's index (shifted down by 2**24) before every number's, all in float32.
// RUN: tilec-opt %s --split-input-file -p tile-expand | FileCheck %s

// CHECK-LABEL: func.func @argmax(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?xf16, ["r", "n"]>
// CHECK-NEXT: "tile.check"() {lhs = "n", message = "argmax along an axis of n elements: at most 16777216", rel = "le", rhs = "16777216"}
// CHECK-NEXT: %[[XF:.*]] = "tile.cast"(%[[X]]) : (tensor<?x?xf16, ["r", "n"]>) -> tensor<?x?xf32, ["r", "n"]>
// CHECK-NEXT: %[[M:.*]] = "tile.reduce"(%[[XF]]) {axes = array<i64: -1>, keepdims = true, kind = "max"}
// CHECK-NEXT: %[[MB:.*]] = "tile.broadcast"(%[[M]]) : (tensor<?x1xf32, ["r", "1"]>) -> tensor<?x?xf32, ["r", "n"]>
// CHECK-NEXT: %[[HIT:.*]] = "tile.cmp"(%[[XF]], %[[MB]]) {predicate = "eq"}
// CHECK-NEXT: %[[NAN:.*]] = "tile.cmp"(%[[XF]], %[[XF]]) {predicate = "ne"}
// CHECK-NEXT: %[[I:.*]] = "tile.iota"() {axis = 0 : i64, start = "0"} : () -> tensor<?xi32, ["n"]>
// CHECK-NEXT: %[[IF:.*]] = "tile.cast"(%[[I]]) : (tensor<?xi32, ["n"]>) -> tensor<?xf32, ["n"]>
// CHECK-NEXT: %[[IB:.*]] = "tile.broadcast"(%[[IF]]) : (tensor<?xf32, ["n"]>) -> tensor<?x?xf32, ["r", "n"]>
// CHECK-NEXT: %[[BIG:.*]] = "tile.constant"() {value = 0x4170000000000000 : f64}
// CHECK-NEXT: %[[INF:.*]] = "tile.constant"() {value = 0x7FF0000000000000 : f64}
// CHECK-NEXT: %[[FIRST:.*]] = "tile.select"(%[[HIT]], %[[IB]], %[[INF]])
// CHECK-NEXT: %[[LOW:.*]] = "tile.sub"(%[[IB]], %[[BIG]])
// CHECK-NEXT: %[[KEY:.*]] = "tile.select"(%[[NAN]], %[[LOW]], %[[FIRST]])
// CHECK-NEXT: %[[R:.*]] = "tile.reduce"(%[[KEY]]) {axes = array<i64: -1>, keepdims = false, kind = "min"} : (tensor<?x?xf32, ["r", "n"]>) -> tensor<?xf32, ["r"]>
// CHECK-NEXT: %[[ZERO:.*]] = "tile.constant"() {value = 0.000000e+00 : f64}
// CHECK-NEXT: %[[NEG:.*]] = "tile.cmp"(%[[R]], %[[ZERO]]) {predicate = "lt"}
// CHECK-NEXT: %[[UP:.*]] = "tile.add"(%[[R]], %[[BIG]])
// CHECK-NEXT: %[[S:.*]] = "tile.select"(%[[NEG]], %[[UP]], %[[R]])
// CHECK-NEXT: %[[OUT:.*]] = "tile.cast"(%[[S]]) : (tensor<?xf32, ["r"]>) -> tensor<?xi32, ["r"]>
// CHECK-NEXT: return %[[OUT]]
func.func @argmax(%x: tensor<?x?xf16, ["r", "n"]>) -> tensor<?xi32, ["r"]> {
  %0 = "tile.arg_reduce"(%x) {axis = -1 : i64, keepdims = false, kind = "max"} : (tensor<?x?xf16, ["r", "n"]>) -> tensor<?xi32, ["r"]>
  return %0 : tensor<?xi32, ["r"]>
}

// -----

// Along a leading axis of known extent (no run-time check), keeping the dimension: the index
// is a column [4, 1] broadcast over the trailing axis; rank-generic operands work alike.
// CHECK-LABEL: func.func @argmin(
// CHECK-NOT: tile.check
// CHECK-NOT: tile.cast
// CHECK: "tile.reduce"(%{{.*}}) {axes = array<i64: -2>, keepdims = true, kind = "min"} : (tensor<?x4x?xf32, ["...", "4", "m"]>) -> tensor<?x1x?xf32, ["...", "1", "m"]>
// CHECK: "tile.iota"() {axis = 0 : i64, start = "0"} : () -> tensor<4x1xi32>
// CHECK: "tile.broadcast"(%{{.*}}) : (tensor<4x1xf32>) -> tensor<?x4x?xf32, ["...", "4", "m"]>
// CHECK: "tile.reduce"(%{{.*}}) {axes = array<i64: -2>, keepdims = true, kind = "min"} : (tensor<?x4x?xf32, ["...", "4", "m"]>) -> tensor<?x1x?xf32, ["...", "1", "m"]>
// CHECK-NOT: tile.arg_reduce
func.func @argmin(%x: tensor<?x4x?xf32, ["...", "4", "m"]>) -> tensor<?x1x?xi32, ["...", "1", "m"]> {
  %0 = "tile.arg_reduce"(%x) {axis = -2 : i64, keepdims = true, kind = "min"} : (tensor<?x4x?xf32, ["...", "4", "m"]>) -> tensor<?x1x?xi32, ["...", "1", "m"]>
  return %0 : tensor<?x1x?xi32, ["...", "1", "m"]>
}
