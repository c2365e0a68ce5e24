// Errors of tile-shape-template, each at the op (or function) it is about.
// RUN: not tilec-opt %s --split-input-file -p tile-shape-template 2>&1 | FileCheck %s
// RUN: not tilec-opt %s -p 'tile-shape-template{no-generic=yes}' 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: not tilec-opt %s -p 'tile-shape-template{keep=1}' 2>&1 | FileCheck %s --check-prefix=OPTION-NAME

// OPTION: <pass-pipeline>:1:21: error: tile-shape-template: option 'no-generic' expects true or false, got 'yes'
// OPTION-NAME: <pass-pipeline>:1:21: error: tile-shape-template has no option 'keep'; options: no-generic

// 5 x 5 x 3 bindings are more than the 64 variants allowed.
// CHECK: {{.*}}tile-shape-template.mlir:[[# @LINE + 3]]:1: error: shape templates of 'big' make 5 (a) x 5 (b) x 3 (c) = 75 variants; at most 64 are allowed
// CHECK-NEXT: func.func @big(
// CHECK-NEXT: {{^}}^{{$}}
func.func @big(%x: tensor<?x?x?xf32, ["a", "b", "c"]> {tile.name = "x"}) -> tensor<?x?x?xf32, ["a", "b", "c"]>
    attributes {tile.symbols = ["a", "b", "c"], tile.templates = {a = array<i64: 1, 2, 3, 4, 5>, b = array<i64: 1, 2, 3, 4, 5>, c = array<i64: 1, 2, 3>}} {
  return %x : tensor<?x?x?xf32, ["a", "b", "c"]>
}

// -----

// A check that the binding makes false can never pass at run time.
// CHECK: {{.*}}tile-shape-template.mlir:[[# @LINE + 4]]:3: error: in variant 'head__n_2' (n = 2): slice out of range: end '4' exceeds dimension 'n' (4 > 2)
// CHECK-NEXT: "tile.check"() {lhs = "4"
// CHECK-NEXT: {{^  \^$}}
func.func @head(%x: tensor<?xf32, ["n"]> {tile.name = "x"}) -> tensor<4xf32> attributes {tile.symbols = ["n"], tile.templates = {n = array<i64: 8, 2>}} {
  "tile.check"() {lhs = "4", message = "slice out of range: end '4' exceeds dimension 'n'", rel = "le", rhs = "n"} : () -> ()
  %0 = "tile.slice"(%x) {ends = ["4"], starts = ["0"]} : (tensor<?xf32, ["n"]>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// An equality that the binding decides false.
// CHECK: {{.*}}tile-shape-template.mlir:[[# @LINE + 2]]:3: error: in variant 'flat__r_3' (r = 3): reshape of 2*r elements to 8 (6 != 8)
func.func @flat(%x: tensor<?x2xf32, ["r", "2"]> {tile.name = "x"}) -> tensor<8xf32> attributes {tile.symbols = ["r"], tile.templates = {r = array<i64: 4, 3>}} {
  "tile.check"() {lhs = "2*r", message = "reshape of 2*r elements to 8", rel = "eq", rhs = "8"} : () -> ()
  %0 = "tile.reshape"(%x) : (tensor<?x2xf32, ["r", "2"]>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// An odd value makes "h/2" a fraction: reported at the op whose result has that dimension.
// CHECK: {{.*}}tile-shape-template.mlir:[[# @LINE + 3]]:8: error: in variant 'half__h_3' (h = 3): dimension 'h/2' is 3/2, not a non-negative integer
func.func @half(%x: tensor<?xf32, ["h"]> {tile.name = "x"}) -> tensor<?xf32, ["h"]>
    attributes {tile.symbols = ["h"], tile.templates = {h = array<i64: 2, 3>}} {
  %0 = "tile.slice"(%x) {ends = ["h/2"], starts = ["0"]} : (tensor<?xf32, ["h"]>) -> tensor<?xf32, ["h/2"]>
  %1 = "tile.concat"(%0, %0) {axis = -1 : i64} : (tensor<?xf32, ["h/2"]>, tensor<?xf32, ["h/2"]>) -> tensor<?xf32, ["h"]>
  return %1 : tensor<?xf32, ["h"]>
}

// -----

// A negative dimension in the signature is reported at the function.
// CHECK: {{.*}}tile-shape-template.mlir:[[# @LINE + 1]]:1: error: in variant 'tail__n_3' (n = 3): dimension 'n-4' is -1, not a non-negative integer
func.func @tail(%x: tensor<?xf32, ["n"]> {tile.name = "x"}) -> tensor<?xf32, ["n-4"]>
    attributes {tile.symbols = ["n"], tile.templates = {n = array<i64: 3>}} {
  %0 = "tile.slice"(%x) {ends = ["n"], starts = ["4"]} : (tensor<?xf32, ["n"]>) -> tensor<?xf32, ["n-4"]>
  return %0 : tensor<?xf32, ["n-4"]>
}

// -----

// A variant may not take the name of a function of the module.
// CHECK: {{.*}}tile-shape-template.mlir:[[# @LINE + 1]]:1: error: variant 'id__n_4' of 'id' has the name of another function
func.func @id(%x: tensor<?xf32, ["n"]> {tile.name = "x"}) -> tensor<?xf32, ["n"]>
    attributes {tile.symbols = ["n"], tile.templates = {n = array<i64: 4>}} {
  return %x : tensor<?xf32, ["n"]>
}
func.func @id__n_4(%x: tensor<4xf32> {tile.name = "x"}) -> tensor<4xf32> attributes {tile.symbols = []} {
  return %x : tensor<4xf32>
}
