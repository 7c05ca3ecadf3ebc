#!/usr/bin/python3
"""Generates the echo.v1 Python stubs into echo_torch/_proto/.

protoc writes `from echo.v1 import graph_pb2` imports; they are rewritten to
`from echo_torch._proto.echo.v1 import graph_pb2` so the stubs live inside the
package and nothing is added to sys.path (a top-level `echo` package could
clash with others). Used by client/python/CMakeLists.txt and by hand:

  /usr/bin/python3 client/python/gen_proto.py
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
IMPORT_RE = re.compile(r"^from echo\.v1 import ", re.MULTILINE)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--grpc_plugin", default="/usr/bin/grpc_python_plugin")
    parser.add_argument("--proto_root", default=os.path.join(REPO, "proto"))
    parser.add_argument("--out", default=os.path.join(HERE, "echo_torch", "_proto"))
    args = parser.parse_args(argv)

    proto_dir = os.path.join(args.proto_root, "echo", "v1")
    protos = sorted(
        os.path.join(proto_dir, f) for f in os.listdir(proto_dir) if f.endswith(".proto"))
    os.makedirs(args.out, exist_ok=True)
    subprocess.run(
        [args.protoc, f"--proto_path={args.proto_root}", f"--python_out={args.out}",
         f"--grpc_python_out={args.out}",
         f"--plugin=protoc-gen-grpc_python={args.grpc_plugin}", *protos],
        check=True)
    for package_dir in (args.out, os.path.join(args.out, "echo"),
                        os.path.join(args.out, "echo", "v1")):
        init = os.path.join(package_dir, "__init__.py")
        if not os.path.exists(init):
            open(init, "w").close()
    out_v1 = os.path.join(args.out, "echo", "v1")
    for name in os.listdir(out_v1):
        if not name.endswith(".py") or name == "__init__.py":
            continue
        path = os.path.join(out_v1, name)
        with open(path) as f:
            text = f.read()
        rewritten = IMPORT_RE.sub("from echo_torch._proto.echo.v1 import ", text)
        if rewritten != text:
            with open(path, "w") as f:
                f.write(rewritten)
    return 0


if __name__ == "__main__":
    sys.exit(main())
