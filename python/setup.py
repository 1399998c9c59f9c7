"""Packages the extension CMake built (it is not compiled again here).

CMake builds deepinfer._core against the static libdeepinfer in the same build (target deepinfer_python, see
python/CMakeLists.txt), so the wheel holds exactly what the tests ran. This script takes the extension and the
deepinfer CLI binary (for `python -m deepinfer serve`) from DEEPINFER_BUILD_DIR, default ../build:

    cmake --build build --target deepinfer_python
    /usr/bin/python3 -m pip install --no-build-isolation --no-deps --break-system-packages ./python
"""

import glob
import os
import shutil
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("DEEPINFER_BUILD_DIR", os.path.join(HERE, "..", "build")))


def built_extension() -> str:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    path = os.path.join(BUILD, "python", "deepinfer", "_core" + suffix)
    if not os.path.isfile(path):
        found = glob.glob(os.path.join(BUILD, "python", "deepinfer", "_core*.so"))
        hint = f" (found {found[0]}: built for another Python?)" if found else ""
        raise SystemExit(f"{path} is missing{hint}: build it first with "
                         f"`cmake --build {BUILD} --target deepinfer_python` (DEEPINFER_BUILD_DIR picks the build)")
    return path


class CopyBuiltExtension(build_ext):
    """The 'build' of deepinfer._core: a copy of CMake's output."""

    def build_extension(self, ext):
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built_extension(), dest)


class BuildPyWithBinary(build_py):
    """Adds the CLI the extension was built with as deepinfer/bin/deepinfer (executable)."""

    def run(self):
        super().run()
        src = os.path.join(BUILD, "deepinfer")
        if not os.path.isfile(src):
            raise SystemExit(f"{src} is missing: build it first with `cmake --build {BUILD} --target deepinfer`")
        dest = os.path.join(self.build_lib, "deepinfer", "bin", "deepinfer")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(src, dest)
        os.chmod(dest, 0o755)


setup(
    ext_modules=[Extension("deepinfer._core", sources=[])],
    cmdclass={"build_ext": CopyBuiltExtension, "build_py": BuildPyWithBinary},
)
