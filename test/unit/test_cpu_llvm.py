"""LLVM IR crossing from the MLIR bindings (LLVM 24) to llvmlite (LLVM 22): the newer
printer's floating-point literals rewritten for the older parser (tilec.codegen.cpu.llvm);
the vector width each ``--arch`` compiles a loop for; the names of a code variant's exports."""
from __future__ import annotations

import llvmlite.binding as llvm
import pytest

from tilec.codegen.cpu.llvm import Machine, optimise, to_llvm22_text

LITERALS = [   # (type, LLVM 24 literal, LLVM 22 literal)
    ("float", "-inf", "0xFFF0000000000000"),
    ("float", "+inf", "0x7FF0000000000000"),
    ("float", "+qnan", "0x7FF8000000000000"),
    ("float", "-qnan", "0xFFF8000000000000"),
    ("float", "+nan(0x1)", "0x7FF8000020000000"),        # payload moved to the double's top
    ("float", "1.000000e-01", "0x3FB99999A0000000"),     # the float nearest 0.1, not 0.1
    ("float", "f0x3DCCCCCE", "0x3FB99999C0000000"),      # one float ulp above it
    ("float", "-2.500000e-08", "0xBE5AD7F2A0000000"),
    ("double", "1.000000e-01", "0x3FB999999999999A"),
    ("double", "f0x3FD5555555555555", "0x3FD5555555555555"),
    ("half", "1.000980e+00", "0xH3C01"),
    ("half", "+inf", "0xH7C00"),
    ("half", "f0x7BFF", "0xH7BFF"),
    ("bfloat", "7.873530e-03", "0xR3C01"),
    ("bfloat", "-qnan", "0xRFFC0"),
]


@pytest.mark.parametrize("fp_type, new, old", LITERALS)
def test_literal(fp_type, new, old):
    assert to_llvm22_text(f"  store {fp_type} {new}, ptr %0, align 4") == \
        f"  store {fp_type} {old}, ptr %0, align 4"


def test_literal_takes_the_type_written_last_before_it():
    text = "\n".join([
        "  %5 = phi float [ -inf, %3 ], [ %4, %2 ]",
        "  %6 = fptrunc double 1.000000e-01 to float",
        "  %7 = select i1 %c, half 1.000980e+00, half %h",
        "  %8 = fmul <8 x float> %v, splat (float +qnan)",
        "  %9 = fadd float %inf.1, 5.000000e-01",
    ])
    assert to_llvm22_text(text).split("\n") == [
        "  %5 = phi float [ 0xFFF0000000000000, %3 ], [ %4, %2 ]",
        "  %6 = fptrunc double 0x3FB999999999999A to float",
        "  %7 = select i1 %c, half 0xH3C01, half %h",
        "  %8 = fmul <8 x float> %v, splat (float 0x7FF8000000000000)",
        "  %9 = fadd float %inf.1, 0x3FE0000000000000",
    ]


SMALL_FUNCTION = to_llvm22_text("define float @f(float %x) {\n"
                                "  %1 = fadd float %x, 1.000000e-01\n"
                                "  %2 = call float @llvm.maximum.f32(float %1, float -inf)\n"
                                "  ret float %2\n"
                                "}\n"
                                "declare float @llvm.maximum.f32(float, float)\n")


def test_llvmlite_reads_the_rewritten_text():
    module, _ = optimise(SMALL_FUNCTION, Machine(), ["f"])
    assert "fadd float %x, 0x3FB99999A0000000" in str(module)


def test_unknown_arch():
    with pytest.raises(ValueError, match="unknown cpu arch 'pentium'"):
        Machine("pentium")


def test_native_arch_compiles_for_the_host():
    module, machine = optimise(SMALL_FUNCTION, Machine("native"), ["f"])
    assert machine.emit_object(module)


SCALE_LOOP = """define void @scale(ptr noalias %x, ptr noalias %y, i64 %n) {
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %from = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %from, align 4
  %w = fmul float %v, 2.000000e+00
  %to = getelementptr float, ptr %y, i64 %i
  store float %w, ptr %to, align 4
  %next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


def _assembly(arch: str) -> str:
    module, machine = optimise(SCALE_LOOP, Machine(arch), ["scale"])
    return machine.emit_assembly(module)


def test_an_exported_function_takes_the_suffix_of_its_code_variant():
    module, _ = optimise(SMALL_FUNCTION, Machine("x86-64-v4"), ["f"], "__x86_64_v4")
    assert [f.name for f in module.functions if not f.is_declaration] == ["f__x86_64_v4"]


def test_default_arch_vectorises_with_avx2():
    assembly = _assembly("x86-64-v3")
    assert "ymm" in assembly and "zmm" not in assembly


def test_x86_64_v4_vectorises_512_bits_wide():
    assert "zmm" in _assembly("x86-64-v4")


def test_native_arch_vectorises_as_wide_as_the_host():
    """512 bits on a host with AVX-512 (avx512f), else 256."""
    assembly = _assembly("native")
    if "+avx512f" in llvm.get_host_cpu_features().flatten().split(","):
        assert "zmm" in assembly
    else:
        assert "ymm" in assembly and "zmm" not in assembly
