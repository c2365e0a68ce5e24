"""tilec.codegen.common.llvm_text on whole modules: only lines holding an LLVM 24 literal
change (each literal form found, whatever surrounds it), every other line is kept as it was,
and a literal with no type before it is still an error.  The literal forms one by one are
test_cpu_llvm.py's."""
from __future__ import annotations

import pytest

from tilec.codegen.common.llvm_text import to_llvm22_text


def test_the_lines_with_literals_change_and_the_others_are_kept() -> None:
    module = [
        'target datalayout = "e-i64:64-v16:16-n16:32:64"',
        "",
        "define void @f(ptr %p, double %y) {",
        "  store float -inf, ptr %p, align 4",
        "  %x = fadd double %y, 2.500000e-01",
        "  %nan.1 = fadd float %inf, %e+1",
        "  store half f0x3C00, ptr %p, align 2",
        "  store bfloat +qnan, ptr %p, align 2",
        "  store float +nan(0x1), ptr %p, align 4",
        "  ret void",
        "}",
        "",
    ]
    rewritten = list(module)
    rewritten[3] = "  store float 0xFFF0000000000000, ptr %p, align 4"
    rewritten[4] = "  %x = fadd double %y, 0x3FD0000000000000"
    rewritten[6] = "  store half 0xH3C00, ptr %p, align 2"
    rewritten[7] = "  store bfloat 0xR7FC0, ptr %p, align 2"
    rewritten[8] = "  store float 0x7FF8000020000000, ptr %p, align 4"
    assert to_llvm22_text("\n".join(module)).split("\n") == rewritten


def test_a_literal_without_a_type_before_it_is_an_error() -> None:
    with pytest.raises(ValueError, match="no floating-point type before literal '-inf'"):
        to_llvm22_text("define void @f() {\n  call void @g(-inf)\n  ret void\n}")
