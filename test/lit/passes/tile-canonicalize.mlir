// tile-canonicalize: exact no-ops fold away, then canonicalize (dead code) and cse.
// RUN: tilec-opt %s --split-input-file -p tile-canonicalize | FileCheck %s

// x * 1, 1 * x and x / 1 fold; 1 / x and x * 2 do not.
// CHECK-LABEL: func.func @units(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?xf32, ["n"]>
// CHECK-NEXT: %[[ONE:.*]] = "tile.constant"() {value = 1.000000e+00 : f64} : () -> tensor<f32>
// CHECK-NEXT: %[[TWO:.*]] = "tile.constant"() {value = 2.000000e+00 : f64} : () -> tensor<f32>
// CHECK-NEXT: %[[R:.*]] = "tile.div"(%[[ONE]], %[[X]])
// CHECK-NEXT: %[[D:.*]] = "tile.mul"(%[[R]], %[[TWO]])
// CHECK-NEXT: return %[[D]]
func.func @units(%x: tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]> {
  %one = "tile.constant"() {value = 1.0 : f64} : () -> tensor<f32>
  %two = "tile.constant"() {value = 2.0 : f64} : () -> tensor<f32>
  %0 = "tile.mul"(%x, %one) : (tensor<?xf32, ["n"]>, tensor<f32>) -> tensor<?xf32, ["n"]>
  %1 = "tile.mul"(%one, %0) : (tensor<f32>, tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %2 = "tile.div"(%1, %one) : (tensor<?xf32, ["n"]>, tensor<f32>) -> tensor<?xf32, ["n"]>
  %3 = "tile.div"(%one, %2) : (tensor<f32>, tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %4 = "tile.mul"(%3, %two) : (tensor<?xf32, ["n"]>, tensor<f32>) -> tensor<?xf32, ["n"]>
  return %4 : tensor<?xf32, ["n"]>
}

// -----

// Signed zeros: -0.0 + 0.0 is +0.0, so on floats only x + -0.0, -0.0 + x and x - 0.0 are the
// identity; on int32 any zero is.
// CHECK-LABEL: func.func @zeros(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?xf32, ["n"]>, %[[I:[^:]+]]: tensor<?xi32, ["n"]>
// CHECK-NEXT: %[[PZ:.*]] = "tile.constant"() {value = 0.000000e+00 : f64} : () -> tensor<f32>
// CHECK-NEXT: %[[NZ:.*]] = "tile.constant"() {value = -0.000000e+00 : f64} : () -> tensor<f32>
// CHECK-NEXT: %[[A:.*]] = "tile.add"(%[[X]], %[[PZ]])
// CHECK-NEXT: %[[S:.*]] = "tile.sub"(%[[A]], %[[NZ]])
// CHECK-NEXT: return %[[S]], %[[I]]
func.func @zeros(%x: tensor<?xf32, ["n"]>, %i: tensor<?xi32, ["n"]>) -> (tensor<?xf32, ["n"]>, tensor<?xi32, ["n"]>) {
  %pz = "tile.constant"() {value = 0.0 : f64} : () -> tensor<f32>
  %nz = "tile.constant"() {value = -0.0 : f64} : () -> tensor<f32>
  %iz = "tile.constant"() {value = 0 : i64} : () -> tensor<i32>
  %0 = "tile.add"(%x, %nz) : (tensor<?xf32, ["n"]>, tensor<f32>) -> tensor<?xf32, ["n"]>
  %1 = "tile.add"(%nz, %0) : (tensor<f32>, tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %2 = "tile.sub"(%1, %pz) : (tensor<?xf32, ["n"]>, tensor<f32>) -> tensor<?xf32, ["n"]>
  %3 = "tile.add"(%2, %pz) : (tensor<?xf32, ["n"]>, tensor<f32>) -> tensor<?xf32, ["n"]>
  %4 = "tile.sub"(%3, %nz) : (tensor<?xf32, ["n"]>, tensor<f32>) -> tensor<?xf32, ["n"]>
  %5 = "tile.add"(%iz, %i) : (tensor<i32>, tensor<?xi32, ["n"]>) -> tensor<?xi32, ["n"]>
  %6 = "tile.sub"(%5, %iz) : (tensor<?xi32, ["n"]>, tensor<i32>) -> tensor<?xi32, ["n"]>
  return %4, %6 : tensor<?xf32, ["n"]>, tensor<?xi32, ["n"]>
}

// -----

// A cast to the operand's own type folds where the operand already holds values of that type
// (an argument, a cast, a slice of one); after arithmetic it is a rounding point and stays.
// CHECK-LABEL: func.func @casts(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?xf32, ["n"]>, %[[H:[^:]+]]: tensor<?xf32, ["n"]>
// CHECK-NEXT: %[[M:.*]] = "tile.mul"(%[[X]], %[[H]])
// CHECK-NEXT: %[[RM:.*]] = "tile.cast"(%[[M]]) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
// CHECK-NEXT: %[[TO16:.*]] = "tile.cast"(%[[RM]]) : (tensor<?xf32, ["n"]>) -> tensor<?xf16, ["n"]>
// CHECK-NEXT: %[[SL:.*]] = "tile.slice"(%[[TO16]]) {ends = ["n"], starts = ["1"]}
// CHECK-NEXT: return %[[RM]], %[[SL]]
func.func @casts(%x: tensor<?xf32, ["n"]>, %h: tensor<?xf32, ["n"]>) -> (tensor<?xf32, ["n"]>, tensor<?xf16, ["n-1"]>) {
  %0 = "tile.cast"(%x) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %1 = "tile.mul"(%0, %h) : (tensor<?xf32, ["n"]>, tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %2 = "tile.cast"(%1) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %3 = "tile.cast"(%2) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %4 = "tile.cast"(%3) : (tensor<?xf32, ["n"]>) -> tensor<?xf16, ["n"]>
  %5 = "tile.slice"(%4) {ends = ["n"], starts = ["1"]} : (tensor<?xf16, ["n"]>) -> tensor<?xf16, ["n-1"]>
  %6 = "tile.cast"(%5) : (tensor<?xf16, ["n-1"]>) -> tensor<?xf16, ["n-1"]>
  return %3, %6 : tensor<?xf32, ["n"]>, tensor<?xf16, ["n-1"]>
}

// -----

// Slices of everything, reshapes and broadcasts to the operand's own shape fold; a real
// slice, reshape and broadcast stay.
// CHECK-LABEL: func.func @movement(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?x8xf16, ["...", "n", "8"]>, %[[Y:[^:]+]]: tensor<?x4xf16, ["m", "4"]>
// CHECK-NEXT: %[[S:.*]] = "tile.slice"(%[[X]]) {ends = ["n", "4"], starts = ["0", "0"]}
// CHECK-NEXT: %[[R:.*]] = "tile.reshape"(%[[Y]]) : (tensor<?x4xf16, ["m", "4"]>) -> tensor<?x2x2xf16, ["m", "2", "2"]>
// CHECK-NEXT: %[[B:.*]] = "tile.broadcast"(%[[Y]]) : (tensor<?x4xf16, ["m", "4"]>) -> tensor<3x?x4xf16, ["3", "m", "4"]>
// CHECK-NEXT: return %[[X]], %[[S]], %[[Y]], %[[R]], %[[B]]
func.func @movement(%x: tensor<?x?x8xf16, ["...", "n", "8"]>, %y: tensor<?x4xf16, ["m", "4"]>) -> (tensor<?x?x8xf16, ["...", "n", "8"]>, tensor<?x?x4xf16, ["...", "n", "4"]>, tensor<?x4xf16, ["m", "4"]>, tensor<?x2x2xf16, ["m", "2", "2"]>, tensor<3x?x4xf16, ["3", "m", "4"]>)
    attributes {tile.lead = [], tile.symbols = ["n", "m"]} {
  %0 = "tile.slice"(%x) {ends = ["n", "8"], starts = ["0", "0"]} : (tensor<?x?x8xf16, ["...", "n", "8"]>) -> tensor<?x?x8xf16, ["...", "n", "8"]>
  %1 = "tile.slice"(%0) {ends = ["n", "4"], starts = ["0", "0"]} : (tensor<?x?x8xf16, ["...", "n", "8"]>) -> tensor<?x?x4xf16, ["...", "n", "4"]>
  %2 = "tile.reshape"(%y) : (tensor<?x4xf16, ["m", "4"]>) -> tensor<?x4xf16, ["m", "4"]>
  %3 = "tile.broadcast"(%2) : (tensor<?x4xf16, ["m", "4"]>) -> tensor<?x4xf16, ["m", "4"]>
  %4 = "tile.reshape"(%3) : (tensor<?x4xf16, ["m", "4"]>) -> tensor<?x2x2xf16, ["m", "2", "2"]>
  %5 = "tile.broadcast"(%3) : (tensor<?x4xf16, ["m", "4"]>) -> tensor<3x?x4xf16, ["3", "m", "4"]>
  return %0, %1, %3, %4, %5 : tensor<?x?x8xf16, ["...", "n", "8"]>, tensor<?x?x4xf16, ["...", "n", "4"]>, tensor<?x4xf16, ["m", "4"]>, tensor<?x2x2xf16, ["m", "2", "2"]>, tensor<3x?x4xf16, ["3", "m", "4"]>
}

// -----

// -(-x) folds, -(-(-x)) leaves one negation; then cse merges the two equal exps, and the
// dead sigmoid goes while the check (which has an effect) stays.
// CHECK-LABEL: func.func @negations(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?xf32, ["n"]>
// CHECK-NEXT: "tile.check"()
// CHECK-NEXT: %[[N:.*]] = "tile.neg"(%[[X]])
// CHECK-NEXT: %[[E:.*]] = "tile.exp"(%[[X]])
// CHECK-NEXT: %[[P:.*]] = "tile.mul"(%[[E]], %[[E]])
// CHECK-NEXT: return %[[X]], %[[N]], %[[P]]
func.func @negations(%x: tensor<?xf32, ["n"]>) -> (tensor<?xf32, ["n"]>, tensor<?xf32, ["n"]>, tensor<?xf32, ["n"]>) {
  "tile.check"() {lhs = "1", message = "empty", rel = "le", rhs = "n"} : () -> ()
  %0 = "tile.neg"(%x) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %1 = "tile.neg"(%0) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %2 = "tile.neg"(%1) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %3 = "tile.exp"(%x) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %4 = "tile.exp"(%1) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %5 = "tile.mul"(%3, %4) : (tensor<?xf32, ["n"]>, tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  %6 = "tile.sigmoid"(%5) : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n"]>
  return %1, %2, %5 : tensor<?xf32, ["n"]>, tensor<?xf32, ["n"]>, tensor<?xf32, ["n"]>
}
