"""Every shared example and corpus program, compiled for the CPU (``tilec.compile``), matches
the reference interpreter at the sizes of its header under the numerical contract."""
from __future__ import annotations

import functools

import pytest
from test_corpus import PROGRAMS, assert_library_agrees, functions, tensor_level

import tilec


@functools.cache
def library(key: str):
    p = PROGRAMS[key]
    return tilec.compile_string(p.text, p.path.name, target="cpu")


@pytest.mark.parametrize("key", PROGRAMS)
def test_cpu_library_matches_the_reference(key: str) -> None:
    module = tensor_level(key)
    for function in functions(module):
        for index, binding in enumerate(PROGRAMS[key].sizes):
            assert_library_agrees(module, function, library(key), binding, index)
