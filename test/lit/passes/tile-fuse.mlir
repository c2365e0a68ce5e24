// RUN: tilec-opt %s -p tile-fuse --split-input-file | FileCheck %s
// RUN: tilec %examples/swiglu.tile --emit=opt | FileCheck %s --check-prefix=ONE-GROUP
// RUN: tilec %examples/layernorm.tile --emit=opt | FileCheck %s --check-prefix=ONE-GROUP
// RUN: tilec %examples/rope.tile --emit=opt | FileCheck %s --check-prefix=ONE-GROUP
// RUN: tilec %examples/swiglu.tile --emit=opt --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

// The shared examples are one kernel each, whose only inputs are the function's arguments.
// ONE-GROUP:           func.func
// ONE-GROUP-COUNT-1:   "tile.fused"(%arg{{[0-9]+}}{{(, %arg[0-9]+)?}}) ({
// ONE-GROUP-NOT:       "tile.fused"

// Locations: the group takes its root's (the returned product, 10:10); silu takes the mul's (8:19).
// LOC:          "tile.silu"{{.*}} loc(#[[SILU:loc[0-9]+]])
// LOC-NEXT:     "tile.mul"{{.*}} loc(#[[ROOT:loc[0-9]+]])
// LOC-NEXT:     "tile.yield"{{.*}} loc(#[[ROOT]])
// LOC-NEXT:   }) {{.*}} loc(#[[ROOT]])
// LOC-DAG:    #[[ROOT]] = loc("{{.*}}swiglu.tile":10:10)
// LOC-DAG:    #[[SILU]] = loc("{{.*}}swiglu.tile":8:19)

// x * sigmoid(x), in either order, becomes silu(x); x * sigmoid(y) stays; all one group.
// CHECK-LABEL: func.func @silu(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<8xf32>, %[[Y:[^:]*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[G:.*]] = "tile.fused"(%[[X]], %[[Y]]) ({
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<8xf32>, %[[B:[^:]*]]: tensor<8xf32>):
// CHECK-NEXT:      %[[XS:.*]] = "tile.silu"(%[[A]])
// CHECK-NEXT:      %[[YS:.*]] = "tile.silu"(%[[B]])
// CHECK-NEXT:      %[[SUM:.*]] = "tile.add"(%[[XS]], %[[YS]])
// CHECK-NEXT:      %[[SIG:.*]] = "tile.sigmoid"(%[[B]])
// CHECK-NEXT:      %[[MUL:.*]] = "tile.mul"(%[[A]], %[[SIG]])
// CHECK-NEXT:      %[[R:.*]] = "tile.add"(%[[SUM]], %[[MUL]])
// CHECK-NEXT:      "tile.yield"(%[[R]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    return %[[G]]

func.func @silu(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "tile.sigmoid"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %1 = "tile.mul"(%x, %0) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %2 = "tile.sigmoid"(%y) : (tensor<8xf32>) -> tensor<8xf32>
  %3 = "tile.mul"(%2, %y) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %4 = "tile.add"(%1, %3) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %5 = "tile.sigmoid"(%y) : (tensor<8xf32>) -> tensor<8xf32>
  %6 = "tile.mul"(%x, %5) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %7 = "tile.add"(%4, %6) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %7 : tensor<8xf32>
}

// -----

// An element-wise chain with the slices that feed it: one group that reads its input once.
// CHECK-LABEL: func.func @swiglu(
// CHECK-SAME:      %[[IN:[^:]*]]: tensor<?x?x?xf16, ["batch", "seq", "2*hidden"]>)
// CHECK-NEXT:    %[[G:.*]] = "tile.fused"(%[[IN]]) ({
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<?x?x?xf16, ["batch", "seq", "2*hidden"]>):
// CHECK-NEXT:      %[[X:.*]] = "tile.slice"(%[[A]]) {ends = ["batch", "seq", "hidden"], starts = ["0", "0", "0"]}
// CHECK-NEXT:      %[[GATE:.*]] = "tile.slice"(%[[A]]) {ends = ["batch", "seq", "2*hidden"], starts = ["0", "0", "hidden"]}
// CHECK-NEXT:      %[[SILU:.*]] = "tile.silu"(%[[GATE]])
// CHECK-NEXT:      %[[OUT:.*]] = "tile.mul"(%[[X]], %[[SILU]])
// CHECK-NEXT:      "tile.yield"(%[[OUT]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    return %[[G]]

func.func @swiglu(%arg0: tensor<?x?x?xf16, ["batch", "seq", "2*hidden"]>) -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]> {
  %0 = "tile.slice"(%arg0) {ends = ["batch", "seq", "hidden"], starts = ["0", "0", "0"]} : (tensor<?x?x?xf16, ["batch", "seq", "2*hidden"]>) -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  %1 = "tile.slice"(%arg0) {ends = ["batch", "seq", "2*hidden"], starts = ["0", "0", "hidden"]} : (tensor<?x?x?xf16, ["batch", "seq", "2*hidden"]>) -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  %2 = "tile.sigmoid"(%1) : (tensor<?x?x?xf16, ["batch", "seq", "hidden"]>) -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  %3 = "tile.mul"(%1, %2) : (tensor<?x?x?xf16, ["batch", "seq", "hidden"]>, tensor<?x?x?xf16, ["batch", "seq", "hidden"]>) -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  %4 = "tile.mul"(%0, %3) : (tensor<?x?x?xf16, ["batch", "seq", "hidden"]>, tensor<?x?x?xf16, ["batch", "seq", "hidden"]>) -> tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
  return %4 : tensor<?x?x?xf16, ["batch", "seq", "hidden"]>
}

// -----

// Siblings: two chains that only share their input are one group, which reads it once.
// CHECK-LABEL: func.func @siblings(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x16xf16>)
// CHECK-NEXT:    %[[G:.*]]:2 = "tile.fused"(%[[X]]) ({
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<4x16xf16>):
// CHECK-NEXT:      %[[LO:.*]] = "tile.slice"(%[[A]])
// CHECK-NEXT:      %[[E:.*]] = "tile.exp"(%[[LO]])
// CHECK-NEXT:      %[[HI:.*]] = "tile.slice"(%[[A]])
// CHECK-NEXT:      %[[C:.*]] = "tile.cast"(%[[HI]])
// CHECK-NEXT:      "tile.yield"(%[[E]], %[[C]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    return %[[G]]#0, %[[G]]#1

func.func @siblings(%arg0: tensor<4x16xf16>) -> (tensor<4x8xf16>, tensor<4x8xf32>) {
  %0 = "tile.slice"(%arg0) {ends = ["4", "8"], starts = ["0", "0"]} : (tensor<4x16xf16>) -> tensor<4x8xf16>
  %1 = "tile.exp"(%0) : (tensor<4x8xf16>) -> tensor<4x8xf16>
  %2 = "tile.slice"(%arg0) {ends = ["4", "16"], starts = ["0", "8"]} : (tensor<4x16xf16>) -> tensor<4x8xf16>
  %3 = "tile.cast"(%2) : (tensor<4x8xf16>) -> tensor<4x8xf32>
  return %1, %3 : tensor<4x8xf16>, tensor<4x8xf32>
}

// -----

// LayerNorm: two reductions of the same rows with their prologue (the cast) and epilogue.
// CHECK-LABEL: func.func @layernorm(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<?x?xf16, ["...", "$0"]>)
// CHECK-NEXT:    %[[G:.*]] = "tile.fused"(%[[X]]) ({
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<?x?xf16, ["...", "$0"]>):
// CHECK-NEXT:      %[[XF:.*]] = "tile.cast"(%[[A]])
// CHECK-NEXT:      %[[MEAN:.*]] = "tile.reduce"(%[[XF]]) {{.*}}kind = "mean"
// CHECK-NEXT:      %[[VAR:.*]] = "tile.reduce"(%[[XF]]) {{.*}}kind = "var"
// CHECK-NEXT:      %[[MB:.*]] = "tile.broadcast"(%[[MEAN]])
// CHECK-NEXT:      "tile.sub"(%[[XF]], %[[MB]])
// CHECK-NEXT:      "tile.constant"
// CHECK-NEXT:      "tile.add"(%[[VAR]],
// CHECK:           %[[Y:.*]] = "tile.cast"
// CHECK-NEXT:      "tile.yield"(%[[Y]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    return %[[G]]

func.func @layernorm(%arg0: tensor<?x?xf16, ["...", "$0"]>) -> tensor<?x?xf16, ["...", "$0"]> attributes {tile.lead = ["$0"], tile.symbols = []} {
  %0 = "tile.cast"(%arg0) : (tensor<?x?xf16, ["...", "$0"]>) -> tensor<?x?xf32, ["...", "$0"]>
  %1 = "tile.reduce"(%0) {axes = array<i64: -1>, keepdims = true, kind = "mean"} : (tensor<?x?xf32, ["...", "$0"]>) -> tensor<?x1xf32, ["...", "1"]>
  %2 = "tile.reduce"(%0) {axes = array<i64: -1>, keepdims = true, kind = "var"} : (tensor<?x?xf32, ["...", "$0"]>) -> tensor<?x1xf32, ["...", "1"]>
  %3 = "tile.broadcast"(%1) : (tensor<?x1xf32, ["...", "1"]>) -> tensor<?x?xf32, ["...", "$0"]>
  %4 = "tile.sub"(%0, %3) : (tensor<?x?xf32, ["...", "$0"]>, tensor<?x?xf32, ["...", "$0"]>) -> tensor<?x?xf32, ["...", "$0"]>
  %5 = "tile.constant"() {value = 1.000000e-05 : f64} : () -> tensor<f32>
  %6 = "tile.add"(%2, %5) : (tensor<?x1xf32, ["...", "1"]>, tensor<f32>) -> tensor<?x1xf32, ["...", "1"]>
  %7 = "tile.rsqrt"(%6) : (tensor<?x1xf32, ["...", "1"]>) -> tensor<?x1xf32, ["...", "1"]>
  %8 = "tile.broadcast"(%7) : (tensor<?x1xf32, ["...", "1"]>) -> tensor<?x?xf32, ["...", "$0"]>
  %9 = "tile.mul"(%4, %8) : (tensor<?x?xf32, ["...", "$0"]>, tensor<?x?xf32, ["...", "$0"]>) -> tensor<?x?xf32, ["...", "$0"]>
  %10 = "tile.cast"(%9) : (tensor<?x?xf32, ["...", "$0"]>) -> tensor<?x?xf16, ["...", "$0"]>
  return %10 : tensor<?x?xf16, ["...", "$0"]>
}

// -----

// Softmax with an element-wise epilogue taking a scalar parameter.
// CHECK-LABEL: func.func @softmax_scale(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x8xf32>, %[[S:[^:]*]]: tensor<f32>
// CHECK-NEXT:    %[[G:.*]] = "tile.fused"(%[[X]], %[[S]]) ({
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<4x8xf32>, %[[B:[^:]*]]: tensor<f32>):
// CHECK-NEXT:      %[[P:.*]] = "tile.softmax"(%[[A]])
// CHECK-NEXT:      %[[R:.*]] = "tile.mul"(%[[P]], %[[B]])
// CHECK-NEXT:      "tile.yield"(%[[R]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    return %[[G]]

func.func @softmax_scale(%arg0: tensor<4x8xf32>, %arg1: tensor<f32> {tile.name = "s", tile.scalar}) -> tensor<4x8xf32> {
  %0 = "tile.softmax"(%arg0) {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "tile.mul"(%0, %arg1) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// RMSNorm: the weight's cast and broadcast join the row group; three inputs of three types
// are three operand segments.
// CHECK-LABEL: func.func @rmsnorm(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x8xbf16>, %[[W:[^:]*]]: tensor<8xbf16>, %[[EPS:[^:]*]]: tensor<f32>
// CHECK-NEXT:    %[[G:.*]] = "tile.fused"(%[[X]], %[[W]], %[[EPS]]) ({
// CHECK-NEXT:    ^bb0(%[[XA:[^:]*]]: tensor<4x8xbf16>, %[[WA:[^:]*]]: tensor<8xbf16>, %[[EA:[^:]*]]: tensor<f32>):
// CHECK:           %[[MS:.*]] = "tile.reduce"
// CHECK-NEXT:      "tile.add"(%[[MS]], %[[EA]])
// CHECK:           "tile.cast"(%[[WA]]) : (tensor<8xbf16>) -> tensor<8xf32>
// CHECK:           %[[Y:.*]] = "tile.cast"({{.*}}) : (tensor<4x8xf32>) -> tensor<4x8xbf16>
// CHECK-NEXT:      "tile.yield"(%[[Y]])
// CHECK-NEXT:    }) {operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0, 0, 0>, resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>, tile.buffers = array<i64: 0>, tile.group = 0 : i64, tile.reuse = array<i64: -1>}
// CHECK-NEXT:    return %[[G]]

func.func @rmsnorm(%arg0: tensor<4x8xbf16>, %arg1: tensor<8xbf16>, %arg2: tensor<f32> {tile.name = "eps", tile.scalar}) -> tensor<4x8xbf16> {
  %0 = "tile.cast"(%arg0) : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %1 = "tile.mul"(%0, %0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "tile.reduce"(%1) {axes = array<i64: -1>, keepdims = true, kind = "mean"} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %3 = "tile.add"(%2, %arg2) : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %4 = "tile.rsqrt"(%3) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = "tile.broadcast"(%4) : (tensor<4x1xf32>) -> tensor<4x8xf32>
  %6 = "tile.mul"(%0, %5) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %7 = "tile.cast"(%arg1) : (tensor<8xbf16>) -> tensor<8xf32>
  %8 = "tile.broadcast"(%7) : (tensor<8xf32>) -> tensor<4x8xf32>
  %9 = "tile.mul"(%6, %8) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %10 = "tile.cast"(%9) : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  return %10 : tensor<4x8xbf16>
}

// -----

// matmul + bias + relu: the matmul group takes its element-wise epilogue and the bias's
// broadcast.
// CHECK-LABEL: func.func @mlp(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x16xf32>, %[[W:[^:]*]]: tensor<16x8xf32>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK-NEXT:    %[[G:.*]] = "tile.fused"(%[[X]], %[[W]], %[[B]]) ({
// CHECK-NEXT:    ^bb0(%[[XA:[^:]*]]: tensor<4x16xf32>, %[[WA:[^:]*]]: tensor<16x8xf32>, %[[BA:[^:]*]]: tensor<8xf32>):
// CHECK-NEXT:      %[[MM:.*]] = "tile.matmul"(%[[XA]], %[[WA]])
// CHECK-NEXT:      %[[BB:.*]] = "tile.broadcast"(%[[BA]])
// CHECK-NEXT:      %[[SUM:.*]] = "tile.add"(%[[MM]], %[[BB]])
// CHECK-NEXT:      %[[R:.*]] = "tile.relu"(%[[SUM]])
// CHECK-NEXT:      "tile.yield"(%[[R]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    return %[[G]]

func.func @mlp(%arg0: tensor<4x16xf32>, %arg1: tensor<16x8xf32>, %arg2: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = "tile.matmul"(%arg0, %arg1) : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %1 = "tile.broadcast"(%arg2) : (tensor<8xf32>) -> tensor<4x8xf32>
  %2 = "tile.add"(%0, %1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "tile.relu"(%2) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

// A matmul's producers stay in their own group.
// CHECK-LABEL: func.func @producer(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x16xf16>, %[[W:[^:]*]]: tensor<16x8xf32>)
// CHECK-NEXT:    %[[RELU:.*]] = "tile.fused"(%[[X]]) ({
// CHECK-NEXT:    ^bb0(%[[XA:[^:]*]]: tensor<4x16xf16>):
// CHECK-NEXT:      %[[C:.*]] = "tile.cast"(%[[XA]])
// CHECK-NEXT:      %[[R:.*]] = "tile.relu"(%[[C]])
// CHECK-NEXT:      "tile.yield"(%[[R]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    %[[MM:.*]] = "tile.fused"(%[[W]], %[[RELU]]) ({
// CHECK-NEXT:    ^bb0(%[[WA:[^:]*]]: tensor<16x8xf32>, %[[LHS:[^:]*]]: tensor<4x16xf32>):
// CHECK-NEXT:      %[[P:.*]] = "tile.matmul"(%[[LHS]], %[[WA]])
// CHECK-NEXT:      "tile.yield"(%[[P]])
// CHECK-NEXT:    }) {{.*}}tile.group = 1 : i64
// CHECK-NEXT:    return %[[MM]]

func.func @producer(%arg0: tensor<4x16xf16>, %arg1: tensor<16x8xf32>) -> tensor<4x8xf32> {
  %0 = "tile.cast"(%arg0) : (tensor<4x16xf16>) -> tensor<4x16xf32>
  %1 = "tile.relu"(%0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %2 = "tile.matmul"(%1, %arg1) : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// Reductions over different rows (a row mean, then column sums of what depends on it) are
// two groups; the broadcast and sub are the prologue of the second.
// CHECK-LABEL: func.func @two_rows(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x8xf32>)
// CHECK-NEXT:    %[[MEAN:.*]] = "tile.fused"(%[[X]]) ({
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<4x8xf32>):
// CHECK-NEXT:      %[[M:.*]] = "tile.reduce"(%[[A]]) {axes = array<i64: -1>
// CHECK-NEXT:      "tile.yield"(%[[M]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    %[[SUMS:.*]] = "tile.fused"(%[[X]], %[[MEAN]]) ({
// CHECK-NEXT:    ^bb0(%[[XA:[^:]*]]: tensor<4x8xf32>, %[[MA:[^:]*]]: tensor<4x1xf32>):
// CHECK-NEXT:      %[[MB:.*]] = "tile.broadcast"(%[[MA]])
// CHECK-NEXT:      %[[D:.*]] = "tile.sub"(%[[XA]], %[[MB]])
// CHECK-NEXT:      %[[S:.*]] = "tile.reduce"(%[[D]]) {axes = array<i64: -2>
// CHECK-NEXT:      "tile.yield"(%[[S]])
// CHECK-NEXT:    }) {{.*}}tile.group = 1 : i64
// CHECK-NEXT:    return %[[SUMS]]

func.func @two_rows(%arg0: tensor<4x8xf32>) -> tensor<1x8xf32> {
  %0 = "tile.reduce"(%arg0) {axes = array<i64: -1>, keepdims = true, kind = "mean"} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %1 = "tile.broadcast"(%0) : (tensor<4x1xf32>) -> tensor<4x8xf32>
  %2 = "tile.sub"(%arg0, %1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "tile.reduce"(%2) {axes = array<i64: -2>, keepdims = true, kind = "sum"} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  return %3 : tensor<1x8xf32>
}

// -----

// Recompute: c = cast(x) * 2 is element-wise from one argument, so both reductions (over
// different rows) recompute it and read x itself; c is never written to memory.
// CHECK-LABEL: func.func @recompute(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x8xf16>)
// CHECK-NEXT:    %[[ROWS:.*]] = "tile.fused"(%[[X]]) ({
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<4x8xf16>):
// CHECK-NEXT:      %[[C:.*]] = "tile.cast"(%[[A]])
// CHECK-NEXT:      %[[TWO:.*]] = "tile.constant"
// CHECK-NEXT:      %[[M:.*]] = "tile.mul"(%[[C]], %[[TWO]])
// CHECK-NEXT:      %[[R:.*]] = "tile.reduce"(%[[M]]) {axes = array<i64: -1>
// CHECK-NEXT:      "tile.yield"(%[[R]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    %[[COLS:.*]] = "tile.fused"(%[[X]]) ({
// CHECK-NEXT:    ^bb0(%[[B:[^:]*]]: tensor<4x8xf16>):
// CHECK-NEXT:      %[[C2:.*]] = "tile.cast"(%[[B]])
// CHECK-NEXT:      %[[TWO2:.*]] = "tile.constant"
// CHECK-NEXT:      %[[M2:.*]] = "tile.mul"(%[[C2]], %[[TWO2]])
// CHECK-NEXT:      %[[R2:.*]] = "tile.reduce"(%[[M2]]) {axes = array<i64: -2>
// CHECK-NEXT:      "tile.yield"(%[[R2]])
// CHECK-NEXT:    }) {{.*}}tile.group = 1 : i64
// CHECK-NEXT:    return %[[ROWS]], %[[COLS]]

func.func @recompute(%arg0: tensor<4x8xf16>) -> (tensor<4x1xf32>, tensor<1x8xf32>) {
  %0 = "tile.cast"(%arg0) : (tensor<4x8xf16>) -> tensor<4x8xf32>
  %1 = "tile.constant"() {value = 2.000000e+00 : f64} : () -> tensor<f32>
  %2 = "tile.mul"(%0, %1) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = "tile.reduce"(%2) {axes = array<i64: -1>, keepdims = true, kind = "sum"} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %4 = "tile.reduce"(%2) {axes = array<i64: -2>, keepdims = true, kind = "max"} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  return %3, %4 : tensor<4x1xf32>, tensor<1x8xf32>
}

// -----

// Materialise: c = cast(x) * cast(y) reads two arguments, so it is written once, as a second
// output of the group that computes it, and read by the other.
// CHECK-LABEL: func.func @materialise(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x8xf16>, %[[Y:[^:]*]]: tensor<4x8xf16>)
// CHECK-NEXT:    %[[G:.*]]:2 = "tile.fused"(%[[X]], %[[Y]]) ({
// CHECK:           %[[C:.*]] = "tile.mul"
// CHECK-NEXT:      %[[R:.*]] = "tile.reduce"(%[[C]]) {axes = array<i64: -1>
// CHECK-NEXT:      "tile.yield"(%[[C]], %[[R]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    %[[COLS:.*]] = "tile.fused"(%[[G]]#0) ({
// CHECK-NEXT:    ^bb0(%[[CA:[^:]*]]: tensor<4x8xf32>):
// CHECK-NEXT:      %[[R2:.*]] = "tile.reduce"(%[[CA]]) {axes = array<i64: -2>
// CHECK-NEXT:      "tile.yield"(%[[R2]])
// CHECK-NEXT:    }) {{.*}}tile.group = 1 : i64
// CHECK-NEXT:    return %[[G]]#1, %[[COLS]]

func.func @materialise(%arg0: tensor<4x8xf16>, %arg1: tensor<4x8xf16>) -> (tensor<4x1xf32>, tensor<1x8xf32>) {
  %0 = "tile.cast"(%arg0) : (tensor<4x8xf16>) -> tensor<4x8xf32>
  %1 = "tile.cast"(%arg1) : (tensor<4x8xf16>) -> tensor<4x8xf32>
  %2 = "tile.mul"(%0, %1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "tile.reduce"(%2) {axes = array<i64: -1>, keepdims = true, kind = "sum"} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %4 = "tile.reduce"(%2) {axes = array<i64: -2>, keepdims = true, kind = "max"} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  return %3, %4 : tensor<4x1xf32>, tensor<1x8xf32>
}

// -----

// Materialise: a reduction result used by two groups is an output of its group.
// CHECK-LABEL: func.func @reduced_twice(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x8xf32>)
// CHECK-NEXT:    %[[G:.*]]:2 = "tile.fused"(%[[X]]) ({
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<4x8xf32>):
// CHECK-NEXT:      %[[S:.*]] = "tile.reduce"(%[[A]])
// CHECK-NEXT:      %[[E:.*]] = "tile.exp"(%[[S]])
// CHECK-NEXT:      "tile.yield"(%[[S]], %[[E]])
// CHECK-NEXT:    }) {{.*}}tile.buffers = array<i64: 0, 1>, tile.group = 0 : i64
// CHECK-NEXT:    %[[MAX:.*]] = "tile.fused"(%[[G]]#0) ({
// CHECK:           "tile.reduce"({{.*}}) {axes = array<i64: -2>
// CHECK:         }) {{.*}}tile.group = 1 : i64
// CHECK-NEXT:    return %[[G]]#1, %[[MAX]]

func.func @reduced_twice(%arg0: tensor<4x8xf32>) -> (tensor<4x1xf32>, tensor<1x1xf32>) {
  %0 = "tile.reduce"(%arg0) {axes = array<i64: -1>, keepdims = true, kind = "sum"} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %1 = "tile.exp"(%0) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %2 = "tile.reduce"(%0) {axes = array<i64: -2>, keepdims = true, kind = "max"} : (tensor<4x1xf32>) -> tensor<1x1xf32>
  return %1, %2 : tensor<4x1xf32>, tensor<1x1xf32>
}

// -----

// No cycle: p (softmax) feeds the matmul's producer (p * 2) and the transpose's epilogue.
// Putting both users of p in one group would make that group feed the matmul and read it, so the
// matmul group stands between them.
// CHECK-LABEL: func.func @cycle(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<8x8xf32>, %[[W:[^:]*]]: tensor<8x8xf32>)
// CHECK-NEXT:    %[[P:.*]]:2 = "tile.fused"(%[[X]]) ({
// CHECK-NEXT:    ^bb0(%[[A:[^:]*]]: tensor<8x8xf32>):
// CHECK-NEXT:      %[[SM:.*]] = "tile.softmax"(%[[A]])
// CHECK-NEXT:      %[[TWO:.*]] = "tile.constant"
// CHECK-NEXT:      %[[P2:.*]] = "tile.mul"(%[[SM]], %[[TWO]])
// CHECK-NEXT:      "tile.yield"(%[[SM]], %[[P2]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    %[[MM:.*]] = "tile.fused"(%[[W]], %[[P]]#1) ({
// CHECK-NEXT:    ^bb0(%[[WA:[^:]*]]: tensor<8x8xf32>, %[[LHS:[^:]*]]: tensor<8x8xf32>):
// CHECK-NEXT:      %[[M:.*]] = "tile.matmul"(%[[LHS]], %[[WA]])
// CHECK-NEXT:      "tile.yield"(%[[M]])
// CHECK-NEXT:    }) {{.*}}tile.group = 1 : i64
// CHECK-NEXT:    %[[OUT:.*]] = "tile.fused"(%[[P]]#0, %[[MM]]) ({
// CHECK-NEXT:    ^bb0(%[[PA:[^:]*]]: tensor<8x8xf32>, %[[MA:[^:]*]]: tensor<8x8xf32>):
// CHECK-NEXT:      %[[T:.*]] = "tile.transpose"(%[[MA]])
// CHECK-NEXT:      %[[R:.*]] = "tile.add"(%[[T]], %[[PA]])
// CHECK-NEXT:      "tile.yield"(%[[R]])
// CHECK-NEXT:    }) {{.*}}tile.group = 2 : i64
// CHECK-NEXT:    return %[[OUT]]

func.func @cycle(%arg0: tensor<8x8xf32>, %arg1: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = "tile.softmax"(%arg0) {axis = -1 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = "tile.constant"() {value = 2.000000e+00 : f64} : () -> tensor<f32>
  %2 = "tile.mul"(%0, %1) : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %3 = "tile.matmul"(%2, %arg1) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %4 = "tile.transpose"(%3) {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %5 = "tile.add"(%4, %0) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  return %5 : tensor<8x8xf32>
}

// -----

// Buffer reuse, dead before: c (buffer 2) takes a's buffer 0, read last by group 1.  b cannot
// take a in group 1 (a softmax reads whole columns of a), and the result never takes a buffer.
// CHECK-LABEL: func.func @reuse_dead(
// CHECK:         tile.buffers = array<i64: 0>, tile.group = 0 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 1>, tile.group = 1 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 2>, tile.group = 2 : i64, tile.reuse = array<i64: 0>}
// CHECK:         tile.buffers = array<i64: 3>, tile.group = 3 : i64, tile.reuse = array<i64: -1>}
// CHECK-NEXT:    return

func.func @reuse_dead(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "tile.softmax"(%arg0) {axis = -2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "tile.softmax"(%0) {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "tile.softmax"(%1) {axis = -2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "tile.softmax"(%2) {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

// No reuse across byte sizes: c, the f32[1, 8] column sums, cannot take a, f32[4, 8].
// CHECK-LABEL: func.func @reuse_size(
// CHECK:         tile.buffers = array<i64: 0>, tile.group = 0 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 1>, tile.group = 1 : i64, tile.reuse = array<i64: -1>}
// CHECK:         "tile.reduce"{{.*}} : (tensor<4x8xf32>) -> tensor<1x8xf32>
// CHECK:         tile.buffers = array<i64: 2>, tile.group = 2 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 3>, tile.group = 3 : i64, tile.reuse = array<i64: -1>}

func.func @reuse_size(%arg0: tensor<4x8xf32>) -> tensor<1x8xf32> {
  %0 = "tile.softmax"(%arg0) {axis = -2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "tile.softmax"(%0) {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "tile.reduce"(%1) {axes = array<i64: -2>, keepdims = true, kind = "sum"} : (tensor<4x8xf32>) -> tensor<1x8xf32>
  %3 = "tile.softmax"(%2) {axis = -1 : i64} : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %3 : tensor<1x8xf32>
}

// -----

// Buffer reuse compares byte sizes as polynomials: c, f16[2*n, m], takes a, f32[n, 2*m]
// (8*m*n bytes each: an intermediate float16 value is stored as float32); b, alive until
// group 3, is no candidate.
// CHECK-LABEL: func.func @reuse_bytes(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<?x?xf32, ["n", "2*m"]>, %[[Y:[^:]*]]: tensor<?x?xf16, ["2*n", "m"]>)
// CHECK:         tile.buffers = array<i64: 0>, tile.group = 0 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 1>, tile.group = 1 : i64, tile.reuse = array<i64: -1>}
// CHECK:         "tile.fused"(%[[Y]])
// CHECK:         tile.buffers = array<i64: 2>, tile.group = 2 : i64, tile.reuse = array<i64: 0>}
// CHECK:         tile.buffers = array<i64: 3>, tile.group = 3 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 4>, tile.group = 4 : i64, tile.reuse = array<i64: -1>}

func.func @reuse_bytes(%arg0: tensor<?x?xf32, ["n", "2*m"]>, %arg1: tensor<?x?xf16, ["2*n", "m"]>) -> (tensor<1x?xf32, ["1", "2*m"]>, tensor<?x?xf16, ["2*n", "m"]>) {
  %0 = "tile.softmax"(%arg0) {axis = -2 : i64} : (tensor<?x?xf32, ["n", "2*m"]>) -> tensor<?x?xf32, ["n", "2*m"]>
  %1 = "tile.softmax"(%0) {axis = -1 : i64} : (tensor<?x?xf32, ["n", "2*m"]>) -> tensor<?x?xf32, ["n", "2*m"]>
  %2 = "tile.softmax"(%arg1) {axis = -2 : i64} : (tensor<?x?xf16, ["2*n", "m"]>) -> tensor<?x?xf16, ["2*n", "m"]>
  %3 = "tile.reduce"(%1) {axes = array<i64: -2>, keepdims = true, kind = "sum"} : (tensor<?x?xf32, ["n", "2*m"]>) -> tensor<1x?xf32, ["1", "2*m"]>
  %4 = "tile.softmax"(%2) {axis = -1 : i64} : (tensor<?x?xf16, ["2*n", "m"]>) -> tensor<?x?xf16, ["2*n", "m"]>
  return %3, %4 : tensor<1x?xf32, ["1", "2*m"]>, tensor<?x?xf16, ["2*n", "m"]>
}

// -----

// Buffer reuse in place: group 1 is a's last reader and reads it only element-wise (the add),
// so b, of a's shape, takes a's buffer.
// CHECK-LABEL: func.func @in_place(
// CHECK:         tile.buffers = array<i64: 0>, tile.group = 0 : i64, tile.reuse = array<i64: -1>}
// CHECK-NEXT:    "tile.fused"
// CHECK-NEXT:    ^bb0(%[[X:[^:]*]]: tensor<4x8xf32>, %[[A:[^:]*]]: tensor<4x8xf32>):
// CHECK-NEXT:      %[[S:.*]] = "tile.softmax"(%[[X]])
// CHECK-NEXT:      %[[B:.*]] = "tile.add"(%[[S]], %[[A]])
// CHECK-NEXT:      "tile.yield"(%[[B]])
// CHECK-NEXT:    }) {{.*}}tile.buffers = array<i64: 1>, tile.group = 1 : i64, tile.reuse = array<i64: 0>}

func.func @in_place(%arg0: tensor<4x8xf32>, %arg1: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = "tile.softmax"(%arg0) {axis = -2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "tile.softmax"(%arg0) {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "tile.add"(%1, %0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "tile.matmul"(%2, %arg1) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

// No reuse in place when the last reader reads a through a reduction (softmax(x + a)).
// CHECK-LABEL: func.func @not_in_place(
// CHECK:         tile.buffers = array<i64: 0>, tile.group = 0 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 1>, tile.group = 1 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 2>, tile.group = 2 : i64, tile.reuse = array<i64: -1>}

func.func @not_in_place(%arg0: tensor<4x8xf32>, %arg1: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = "tile.softmax"(%arg0) {axis = -2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "tile.add"(%arg0, %0) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "tile.softmax"(%1) {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "tile.matmul"(%2, %arg1) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

// Never an argument: x is dead after group 0, which reads it element-wise and writes exp(x)
// of its size, yet exp(x) takes no buffer.
// CHECK-LABEL: func.func @never_argument(
// CHECK:         "tile.exp"
// CHECK:         tile.buffers = array<i64: 0>, tile.group = 0 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 1>, tile.group = 1 : i64, tile.reuse = array<i64: -1>}

func.func @never_argument(%arg0: tensor<4x8xf32>, %arg1: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = "tile.exp"(%arg0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "tile.matmul"(%0, %arg1) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// Never a function result: a is returned, so c cannot take its buffer although a is read
// last by group 1 (compare reuse_dead, where c takes it).
// CHECK-LABEL: func.func @never_result(
// CHECK:         tile.buffers = array<i64: 0>, tile.group = 0 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 1>, tile.group = 1 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 2>, tile.group = 2 : i64, tile.reuse = array<i64: -1>}
// CHECK:         tile.buffers = array<i64: 3>, tile.group = 3 : i64, tile.reuse = array<i64: -1>}

func.func @never_result(%arg0: tensor<4x8xf32>, %arg1: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = "tile.softmax"(%arg0) {axis = -2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "tile.softmax"(%0) {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "tile.softmax"(%1) {axis = -2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "tile.matmul"(%2, %arg1) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  return %0, %3 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A hint on a value computed in a group moves into the group's region; a hint on an
// argument stays in the function.
// CHECK-LABEL: func.func @hints(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4x8xf32>, %[[T:[^:]*]]: tensor<8xf32>)
// CHECK-NEXT:    "tile.hint"(%[[T]]) {level = "L2", name = "t"}
// CHECK-NEXT:    %[[G:.*]] = "tile.fused"(%[[X]], %[[T]]) ({
// CHECK-NEXT:    ^bb0(%[[XA:[^:]*]]: tensor<4x8xf32>, %[[TA:[^:]*]]: tensor<8xf32>):
// CHECK-NEXT:      %[[E:.*]] = "tile.exp"(%[[XA]])
// CHECK-NEXT:      %[[TB:.*]] = "tile.broadcast"(%[[TA]])
// CHECK-NEXT:      %[[R:.*]] = "tile.mul"(%[[E]], %[[TB]])
// CHECK-NEXT:      "tile.hint"(%[[E]]) {level = "L1", name = "e"}
// CHECK-NEXT:      "tile.yield"(%[[R]])
// CHECK-NEXT:    }) {{.*}}tile.group = 0 : i64
// CHECK-NEXT:    return %[[G]]

func.func @hints(%arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = "tile.exp"(%arg0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "tile.broadcast"(%arg1) : (tensor<8xf32>) -> tensor<4x8xf32>
  %2 = "tile.mul"(%0, %1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  "tile.hint"(%0) {level = "L1", name = "e"} : (tensor<4x8xf32>) -> ()
  "tile.hint"(%arg1) {level = "L2", name = "t"} : (tensor<8xf32>) -> ()
  return %2 : tensor<4x8xf32>
}
