"""The workload and candidate file formats: static inspection and loading.

A workload is one Python file in the KernelBench format (``class Model``, ``get_init_inputs()``,
``get_inputs()``) with optional multi-rank metadata (``WORLD_SIZES``, ``TOLERANCE``,
``roofline()``, ``FAMILY``, ``DESCRIPTION``, ``SOURCE``). A candidate is one Python file that
defines ``ModelNew``. ``docs/workload-format.md`` is the full description.

Inspection here reads the file's syntax tree and never runs it, so the API and the worker can
validate uploads without executing user code; the rank processes of the evaluator are the only
place where workload and candidate code is imported (``import_file``).

Imports torch lazily and nothing outside the standard library, so that it loads on GPU images.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

#: Environment variable that selects a workload's shape profile (``ci`` or ``gpu``); the
#: evaluator sets it in its rank processes before importing a workload.
SHAPES_ENV = "KLOOM_SHAPES"
SHAPE_PROFILES = ("ci", "gpu")
MAX_SOURCE_BYTES = 1_000_000

_REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")
_META_NAMES = ("FAMILY", "DESCRIPTION", "SOURCE", "NAME")


class WorkloadError(ValueError):
    """A workload or candidate file that cannot be used; the message names the file and the problem."""

    def __init__(self, path: str | os.PathLike | None, problem: str):
        self.path = str(path) if path is not None else "<source>"
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


@dataclass(frozen=True)
class WorkloadInfo:
    """What can be known about a workload file without running it."""

    name: str
    path: str
    sha256: str
    world_sizes: tuple[int, ...]
    family: str = "single_gpu"
    description: str = ""
    source: str = ""
    has_roofline: bool = False
    has_tolerance: bool = False
    shape_profiles: tuple[str, ...] = ()
    #: The reference differentiates (``NEEDS_GRAD = True``): it runs with autograd on.
    needs_grad: bool = False
    metadata: dict = field(default_factory=dict)

    def check_world_size(self, world_size: int) -> None:
        if world_size not in self.world_sizes:
            supported = ", ".join(str(w) for w in self.world_sizes)
            raise WorkloadError(
                self.path,
                f"world size {world_size} is not supported (WORLD_SIZES allows {supported})",
            )


@dataclass(frozen=True)
class CandidateInfo:
    path: str
    sha256: str


def read_source(path: str | os.PathLike) -> str:
    """Read a Python source file, refusing what is missing, too large or not UTF-8."""
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(path, "no such file")
    size = p.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise WorkloadError(path, f"file is {size} bytes; the limit is {MAX_SOURCE_BYTES}")
    raw = p.read_bytes()
    return decode_source(raw, path)


def decode_source(raw: bytes, path: str | os.PathLike | None = None) -> str:
    if len(raw) > MAX_SOURCE_BYTES:
        raise WorkloadError(path, f"source is {len(raw)} bytes; the limit is {MAX_SOURCE_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkloadError(path, f"not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise WorkloadError(path, "contains a NUL byte; not a Python source file")
    return text


def parse_source(text: str, path: str | os.PathLike | None) -> ast.Module:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:  # source given as text (a model's answer) skips read_source
        raise WorkloadError(path, f"source is {size} bytes; the limit is {MAX_SOURCE_BYTES}")
    try:
        return ast.parse(text, filename=str(path or "<source>"))
    except (RecursionError, MemoryError):  # the parser's stack, not the machine's memory
        raise WorkloadError(path, "cannot be parsed: its expressions are nested too deeply") from None
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        raise WorkloadError(path, f"syntax error at {where}: {exc.msg}") from None
    except ValueError as exc:  # e.g. source with null bytes
        raise WorkloadError(path, f"cannot be parsed: {exc}") from None


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def _literal(node: ast.AST, path, name: str):
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    if value is None:
        raise WorkloadError(path, f"{name} must be assigned a literal value")
    try:
        return ast.literal_eval(value)
    except ValueError:
        raise WorkloadError(path, f"{name} must be a literal (numbers, strings, tuples, dicts)") from None


def _required_params(fn: ast.FunctionDef) -> int:
    args = fn.args
    positional = args.posonlyargs + args.args
    return len(positional) - len(args.defaults) + sum(
        1 for d in args.kw_defaults if d is None
    )


def _check_model_class(node: ast.AST | None, path, class_name: str) -> None:
    if node is None:
        raise WorkloadError(path, f"no class {class_name} defined at module level")
    if not isinstance(node, ast.ClassDef):
        raise WorkloadError(path, f"{class_name} must be a class (subclass of torch.nn.Module)")
    methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
    if "forward" not in methods and not node.bases:
        raise WorkloadError(path, f"class {class_name} has no forward() method")
    if "forward" in methods:
        fwd = methods["forward"]
        if not (fwd.args.posonlyargs or fwd.args.args):
            raise WorkloadError(path, f"{class_name}.forward must take self as its first argument")


def inspect_workload(path: str | os.PathLike, text: str | None = None) -> WorkloadInfo:
    """Validate a workload file's shape without running it and return its metadata."""
    text = read_source(path) if text is None else text
    tree = parse_source(text, path)
    names = _top_level(tree)
    _check_model_class(names.get("Model"), path, "Model")
    for fn_name in _REQUIRED_FUNCTIONS:
        node = names.get(fn_name)
        if node is None:
            raise WorkloadError(path, f"no function {fn_name}() defined at module level")
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise WorkloadError(path, f"{fn_name} must be a function")
        if _required_params(node):
            raise WorkloadError(path, f"{fn_name}() must take no required arguments")
    world_sizes: tuple[int, ...] = (1,)
    if "WORLD_SIZES" in names:
        raw = _literal(names["WORLD_SIZES"], path, "WORLD_SIZES")
        if isinstance(raw, int):
            raw = (raw,)
        if (
            not isinstance(raw, (list, tuple))
            or not raw
            or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in raw)
        ):
            raise WorkloadError(path, "WORLD_SIZES must be a non-empty list of positive integers")
        world_sizes = tuple(sorted(set(raw)))
    meta: dict[str, str] = {}
    for key in _META_NAMES:
        if key in names:
            value = _literal(names[key], path, key)
            if not isinstance(value, str):
                raise WorkloadError(path, f"{key} must be a string")
            meta[key] = value
    if "roofline" in names:
        node = names["roofline"]
        if not isinstance(node, ast.FunctionDef) or _required_params(node) != 2:
            raise WorkloadError(path, "roofline must be a function roofline(world_size, inputs)")
    profiles: tuple[str, ...] = ()
    if "SHAPES" in names:
        node = names["SHAPES"]
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            profiles = tuple(
                k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
            )
    needs_grad = False
    if "NEEDS_GRAD" in names:
        needs_grad = _literal(names["NEEDS_GRAD"], path, "NEEDS_GRAD")
        if not isinstance(needs_grad, bool):
            raise WorkloadError(path, "NEEDS_GRAD must be True or False")
    name = meta.get("NAME") or (Path(path).stem if path else "workload")
    return WorkloadInfo(
        name=name,
        path=str(path),
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        world_sizes=world_sizes,
        family=meta.get("FAMILY", "single_gpu" if world_sizes == (1,) else "other"),
        description=meta.get("DESCRIPTION", ""),
        source=meta.get("SOURCE", ""),
        has_roofline="roofline" in names,
        has_tolerance="TOLERANCE" in names,
        shape_profiles=profiles,
        needs_grad=needs_grad,
        metadata={k: v for k, v in meta.items() if k not in ("FAMILY", "DESCRIPTION", "SOURCE", "NAME")},
    )


def inspect_candidate(path: str | os.PathLike | None, text: str | None = None) -> CandidateInfo:
    """Validate that a candidate file parses and defines ``ModelNew``."""
    text = read_source(path) if text is None else text
    tree = parse_source(text, path)
    names = _top_level(tree)
    node = names.get("ModelNew")
    if node is None:
        # ``ModelNew = SomeClass`` or an import alias are also acceptable.
        aliases = {
            a.asname or a.name
            for n in tree.body
            if isinstance(n, ast.ImportFrom)
            for a in n.names
        }
        if "ModelNew" not in aliases:
            raise WorkloadError(path, "no ModelNew defined at module level")
    elif isinstance(node, ast.ClassDef):
        _check_model_class(node, path, "ModelNew")
    return CandidateInfo(path=str(path), sha256=hashlib.sha256(text.encode()).hexdigest())


def import_file(path: str | os.PathLike, module_name: str) -> ModuleType:
    """Import a Python file as a fresh module (only ever called inside evaluator rank processes)."""
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise WorkloadError(path, "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def module_name_for(path: str | os.PathLike, prefix: str) -> str:
    digest = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() else "_" for c in Path(path).stem)
    return f"_kloom_{prefix}_{stem}_{digest}"
