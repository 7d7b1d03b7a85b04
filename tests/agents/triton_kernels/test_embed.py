"""Kernel modules embedded in candidates: the embedded text is the modules' own code (every
top-level definition identical), names never clash between modules, modules import only what a
candidate may, and a generated candidate passes the static checker."""

from __future__ import annotations

import ast

import pytest
from kernel_helpers import WORKLOADS, traced

from agents.strategist.embed import KERNELS_ROOT, EmbedError, bound_names, dependencies, embed_kernels, module_file, stripped_source
from agents.strategist.triton_kernels.plan import kernel_candidate
from kloom.static_check import ALLOWED_MODULES, check_candidate

#: The modules candidates embed: every module of a family folder but its test and benchmark
#: (the library's top level holds tools: the benchmark harness, the compile check). The comm
#: kernels are inlined by the overlap strategy's bundler (``inline_modules`` in agents/strategist/embed.py).
KERNEL_MODULES = sorted(
    "kernels." + ".".join(p.relative_to(KERNELS_ROOT).with_suffix("").parts)
    for p in KERNELS_ROOT.glob("*/*.py")
    if not p.name.startswith(("test_", "bench_", "verify_", "__")) and p.parent.name != "comm"
)


def _definitions(source: str) -> dict[str, str]:
    return {
        node.name: ast.dump(node)
        for node in ast.parse(source).body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    }


def test_the_library_has_the_families():
    assert {"kernels.elementwise.kernel", "kernels.softmax.kernel", "kernels.layernorm.kernel", "kernels.batchnorm.kernel",
            "kernels.cross_entropy.kernel", "kernels.reduce.kernel", "kernels.scan.kernel"} <= set(KERNEL_MODULES)  # fmt: skip


@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_the_embedded_text_is_the_modules_code(module):
    text = embed_kernels([module])
    for name in dependencies(module):
        own = _definitions(module_file(name).read_text())
        embedded = _definitions(text)
        assert own and all(embedded[k] == v for k, v in own.items()), f"{name} differs once embedded"
    imported = [n.module or "" for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.startswith("kernels")], "imports of kernel modules are inlined"


@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_modules_import_only_what_candidates_may(module):
    tree = ast.parse(stripped_source(module))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        assert all(n.split(".")[0] in ALLOWED_MODULES for n in names), f"{module} imports {names}"
    assert check_candidate(stripped_source(module) + "\nclass ModelNew:\n    pass\n") == []


def test_no_two_modules_define_the_same_name():
    owner: dict[str, str] = {}
    for module in KERNEL_MODULES:
        for name, how in bound_names(stripped_source(module)).items():
            if how != "def":
                continue
            assert name not in owner, f"{name} is defined by {owner.get(name)} and {module}"
            owner[name] = module


def test_bad_module_names_are_refused():
    with pytest.raises(EmbedError):
        module_file("os.path")
    with pytest.raises(EmbedError):
        module_file("kernels.no_such_family.kernel")


def test_a_generated_candidate_passes_the_static_checker():
    source = (WORKLOADS / "norms_and_scans.py").read_text()
    candidate = kernel_candidate(source, traced("norms_and_scans"), None, "test")
    assert check_candidate(candidate) == []
    assert "class ModelNew(Model)" in candidate and "@triton.jit" in candidate
