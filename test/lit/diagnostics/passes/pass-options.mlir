// A wrong option of a tilec pass is an error naming the pass and the option, located in the
// pipeline's text with a caret under the option; nothing runs and no traceback is printed.
// RUN: not tilec-opt %s -p 'cse,tile-kernel{all=yes}' 2>&1 | FileCheck %s --check-prefix=BOOL --strict-whitespace
// RUN: not tilec-opt %s -p 'tile-kernel{all=true target=gpu}' 2>&1 | FileCheck %s --check-prefix=CHOICE --strict-whitespace
// RUN: not tilec-opt %s -p 'builtin.module(tile-kernel{depth=2})' 2>&1 | FileCheck %s --check-prefix=UNKNOWN --strict-whitespace
// RUN: not tilec-opt %s -p 'tile-cache-hint{aggressive=true}' 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not tilec-opt %s -p 'tile-kernel{target}' 2>&1 | FileCheck %s --check-prefix=VALUE
// RUN: not tilec-opt %s -p 'tile-kernel{all all=false}' 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not tilec %S/../../irgen/unary.tile --emit=kernel --pass-pipeline='tile-shape-template{no-generic=1}' 2>&1 | FileCheck %s --check-prefix=TILEC

// BOOL: {{^}}<pass-pipeline>:1:17: error: tile-kernel: option 'all' expects true or false, got 'yes'{{$}}
// BOOL-NEXT: {{^}}cse,tile-kernel{all=yes}{{$}}
// BOOL-NEXT: {{^}}                ^~~~~~~{{$}}
// CHOICE: {{^}}<pass-pipeline>:1:22: error: tile-kernel: option 'target' expects one of {{.*}}ptx, got 'gpu'{{$}}
// CHOICE-NEXT: {{^}}tile-kernel{all=true target=gpu}{{$}}
// CHOICE-NEXT: {{^}}                     ^~~~~~~~~~{{$}}
// UNKNOWN: {{^}}<pass-pipeline>:1:28: error: tile-kernel has no option 'depth'; options: target, all, gemm{{$}}
// UNKNOWN-NEXT: {{^}}builtin.module(tile-kernel{depth=2}){{$}}
// UNKNOWN-NEXT: {{^}}                           ^~~~~~~{{$}}
// NONE: <pass-pipeline>:1:17: error: tile-cache-hint has no option 'aggressive'; it takes none
// VALUE: <pass-pipeline>:1:13: error: tile-kernel: option 'target' needs a value (target=...)
// TWICE: <pass-pipeline>:1:17: error: tile-kernel: option 'all' is given twice
// TILEC: <pass-pipeline>:1:21: error: tile-shape-template: option 'no-generic' expects true or false, got '1'

func.func @f(%x: tensor<4xf32> {tile.name = "x"}) -> tensor<4xf32> attributes {tile.symbols = []} {
  return %x : tensor<4xf32>
}
