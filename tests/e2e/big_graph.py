"""Writes a serialized echo.v1.Graph chain of OPS ops with 1-4 byte ids to
PATH: the request shape that costs echod the most memory per wire byte
(issue 23's 1e6-op estimates). usage: big_graph.py OPS PATH"""
import sys

from echo_torch import proto


def base36(i):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        text = digits[i % 36] + text
        i //= 36
        if i == 0:
            return text


def main():
    ops, path = int(sys.argv[1]), sys.argv[2]
    graph = proto.graph_pb2.Graph(name="chain")
    previous = "_"
    tensor = graph.tensors.add()
    tensor.id, tensor.size_bytes = previous, 1
    for i in range(ops):
        tensor = graph.tensors.add()
        tensor.id, tensor.size_bytes = base36(i), 1
        op = graph.ops.add()
        op.id = base36(i)
        op.input_ids.append(previous)
        op.output_ids.append(tensor.id)
        previous = tensor.id
    with open(path, "wb") as out:
        out.write(graph.SerializeToString())


if __name__ == "__main__":
    main()
