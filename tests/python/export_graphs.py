#!/usr/bin/env python3
"""Regenerates tests/data/graphs/<model>.pb: each model's joint
forward+backward graph as a binary echo.v1.Graph (CI sizes, see models.py),
so C++ tests and benchmarks run on real graphs without torch.

  build/venv/bin/python tests/python/export_graphs.py [model ...]

Read one in Python with graph_pb2.Graph.FromString(open(path, "rb").read());
in C++ with echo::v1::Graph::ParseFromIstream. --text also writes a .pbtxt
next to each (large; not checked in). --paper captures the paper's sizes
instead (models.build_paper; e.g. for `echo_plan_bench stash`), too large
to check in: give it an --out_dir.
"""
import argparse
import os
import sys

import torch
from google.protobuf import text_format

import models
import servers
from echo_torch import capture_graph

OUT_DIR = os.path.join(servers.REPO, "tests", "data", "graphs")


def export(name, out_dir=OUT_DIR, text=False, paper=False):
    model = models.build_paper(name) if paper else models.build(name)
    graph = capture_graph(model, *models.example_inputs(model)).graph
    graph.name = f"{name}_paper" if paper else name
    graph.metadata["model_config"] = repr(getattr(model, "cfg", type(model).__name__))
    graph.metadata["generator"] = "tests/python/export_graphs.py"
    path = os.path.join(out_dir, f"{graph.name}.pb")
    with open(path, "wb") as f:
        f.write(graph.SerializeToString(deterministic=True))
    if text:
        with open(os.path.join(out_dir, f"{name}.pbtxt"), "w") as f:
            f.write(text_format.MessageToString(graph))
    return path, graph


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(models.FIXTURE_NAMES))
    parser.add_argument("--out_dir", default=OUT_DIR)
    parser.add_argument("--text", action="store_true")
    parser.add_argument("--paper", action="store_true",
                        help="the paper's sizes (models.build_paper), named "
                             "<model>_paper.pb; use another --out_dir")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models:
        path, graph = export(name, args.out_dir, args.text, args.paper)
        print(f"{path}: {len(graph.ops)} ops, {len(graph.tensors)} tensors, "
              f"{os.path.getsize(path):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
