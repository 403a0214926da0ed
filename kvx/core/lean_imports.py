"""Keep hqq and scikit-learn off a run's import path until something uses them.

transformers imports optional packages at module level whenever they are installed, in an
``if is_<package>_available():`` block, and four such modules lie on the way to a kvx run's first
forward (every model module imports ``cache_utils``; ``modeling_utils`` imports ``generation`` and
``quantizers``; kvpress imports transformers' pipelines, which import ``data``):

- ``transformers.cache_utils`` imports ``hqq.core.quantize`` (``HQQQuantizer``) for
  ``HQQQuantizedLayer`` only, i.e. kvx's ``press=hqq``;
- ``transformers.quantizers.quantizer_hqq`` imports ``HQQLinear`` and gives it a ``weight`` property,
  for HQQ-quantized model weights only;
- ``transformers.generation.candidate_generator`` imports ``sklearn.metrics.roc_curve``, for assisted
  generation with an adaptive confidence threshold only (kvx never runs it);
- the detection losses (``transformers.loss.loss_rt_detr`` and four others, all reached from
  ``modeling_utils``) import ``scipy.optimize`` for their Hungarian matcher only;
- ``transformers.data.metrics`` imports ``scipy.stats`` and ``sklearn.metrics`` for its deprecated
  GLUE/XNLI metric functions only; kvpress's pipeline reaches it through transformers' pipelines.

``hqq.core.quantize`` applies ``torch.compile`` and registers custom ops when imported, which loads
``torch._inductor`` (~1.7 s); ``sklearn.metrics`` costs ~1.5 s.

:func:`install` adds an import hook for exactly these modules (:data:`DEFERRED`). While one of them
executes, the availability check answers False to the top-level ``if`` of such a block (a bare
``if check():`` without ``else``) and truly to every other caller, the module's own functions
included (``HQQQuantizedLayer`` still asks whether hqq is installed and raises as before if not).
Each name the skipped block binds is bound instead to a :class:`Deferred`; the first use of any of
them runs the block itself, from the module's own source and in its namespace, exactly as at import
(the imports, the ``HQQLinear.weight`` patch), and the names are then the real objects. Only when
hqq or sklearn is imported changes; where a package is not installed the block is skipped as before.

Why not hide the packages (``sys.modules["hqq"] = None``) or prime transformers' lru-cached
``is_*_available`` with False: both make every caller see "not installed" for the rest of the
process, so ``press=hqq`` would fail, or would need its own code to undo the trick.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

#: module -> the availability check whose top-level ``if`` blocks are deferred
#: (find others with ``grep -rn "^if is_.*_available():" transformers/``)
DEFERRED: dict[str, str] = {
    "transformers.cache_utils": "is_hqq_available",
    "transformers.quantizers.quantizer_hqq": "is_hqq_available",
    "transformers.generation.candidate_generator": "is_sklearn_available",
    "transformers.data.metrics": "is_sklearn_available",
    "transformers.loss.loss_for_object_detection": "is_scipy_available",
    "transformers.loss.loss_rt_detr": "is_scipy_available",
    "transformers.loss.loss_deformable_detr": "is_scipy_available",
    "transformers.loss.loss_grounding_dino": "is_scipy_available",
    "transformers.loss.loss_lw_detr": "is_scipy_available",
}


class _Block:
    """A skipped top-level block of one module: run once, in the module's namespace, on demand."""

    def __init__(self, module: Any, node: ast.If, filename: str) -> None:
        self.module = module
        self.code = compile(ast.Module(body=node.body, type_ignores=[]), filename, "exec")
        self.lineno = node.lineno
        self.done = False
        self.lock = threading.RLock()

    def run(self) -> None:
        with self.lock:
            if not self.done:
                exec(self.code, self.module.__dict__)
                self.done = True


class Deferred:
    """Stands for a name a skipped block binds: its first use (an attribute or a call) runs the
    block, which rebinds the name to the real object."""

    def __init__(self, block: _Block, name: str) -> None:
        self._block, self._name = block, name

    def resolve(self) -> Any:
        self._block.run()
        return self._block.module.__dict__[self._name]

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):  # copy/pickle/inspect probes: do not import for them
            raise AttributeError(item)
        return getattr(self.resolve(), item)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __copy__(self) -> Deferred:  # like the class or function it stands for
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Deferred:
        return self

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:  # pickled as a reference to the real object
        return _resolve, (self._block.module.__name__, self._name)

    def __repr__(self) -> str:
        return f"<deferred {self._block.module.__name__}.{self._name} (line {self._block.lineno})>"


def _resolve(module: str, name: str) -> Any:
    value = getattr(importlib.import_module(module), name)
    return value.resolve() if isinstance(value, Deferred) else value


def _bound_names(body: list[ast.stmt]) -> list[str]:
    """Names a block binds at its own top level (imports, definitions, plain assignments)."""
    names: list[str] = []
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names += [a.asname or a.name.split(".")[0] for a in stmt.names if a.name != "*"]
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def _deferrable(tree: ast.Module, check: str) -> dict[int, ast.If]:
    """Top-level ``if check():`` blocks without ``else``, by the line of their test."""
    out = {}
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and test.func.id == check
            and not test.args
            and not test.keywords
            and not node.orelse
        ):
            out[test.lineno] = node
    return out


class _Gate:
    """The availability check: False to the deferred top-level ``if`` lines of one module, the true
    answer to everyone else."""

    def __init__(self, check: Callable[..., Any], module: str, lines: set[int]) -> None:
        self.check, self.module, self.lines = check, module, lines

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        if (
            caller.f_code.co_name == "<module>"
            and caller.f_globals.get("__name__") == self.module
            and caller.f_lineno in self.lines
        ):
            return False
        return self.check(*args, **kwargs)


class _Loader(importlib.abc.Loader):
    """The module's own loader, with its deferrable blocks skipped while it executes."""

    def __init__(self, inner: Any, name: str) -> None:
        self._inner, self._name = inner, name

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        check = DEFERRED[self._name]
        source = self._inner.get_source(self._name)
        blocks = _deferrable(ast.parse(source), check) if source else {}
        if not blocks:
            self._inner.exec_module(module)
            return
        utils = importlib.import_module("transformers.utils")  # `from ..utils import <check>` reads it
        real = getattr(utils, check)
        gate = _Gate(real, self._name, set(blocks))
        setattr(utils, check, gate)
        try:
            self._inner.exec_module(module)
        finally:
            setattr(utils, check, real)
            # the module, and any imported meanwhile that bound the gate, get the real check back
            for other in list(sys.modules.values()):
                namespace = getattr(other, "__dict__", None)
                if isinstance(namespace, dict) and namespace.get(check) is gate:
                    namespace[check] = real
        if not real():
            return  # not installed: transformers skips the blocks too
        filename = getattr(module, "__file__", None) or self._name
        for node in blocks.values():
            block = _Block(module, node, filename)
            for name in _bound_names(node.body):
                if name not in module.__dict__:  # a later definition in the module wins, as it would
                    module.__dict__[name] = Deferred(block, name)

    def __getattr__(self, item: str) -> Any:  # get_source, get_filename, is_package, ...
        return getattr(self._inner, item)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in DEFERRED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "get_source"):
            spec.loader = _Loader(spec.loader, fullname)
        return spec


def install() -> bool:
    """Defer the blocks of :data:`DEFERRED` modules not imported yet (idempotent, imports nothing).
    Call it before transformers is imported; returns False if it is too late for all of them, or
    when ``KVX_LEAN_IMPORTS=0`` turns the hook off (transformers then imports as it always does)."""
    if os.environ.get("KVX_LEAN_IMPORTS", "1") == "0":
        return False
    if not installed():
        sys.meta_path.insert(0, _Finder())
    return any(name not in sys.modules for name in DEFERRED)


def installed() -> bool:
    return any(isinstance(f, _Finder) for f in sys.meta_path)
