"""Builds the occl package: liboccl.so from the Go sources (go build
-buildmode=c-shared, needs Go and gcc) and, where torch is importable, the
torch.distributed backend (a C++ extension against torch's headers).

The Go sources are the repository this directory is in (../..), or
$OCCL_SOURCE. Go is found on PATH or at /usr/local/go/bin/go, or $OCCL_GO.
"""

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.environ.get("OCCL_SOURCE") or os.path.join(HERE, "..", ".."))
INCLUDE = os.path.join(SOURCE, "cgo", "include")


def go_binary():
    go = os.environ.get("OCCL_GO") or shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        sys.exit("occl: Go is needed to build liboccl.so (https://go.dev/dl/); set OCCL_GO to its path")
    return go


class BuildPy(build_py):
    """Builds liboccl.so into the package next to its Python files."""

    def run(self):
        super().run()
        if not os.path.exists(os.path.join(SOURCE, "go.mod")):
            sys.exit("occl: the Go sources are not at %s: build from the repository, or set OCCL_SOURCE" % SOURCE)
        out = os.path.join(os.path.abspath(self.build_lib), "occl", "liboccl.so")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        env = dict(os.environ, CGO_ENABLED="1")
        env.setdefault("GOFLAGS", "-buildvcs=false")
        subprocess.check_call([go_binary(), "build", "-buildmode=c-shared", "-o", out, "./cgo"], cwd=SOURCE, env=env)
        header = out[: -len(".so")] + ".h"  # cgo's generated header: occl.h is the API
        if os.path.exists(header):
            os.remove(header)


class BinaryDistribution(Distribution):
    """The package holds a shared library: never a pure-Python wheel."""

    def has_ext_modules(self):
        return True


def torch_extension():
    """The backend's extension and its build command, if torch is importable."""
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError:
        print("occl: torch is not importable: building without the torch.distributed backend", file=sys.stderr)
        return [], {}
    ext = CppExtension(
        "occl.torch._C",
        ["occl/torch/process_group.cpp"],
        include_dirs=[INCLUDE],
        extra_compile_args=["-O2", "-std=c++17", "-Wno-deprecated-declarations"],
        libraries=["dl"],
    )
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=False)}


ext_modules, ext_cmds = torch_extension()
setup(
    distclass=BinaryDistribution,
    ext_modules=ext_modules,
    cmdclass=dict(build_py=BuildPy, **ext_cmds),
)
