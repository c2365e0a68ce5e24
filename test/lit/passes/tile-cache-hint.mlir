// RUN: not tilec-opt %s --split-input-file -p tile-cache-hint 2>%t.err | FileCheck %s
// RUN: FileCheck %s --input-file %t.err --check-prefix=DIAG
// RUN: tilec %examples/rope.tile --emit=opt | FileCheck %s --check-prefix=ROPE

// The RoPE example: the table's row for a token is resident in L1 and reused for every head.
// ROPE-LABEL: func.func @rotary_emb(
// ROPE-SAME:      {tile.cache_hint = {level = "L1", name = "rope_freqs", resident = ["1", "2*half"], reused_over = ["heads"]}, tile.name = "rope_freqs"}
// ROPE-NOT:       "tile.hint"
// ROPE:           tile.cache_hints = [{}, {level = "L1", name = "rope_freqs", resident = ["1", "2*half"], reused_over = ["heads"]}]
// ROPE-NOT:       "tile.hint"

// A parameter, RoPE's form: both halves of a [tokens, 2*half] row are sliced, cast, reshaped to
// [tokens, 1, half] and broadcast over heads.  The hint goes into arg_attrs and onto the group's
// second input; the hint op is gone.
// CHECK-LABEL: func.func @rope(
// CHECK-SAME:      %[[Q:[^:]*]]: tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>,
// CHECK-SAME:      %[[F:[^:]*]]: tensor<?x?xf32, ["tokens", "2*half"]> {tile.cache_hint = {level = "L1", name = "rope_freqs", resident = ["1", "2*half"], reused_over = ["heads"]}})
// CHECK-NEXT:    %[[G:.*]] = "tile.fused"(%[[Q]], %[[F]]) ({
// CHECK-NOT:       "tile.hint"
// CHECK:         }) {operandSegmentSizes = {{.*}}, tile.cache_hints = [{}, {level = "L1", name = "rope_freqs", resident = ["1", "2*half"], reused_over = ["heads"]}]}
// CHECK-NEXT:    return %[[G]]
func.func @rope(%q: tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>, %freqs: tensor<?x?xf32, ["tokens", "2*half"]>) -> tensor<?x?x?xf16, ["tokens", "heads", "half"]> {
  "tile.hint"(%freqs) {level = "L1", name = "rope_freqs"} : (tensor<?x?xf32, ["tokens", "2*half"]>) -> ()
  %0 = "tile.fused"(%q, %freqs) ({
  ^bb0(%a: tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>, %f: tensor<?x?xf32, ["tokens", "2*half"]>):
    %cos = "tile.slice"(%f) {starts = ["0", "0"], ends = ["tokens", "half"]} : (tensor<?x?xf32, ["tokens", "2*half"]>) -> tensor<?x?xf32, ["tokens", "half"]>
    %sin = "tile.slice"(%f) {starts = ["0", "half"], ends = ["tokens", "2*half"]} : (tensor<?x?xf32, ["tokens", "2*half"]>) -> tensor<?x?xf32, ["tokens", "half"]>
    %cos16 = "tile.cast"(%cos) : (tensor<?x?xf32, ["tokens", "half"]>) -> tensor<?x?xf16, ["tokens", "half"]>
    %sin16 = "tile.cast"(%sin) : (tensor<?x?xf32, ["tokens", "half"]>) -> tensor<?x?xf16, ["tokens", "half"]>
    %c3 = "tile.reshape"(%cos16) : (tensor<?x?xf16, ["tokens", "half"]>) -> tensor<?x1x?xf16, ["tokens", "1", "half"]>
    %s3 = "tile.reshape"(%sin16) : (tensor<?x?xf16, ["tokens", "half"]>) -> tensor<?x1x?xf16, ["tokens", "1", "half"]>
    %c = "tile.broadcast"(%c3) : (tensor<?x1x?xf16, ["tokens", "1", "half"]>) -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
    %s = "tile.broadcast"(%s3) : (tensor<?x1x?xf16, ["tokens", "1", "half"]>) -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
    %q1 = "tile.slice"(%a) {starts = ["0", "0", "0"], ends = ["tokens", "heads", "half"]} : (tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>) -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
    %qc = "tile.mul"(%q1, %c) : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>, tensor<?x?x?xf16, ["tokens", "heads", "half"]>) -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
    %qs = "tile.mul"(%q1, %s) : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>, tensor<?x?x?xf16, ["tokens", "heads", "half"]>) -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
    %r = "tile.sub"(%qc, %qs) : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>, tensor<?x?x?xf16, ["tokens", "heads", "half"]>) -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
    "tile.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<?x?x?xf16, ["tokens", "heads", "half"]>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<?x?x?xf16, ["tokens", "heads", "2*half"]>, tensor<?x?xf32, ["tokens", "2*half"]>) -> tensor<?x?x?xf16, ["tokens", "heads", "half"]>
  return %0 : tensor<?x?x?xf16, ["tokens", "heads", "half"]>
}

// -----

// A let computed by one group and read by another: the hint goes on its defining op, inside the
// group, and on the reading group's input.  The column maxima [1, m] are broadcast over n.
// CHECK-LABEL: func.func @colmax(
// CHECK-NEXT:    %[[COLMAX:.*]] = "tile.fused"
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      %[[R:.*]] = "tile.reduce"({{.*}}) {axes = array<i64: -2>, keepdims = true, kind = "max", tile.cache_hint = {level = "UB", name = "colmax", resident = ["1", "m"], reused_over = ["n"]}}
// CHECK-NEXT:      "tile.yield"(%[[R]])
// CHECK-NEXT:    }) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>}
// CHECK-NEXT:    %[[OUT:.*]] = "tile.fused"(%{{.*}}, %[[COLMAX]]) ({
// CHECK:         }) {{.*}}tile.cache_hints = [{}, {level = "UB", name = "colmax", resident = ["1", "m"], reused_over = ["n"]}]}
// CHECK-NEXT:    return %[[OUT]]
func.func @colmax(%x: tensor<?x?xf32, ["n", "m"]>, %y: tensor<?x?xf32, ["n", "m"]>) -> tensor<?x?xf32, ["n", "m"]> {
  %0 = "tile.fused"(%x) ({
  ^bb0(%a: tensor<?x?xf32, ["n", "m"]>):
    %colmax = "tile.reduce"(%a) {axes = array<i64: -2>, keepdims = true, kind = "max"} : (tensor<?x?xf32, ["n", "m"]>) -> tensor<1x?xf32, ["1", "m"]>
    "tile.hint"(%colmax) {level = "UB", name = "colmax"} : (tensor<1x?xf32, ["1", "m"]>) -> ()
    "tile.yield"(%colmax) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<1x?xf32, ["1", "m"]>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<?x?xf32, ["n", "m"]>) -> tensor<1x?xf32, ["1", "m"]>
  %1 = "tile.fused"(%y, %0) ({
  ^bb0(%b: tensor<?x?xf32, ["n", "m"]>, %c: tensor<1x?xf32, ["1", "m"]>):
    %p = "tile.softmax"(%b) {axis = -1 : i64} : (tensor<?x?xf32, ["n", "m"]>) -> tensor<?x?xf32, ["n", "m"]>
    %cb = "tile.broadcast"(%c) : (tensor<1x?xf32, ["1", "m"]>) -> tensor<?x?xf32, ["n", "m"]>
    %r = "tile.mul"(%p, %cb) : (tensor<?x?xf32, ["n", "m"]>, tensor<?x?xf32, ["n", "m"]>) -> tensor<?x?xf32, ["n", "m"]>
    "tile.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<?x?xf32, ["n", "m"]>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<?x?xf32, ["n", "m"]>, tensor<1x?xf32, ["1", "m"]>) -> tensor<?x?xf32, ["n", "m"]>
  return %1 : tensor<?x?xf32, ["n", "m"]>
}

// -----

// Without fusion the uses are followed in the function body.  Only the second half of each
// row is read, so that half is resident; a vector broadcast over new leading rows is resident
// whole.
// CHECK-LABEL: func.func @unfused(
// CHECK-SAME:      {tile.cache_hint = {level = "L2", name = "freqs", resident = ["1", "half"], reused_over = ["heads"]}}
// CHECK-SAME:      {tile.cache_hint = {level = "SHARED", name = "w", resident = ["half"], reused_over = ["tokens", "heads"]}}
// CHECK-NOT:     "tile.hint"
func.func @unfused(%freqs: tensor<?x?xf32, ["tokens", "2*half"]>, %w: tensor<?xf32, ["half"]>) -> tensor<?x?x?xf32, ["tokens", "heads", "half"]> {
  %s = "tile.slice"(%freqs) {starts = ["0", "half"], ends = ["tokens", "2*half"]} : (tensor<?x?xf32, ["tokens", "2*half"]>) -> tensor<?x?xf32, ["tokens", "half"]>
  %r = "tile.reshape"(%s) : (tensor<?x?xf32, ["tokens", "half"]>) -> tensor<?x1x?xf32, ["tokens", "1", "half"]>
  %b = "tile.broadcast"(%r) : (tensor<?x1x?xf32, ["tokens", "1", "half"]>) -> tensor<?x?x?xf32, ["tokens", "heads", "half"]>
  %wb = "tile.broadcast"(%w) : (tensor<?xf32, ["half"]>) -> tensor<?x?x?xf32, ["tokens", "heads", "half"]>
  %m = "tile.mul"(%b, %wb) : (tensor<?x?x?xf32, ["tokens", "heads", "half"]>, tensor<?x?x?xf32, ["tokens", "heads", "half"]>) -> tensor<?x?x?xf32, ["tokens", "heads", "half"]>
  "tile.hint"(%freqs) {level = "L2", name = "freqs"} : (tensor<?x?xf32, ["tokens", "2*half"]>) -> ()
  "tile.hint"(%w) {level = "SHARED", name = "w"} : (tensor<?xf32, ["half"]>) -> ()
  return %m : tensor<?x?x?xf32, ["tokens", "heads", "half"]>
}

// -----

// Windows compose through nested slices and their hull is resident: columns [2*q, 3*q) through
// two slices and [0, q) directly make [0, 3*q).  Nothing is broadcast, so no tile reuses it.
// CHECK-LABEL: func.func @nested(
// CHECK-SAME:      {tile.cache_hint = {level = "UB", name = "t", resident = ["tokens", "3*q"], reused_over = []}}
func.func @nested(%t: tensor<?x?xf32, ["tokens", "4*q"]>) -> tensor<?x?xf32, ["tokens", "q"]> {
  %a = "tile.slice"(%t) {starts = ["0", "q"], ends = ["tokens", "3*q"]} : (tensor<?x?xf32, ["tokens", "4*q"]>) -> tensor<?x?xf32, ["tokens", "2*q"]>
  %b = "tile.slice"(%a) {starts = ["0", "q"], ends = ["tokens", "2*q"]} : (tensor<?x?xf32, ["tokens", "2*q"]>) -> tensor<?x?xf32, ["tokens", "q"]>
  %c = "tile.slice"(%t) {starts = ["0", "0"], ends = ["tokens", "q"]} : (tensor<?x?xf32, ["tokens", "4*q"]>) -> tensor<?x?xf32, ["tokens", "q"]>
  %s = "tile.add"(%b, %c) : (tensor<?x?xf32, ["tokens", "q"]>, tensor<?x?xf32, ["tokens", "q"]>) -> tensor<?x?xf32, ["tokens", "q"]>
  "tile.hint"(%t) {level = "UB", name = "t"} : (tensor<?x?xf32, ["tokens", "4*q"]>) -> ()
  return %s : tensor<?x?xf32, ["tokens", "q"]>
}

// -----

// A value computed and read inside one group stays in registers: a warning at the pragma, and
// the attribute is kept (nothing broadcasts it: no reuse, resident is all it reads).
// DIAG: {{^}}kept.tile:3:3: warning: cache_hint(e, L1): fusion keeps 'e' in registers inside its group, so no memory level holds it to reuse{{$}}
// CHECK-LABEL: func.func @kept(
// CHECK:           "tile.exp"({{.*}}) {tile.cache_hint = {level = "L1", name = "e", resident = ["4", "8"], reused_over = []}}
// CHECK-NOT:       "tile.hint"
func.func @kept(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "tile.fused"(%x) ({
  ^bb0(%a: tensor<4x8xf32>):
    %e = "tile.exp"(%a) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %r = "tile.mul"(%e, %e) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    "tile.hint"(%e) {level = "L1", name = "e"} : (tensor<4x8xf32>) -> () loc("kept.tile":3:3)
    "tile.yield"(%r) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x8xf32>) -> ()
  }) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// An unknown level is an error at the hint (hand-written IR: the front end refuses it first).
// DIAG: {{^}}{{.*}}tile-cache-hint.mlir:[[# @LINE + 3]]:3: error: unknown cache level 'L3' in cache_hint(x, L3); expected one of L1, L2, UB, SHARED{{$}}
// CHECK-NOT: func.func @bad_level
func.func @bad_level(%x: tensor<4xf32>) -> tensor<4xf32> {
  "tile.hint"(%x) {level = "L3", name = "x"} : (tensor<4xf32>) -> ()
  return %x : tensor<4xf32>
}
