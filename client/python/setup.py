"""Build hook: compiles the echo.v1 API (proto/ at the repository root, or
$ECHO_PROTO_ROOT) into a FileDescriptorSet shipped as
echo_torch/_proto/echo_v1.binpb. echo_torch.proto builds the message classes
and the client stub from it at import time, so the package works with any
protobuf runtime >= 3.20 (generated *_pb2.py files are tied to the protoc
version that wrote them) and nothing is rewritten after generation.

With $ECHO_BUNDLE_DIR (deploy/pack/pack_echod.sh's output; `make wheel` sets
it), the wheel also ships echod and its libraries as echo_torch/_echod/, for
the private echod of echo_torch.local_server, and is tagged for this
platform."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
DESCRIPTOR = os.path.join(HERE, "echo_torch", "_proto", "echo_v1.binpb")


def _proto_root():
    root = os.environ.get("ECHO_PROTO_ROOT") or os.path.join(HERE, "..", "..", "proto")
    return os.path.abspath(root)


def _protoc_command():
    try:
        import grpc_tools  # noqa: F401
        return [sys.executable, "-m", "grpc_tools.protoc"]
    except ImportError:
        return ["protoc"]  # e.g. Debian's protobuf-compiler, without build isolation


def generate_descriptor_set():
    root = _proto_root()
    protos = sorted(glob.glob(os.path.join(root, "echo", "v1", "*.proto")))
    protos += [os.path.join(root, "grpc", "health", "v1", "health.proto")]
    if not all(os.path.isfile(p) for p in protos) or len(protos) < 2:
        if os.path.isfile(DESCRIPTOR):
            return  # building from an sdist that already carries it
        raise RuntimeError(f"echo-torch: the echo.v1 .proto files are not under {root}; "
                           "build from the repository checkout or set ECHO_PROTO_ROOT")
    os.makedirs(os.path.dirname(DESCRIPTOR), exist_ok=True)
    subprocess.run(_protoc_command() + [f"--proto_path={root}", "--include_imports",
                                        f"--descriptor_set_out={DESCRIPTOR}",
                                        *[os.path.relpath(p, root) for p in protos]],
                   check=True, cwd=root)


BUNDLE = os.environ.get("ECHO_BUNDLE_DIR")


class BuildPyWithDescriptors(build_py):
    def run(self):
        generate_descriptor_set()
        super().run()
        # Always cleared first: an earlier bundled build must not leak into a
        # plain one through the build directory.
        target = os.path.join(self.build_lib, "echo_torch", "_echod")
        shutil.rmtree(target, ignore_errors=True)
        if BUNDLE:
            if not os.path.isfile(os.path.join(BUNDLE, "bin", "echod")):
                raise RuntimeError(f"echo-torch: ECHO_BUNDLE_DIR={BUNDLE} has no bin/echod "
                                   "(make it with deploy/pack/pack_echod.sh)")
            shutil.copytree(BUNDLE, target)


cmdclass = {"build_py": BuildPyWithDescriptors}
if BUNDLE:
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:  # setuptools < 70.1
        from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        """Binaries inside: py3-none-<platform> rather than a pure wheel."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            return ("py3", "none") + tuple(super().get_tag()[2:])

    cmdclass["bdist_wheel"] = PlatformWheel

setup(cmdclass=cmdclass)
