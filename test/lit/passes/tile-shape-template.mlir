// tile-shape-template: one clone per binding, symbols folded into types, slice bounds and
// checks; the dispatch table on the module. Running the pass twice changes nothing.
// RUN: tilec-opt %s --split-input-file -p tile-shape-template | FileCheck %s
// RUN: tilec-opt %s --split-input-file -p tile-shape-template,tile-shape-template | FileCheck %s
// RUN: tilec-opt %s --split-input-file -p 'tile-shape-template{no-generic=true}' | FileCheck %s --check-prefix=NOGEN

// The RMSNorm example from source: its pragma, --no-generic, --template overriding the pragma,
// and -D fixing the templated symbol (one function, no dispatch).
// RUN: tilec %examples/rmsnorm_templated.tile --emit=opt --verify-each --pass-pipeline=tile-shape-template,tile-canonicalize | FileCheck %s --check-prefix=RMS
// RUN: tilec %examples/rmsnorm_templated.tile --emit=opt --verify-each --pass-pipeline=tile-shape-template --no-generic | FileCheck %s --check-prefix=DROP
// RUN: tilec %examples/rmsnorm_templated.tile --emit=opt --verify-each --pass-pipeline=tile-shape-template --template seq=1,2 | FileCheck %s --check-prefix=TPL
// RUN: tilec %examples/rmsnorm_templated.tile --emit=opt --verify-each --pass-pipeline=tile-shape-template -D seq=2048 | FileCheck %s --check-prefix=FIXED

// RMS: module attributes {tile.dispatch = {rmsnorm = {generic = "rmsnorm", variants = [{binding = {seq = 2048 : i64}, fn = "rmsnorm__seq_2048"}, {binding = {seq = 8192 : i64}, fn = "rmsnorm__seq_8192"}, {binding = {seq = 32768 : i64}, fn = "rmsnorm__seq_32768"}]}}}
// RMS-LABEL: func.func @rmsnorm(
// RMS-SAME: tensor<?x?xbf16, ["seq", "hidden"]> {tile.name = "x"}
// RMS-SAME: attributes {tile.symbols = ["seq", "hidden"]} {
// RMS-LABEL: func.func @rmsnorm__seq_2048(
// RMS-SAME: %{{[^:]+}}: tensor<2048x?xbf16, ["2048", "hidden"]> {tile.name = "x"}, %{{[^:]+}}: tensor<?xbf16, ["hidden"]> {tile.name = "weight"}
// RMS-SAME: -> tensor<2048x?xbf16, ["2048", "hidden"]> attributes {tile.binding = {seq = 2048 : i64}, tile.symbols = ["seq", "hidden"], tile.variant_of = "rmsnorm"} {
// RMS: "tile.reduce"
// RMS-SAME: -> tensor<2048x1xf32>
// RMS-LABEL: func.func @rmsnorm__seq_8192(
// RMS-SAME: tensor<8192x?xbf16, ["8192", "hidden"]>
// RMS-LABEL: func.func @rmsnorm__seq_32768(
// RMS-SAME: tensor<32768x?xbf16, ["32768", "hidden"]>
// RMS-NOT: func.func

// DROP: module attributes {tile.dispatch = {rmsnorm = {generic = "", variants = [{binding = {seq = 2048 : i64}, fn = "rmsnorm__seq_2048"}, {binding = {seq = 8192 : i64}, fn = "rmsnorm__seq_8192"}, {binding = {seq = 32768 : i64}, fn = "rmsnorm__seq_32768"}]}}}
// DROP-NOT: func.func @rmsnorm(
// DROP: func.func @rmsnorm__seq_2048(
// DROP-NOT: func.func @rmsnorm(

// TPL: module attributes {tile.dispatch = {rmsnorm = {generic = "rmsnorm", variants = [{binding = {seq = 1 : i64}, fn = "rmsnorm__seq_1"}, {binding = {seq = 2 : i64}, fn = "rmsnorm__seq_2"}]}}}
// TPL-NEXT: func.func @rmsnorm(
// TPL: func.func @rmsnorm__seq_1(%{{[^:]+}}: tensor<1x?xbf16, ["1", "hidden"]>
// TPL: func.func @rmsnorm__seq_2(%{{[^:]+}}: tensor<2x?xbf16, ["2", "hidden"]>
// TPL-NOT: func.func

// FIXED: module {
// FIXED-NEXT: func.func @rmsnorm(%{{[^:]+}}: tensor<2048x?xbf16, ["2048", "hidden"]>
// FIXED-SAME: attributes {tile.symbols = ["hidden"]} {
// FIXED-NOT: func.func

// One template: the variants follow the generic, in the order of the values. A dimension
// that folds to a constant becomes static; "2*h" becomes "8"; a check that now always holds
// is erased, one that still depends on a symbol keeps its folded operands.
// CHECK: module attributes {tile.dispatch = {halves = {generic = "halves", variants = [{binding = {h = 4 : i64}, fn = "halves__h_4"}, {binding = {h = 16 : i64}, fn = "halves__h_16"}]}}}
// NOGEN: module attributes {tile.dispatch = {halves = {generic = "", variants = [{binding = {h = 4 : i64}, fn = "halves__h_4"}, {binding = {h = 16 : i64}, fn = "halves__h_16"}]}}}

// CHECK-LABEL: func.func @halves(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x?xf16, ["seq", "2*h"]> {tile.name = "x"}) -> tensor<?x?xf16, ["seq", "h"]>
// CHECK-SAME: attributes {tile.symbols = ["seq", "h"]} {
// CHECK-NEXT: "tile.check"() {lhs = "1", message = "h must be positive", rel = "le", rhs = "h"}
// CHECK-NEXT: "tile.check"() {lhs = "h", message = "h exceeds seq", rel = "le", rhs = "seq"}
// CHECK-NEXT: %[[S:.*]] = "tile.slice"(%[[X]]) {ends = ["seq", "2*h"], starts = ["0", "h"]} : (tensor<?x?xf16, ["seq", "2*h"]>) -> tensor<?x?xf16, ["seq", "h"]>
// CHECK-NEXT: return %[[S]]

// CHECK-LABEL: func.func @halves__h_4(
// NOGEN-NOT: func.func @halves(
// NOGEN-LABEL: func.func @halves__h_4(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x8xf16, ["seq", "8"]> {tile.name = "x"}) -> tensor<?x4xf16, ["seq", "4"]>
// CHECK-SAME: attributes {tile.binding = {h = 4 : i64}, tile.symbols = ["seq", "h"], tile.variant_of = "halves"} {
// CHECK-NEXT: "tile.check"() {lhs = "4", message = "h exceeds seq", rel = "le", rhs = "seq"}
// CHECK-NEXT: %[[S:.*]] = "tile.slice"(%[[X]]) {ends = ["seq", "8"], starts = ["0", "4"]} : (tensor<?x8xf16, ["seq", "8"]>) -> tensor<?x4xf16, ["seq", "4"]>
// CHECK-NEXT: return %[[S]]

// CHECK-LABEL: func.func @halves__h_16(
// NOGEN-LABEL: func.func @halves__h_16(
// CHECK-SAME: tensor<?x32xf16, ["seq", "32"]>
// CHECK-SAME: tile.binding = {h = 16 : i64}
// CHECK-NEXT: "tile.check"() {lhs = "16", message = "h exceeds seq", rel = "le", rhs = "seq"}
// CHECK-NEXT: "tile.slice"
// CHECK-SAME: {ends = ["seq", "32"], starts = ["0", "16"]}
func.func @halves(%x: tensor<?x?xf16, ["seq", "2*h"]> {tile.name = "x"}) -> tensor<?x?xf16, ["seq", "h"]>
    attributes {tile.symbols = ["seq", "h"], tile.templates = {h = array<i64: 4, 16>}} {
  "tile.check"() {lhs = "1", message = "h must be positive", rel = "le", rhs = "h"} : () -> ()
  "tile.check"() {lhs = "h", message = "h exceeds seq", rel = "le", rhs = "seq"} : () -> ()
  %0 = "tile.slice"(%x) {ends = ["seq", "2*h"], starts = ["0", "h"]} : (tensor<?x?xf16, ["seq", "2*h"]>) -> tensor<?x?xf16, ["seq", "h"]>
  return %0 : tensor<?x?xf16, ["seq", "h"]>
}

// -----

// Two templates multiply. Variant names list the symbols in ABI order (tile.symbols), not in
// the alphabetical order of MLIR dictionaries, and the variants vary the last symbol fastest. Fully static types lose their encoding; a
// scalar parameter and the other function are untouched.
// CHECK: module attributes {tile.dispatch = {scale = {generic = "scale", variants = [{binding = {cols = 8 : i64, rows = 2 : i64}, fn = "scale__rows_2__cols_8"}, {binding = {cols = 16 : i64, rows = 2 : i64}, fn = "scale__rows_2__cols_16"}, {binding = {cols = 8 : i64, rows = 3 : i64}, fn = "scale__rows_3__cols_8"}, {binding = {cols = 16 : i64, rows = 3 : i64}, fn = "scale__rows_3__cols_16"}]}}}
// CHECK-LABEL: func.func @scale(
// CHECK-LABEL: func.func @scale__rows_2__cols_8(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x8xf32> {tile.name = "x"}, %[[S:[^:]+]]: tensor<f32> {tile.name = "s", tile.scalar}) -> tensor<2x8xf32>
// CHECK-NEXT: %[[B:.*]] = "tile.broadcast"(%[[S]]) : (tensor<f32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[M:.*]] = "tile.mul"(%[[X]], %[[B]]) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: return %[[M]] : tensor<2x8xf32>
// CHECK-LABEL: func.func @scale__rows_2__cols_16(
// CHECK-SAME: tensor<2x16xf32>
// CHECK-LABEL: func.func @scale__rows_3__cols_8(
// CHECK-SAME: tensor<3x8xf32>
// CHECK-LABEL: func.func @scale__rows_3__cols_16(
// CHECK-SAME: tensor<3x16xf32>
// CHECK-LABEL: func.func @plain(
// CHECK-SAME: tensor<?xf32, ["rows"]>
// CHECK-NOT: tile.variant_of
func.func @scale(%x: tensor<?x?xf32, ["rows", "cols"]> {tile.name = "x"}, %s: tensor<f32> {tile.name = "s", tile.scalar}) -> tensor<?x?xf32, ["rows", "cols"]>
    attributes {tile.symbols = ["rows", "cols"], tile.templates = {cols = array<i64: 8, 16>, rows = array<i64: 2, 3>}} {
  %0 = "tile.broadcast"(%s) : (tensor<f32>) -> tensor<?x?xf32, ["rows", "cols"]>
  %1 = "tile.mul"(%x, %0) : (tensor<?x?xf32, ["rows", "cols"]>, tensor<?x?xf32, ["rows", "cols"]>) -> tensor<?x?xf32, ["rows", "cols"]>
  return %1 : tensor<?x?xf32, ["rows", "cols"]>
}
func.func @plain(%x: tensor<?xf32, ["rows"]> {tile.name = "x"}) -> tensor<?xf32, ["rows"]>
    attributes {tile.symbols = ["rows"]} {
  return %x : tensor<?xf32, ["rows"]>
}

// -----

// Rank-generic functions keep their '...' dimension, and so their encoding.
// CHECK-LABEL: func.func @lead__n_4(
// CHECK-SAME: %[[X:[^:]+]]: tensor<?x4xf32, ["...", "4"]> {tile.name = "x"}) -> tensor<?x1xf32, ["...", "1"]>
// CHECK-SAME: tile.lead = []
// CHECK-NEXT: %[[R:.*]] = "tile.reduce"(%[[X]]) {axes = array<i64: -1>, keepdims = true, kind = "max"} : (tensor<?x4xf32, ["...", "4"]>) -> tensor<?x1xf32, ["...", "1"]>
// CHECK-NEXT: return %[[R]]
func.func @lead(%x: tensor<?x?xf32, ["...", "n"]> {tile.name = "x"}) -> tensor<?x1xf32, ["...", "1"]>
    attributes {tile.lead = [], tile.symbols = ["n"], tile.templates = {n = array<i64: 4>}} {
  %0 = "tile.reduce"(%x) {axes = array<i64: -1>, keepdims = true, kind = "max"} : (tensor<?x?xf32, ["...", "n"]>) -> tensor<?x1xf32, ["...", "1"]>
  return %0 : tensor<?x1xf32, ["...", "1"]>
}

// -----

// Nothing templated: no dispatch table, nothing cloned (already specialised IR stays as is).
// CHECK: module {
// CHECK-LABEL: func.func @done__n_4(
// CHECK-SAME: attributes {tile.binding = {n = 4 : i64}, tile.symbols = ["n"], tile.variant_of = "done"}
// CHECK-NOT: func.func
func.func @done__n_4(%x: tensor<4xf32> {tile.name = "x"}) -> tensor<4xf32>
    attributes {tile.binding = {n = 4 : i64}, tile.symbols = ["n"], tile.variant_of = "done"} {
  return %x : tensor<4xf32>
}

// -----

// A variant the front end made (a run-time broadcast's other direction) joins its function's
// dispatch entry after the function's own clones; its own templates are cloned bound as it is.
// CHECK: tile.dispatch = {f = {generic = "f", variants = [{binding = {b = 1 : i64}, fn = "f__b_1"}, {binding = {cb = 1 : i64, n = 4 : i64}, fn = "f__cb_1__n_4"}, {binding = {cb = 1 : i64}, fn = "f__cb_1"}]}}
// CHECK-LABEL: func.func @f(
// CHECK-LABEL: func.func @f__b_1(
// CHECK-LABEL: func.func @f__cb_1(
// CHECK-SAME: tile.binding = {cb = 1 : i64}, tile.symbols = ["b", "n", "cb"], tile.variant_of = "f"
// CHECK-LABEL: func.func @f__cb_1__n_4(
// CHECK-SAME: %{{.*}}: tensor<?x4xf32, ["b", "4"]> {tile.name = "x"}
// CHECK-SAME: tile.binding = {cb = 1 : i64, n = 4 : i64}, tile.symbols = ["b", "n", "cb"], tile.variant_of = "f"
func.func @f(%x: tensor<?x?xf32, ["b", "n"]> {tile.name = "x"}, %c: tensor<?x?xf32, ["cb", "n"]> {tile.name = "c"}) -> tensor<?xf32, ["n"]>
    attributes {tile.symbols = ["b", "n", "cb"], tile.templates = {b = array<i64: 1>}} {
  %0 = "tile.reduce"(%x) {axes = array<i64: -2>, keepdims = false, kind = "sum"} : (tensor<?x?xf32, ["b", "n"]>) -> tensor<?xf32, ["n"]>
  return %0 : tensor<?xf32, ["n"]>
}
func.func @f__cb_1(%x: tensor<?x?xf32, ["b", "n"]> {tile.name = "x"}, %c: tensor<1x?xf32, ["1", "n"]> {tile.name = "c"}) -> tensor<?xf32, ["n"]>
    attributes {tile.binding = {cb = 1 : i64}, tile.symbols = ["b", "n", "cb"], tile.templates = {n = array<i64: 4>}, tile.variant_of = "f"} {
  %0 = "tile.reduce"(%x) {axes = array<i64: -2>, keepdims = false, kind = "sum"} : (tensor<?x?xf32, ["b", "n"]>) -> tensor<?xf32, ["n"]>
  return %0 : tensor<?xf32, ["n"]>
}

// -----

// A stretched symbol (tile.stretch) gets its variant at 1 alone too, after the templates'
// product, so that b = 1 at any n finds a kernel that reads x with stride 0.
// CHECK: tile.dispatch = {g = {generic = "g", variants = [{binding = {b = 1 : i64, n = 4 : i64}, fn = "g__b_1__n_4"}, {binding = {b = 1 : i64}, fn = "g__b_1"}]}}
// CHECK-LABEL: func.func @g(
// CHECK-NOT: tile.stretch
// CHECK-LABEL: func.func @g__b_1__n_4(
// CHECK-LABEL: func.func @g__b_1(
// CHECK-SAME: %{{.*}}: tensor<1x?xf32, ["1", "n"]> {tile.name = "x"}
func.func @g(%x: tensor<?x?xf32, ["b", "n"]> {tile.name = "x"}) -> tensor<?xf32, ["n"]>
    attributes {tile.stretch = ["b"], tile.symbols = ["b", "n"], tile.templates = {b = array<i64: 1>, n = array<i64: 4>}} {
  %0 = "tile.reduce"(%x) {axes = array<i64: -2>, keepdims = false, kind = "sum"} : (tensor<?x?xf32, ["b", "n"]>) -> tensor<?xf32, ["n"]>
  return %0 : tensor<?xf32, ["n"]>
}
