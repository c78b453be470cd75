"""The packaged MiniLM's weight products, run in int8: an ONNX graph rewrite on the wire format.

all-MiniLM-L6-v2's packaged file stores each weight matrix as int8 with a scale per column and
dequantizes it in the graph (``MatMul(x, Mul(Cast(W), scale))``). onnxruntime folds that into
float32 weights when it loads the file, so every query reads about 42 MB of weights, which is most
of a short query's time on one core. :func:`int8_matmuls` replaces each such product with one
``DynamicQuantizeMatMul`` (an onnxruntime contrib operator) over the same int8 weights and scales:
the activations are quantized per call instead, and a query's transformer runs about twice as
fast. Its vectors differ slightly from the float32 run's (cosine at least 0.986 on the project's
277 labelled queries, median 0.994). :func:`int8_lookups` makes the vocabulary's lookups read
int8 rows and dequantize only those, with the same results bit for bit.

The rewrite reads and writes the protobuf wire format directly, touching only the fields it needs
(a graph's nodes and initializers, a model's operator sets) and copying every other field as
bytes: the ``onnx`` package would do the same in about a second of imports (its ``ml_dtypes``
extension alone), on the thread that warms a gateway's search while it serves.
Field numbers are those of ``onnx.proto`` (ONNX IR version 3 and later).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ModelFormatError", "int8_lookups", "int8_matmuls"]

# Field numbers of onnx.proto's messages, the ones read or written here.
_MODEL_OPSET_IMPORT, _MODEL_GRAPH = 8, 7
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP_TYPE, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 3, 4, 5, 7
_ATTRIBUTE_NAME, _ATTRIBUTE_INT, _ATTRIBUTE_TYPE = 1, 3, 20
_ATTRIBUTE_TYPE_INT = 2  # AttributeProto.AttributeType.INT
_FLOAT = 1  # TensorProto.DataType.FLOAT
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME = 1, 2, 8
_OPSET_DOMAIN, _OPSET_VERSION = 1, 2
_INT8 = 3  # TensorProto.DataType.INT8
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5

_CONTRIB = "com.microsoft"


class ModelFormatError(ValueError):
    """The model file is not an ONNX model this rewrite understands."""


Field = tuple[int, int, bytes]
"""(field number, wire type, the value's bytes as encoded: a varint's own bytes, a length-
delimited value without its length)."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ModelFormatError("truncated or malformed varint")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> list[Field]:
    """The fields of one encoded message, in order."""
    out: list[Field] = []
    i, end = 0, len(buf)
    while i < end:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            start = i
            _, i = _varint(buf, i)
            out.append((number, wire, buf[start:i]))
            continue
        if wire == _BYTES:
            size, i = _varint(buf, i)
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
        else:
            raise ModelFormatError(f"unsupported protobuf wire type {wire}")
        if i + size > end:
            raise ModelFormatError("truncated protobuf field")
        out.append((number, wire, buf[i : i + size]))
        i += size
    return out


def _encoded_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _encoded(number: int, wire: int, value: bytes) -> bytes:
    key = _encoded_varint(number << 3 | wire)
    return key + (_encoded_varint(len(value)) if wire == _BYTES else b"") + value


def _text(fields: list[Field], number: int) -> list[str]:
    return [value.decode() for n, _, value in fields if n == number]


@dataclass
class _Node:
    fields: list[Field]
    inputs: list[str] = field(init=False)
    outputs: list[str] = field(init=False)
    op_type: str = field(init=False)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.inputs = _text(self.fields, _NODE_INPUT)
        self.outputs = _text(self.fields, _NODE_OUTPUT)
        self.op_type = "".join(_text(self.fields, _NODE_OP_TYPE))
        self.name = "".join(_text(self.fields, _NODE_NAME))

    def integer(self, name: str, default: int) -> int:
        """The integer attribute ``name`` (two's complement, as int64 is encoded), or ``default``."""
        for number, _, value in self.fields:
            if number != _NODE_ATTRIBUTE:
                continue
            attribute = _fields(value)
            if _text(attribute, _ATTRIBUTE_NAME) == [name]:
                found = next((_varint(v, 0)[0] for n, _, v in attribute if n == _ATTRIBUTE_INT), default)
                return found - (1 << 64) if found >= 1 << 63 else found
        return default


@dataclass
class _Tensor:
    fields: list[Field]
    name: str = field(init=False)
    data_type: int = field(init=False)
    dims: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.name = "".join(_text(self.fields, _TENSOR_NAME))
        self.data_type = next((_varint(v, 0)[0] for n, _, v in self.fields if n == _TENSOR_DATA_TYPE), 0)
        self.dims = []
        for number, wire, value in self.fields:
            if number != _TENSOR_DIMS:
                continue
            if wire == _VARINT:  # one dimension per field
                self.dims.append(_varint(value, 0)[0])
                continue
            i = 0  # packed: the dimensions one after another
            while i < len(value):
                dim, i = _varint(value, i)
                self.dims.append(dim)

    def renamed_flat(self, name: str) -> bytes:
        """This tensor's bytes under ``name`` with one dimension (same data)."""
        kept = [f for f in self.fields if f[0] not in (_TENSOR_DIMS, _TENSOR_NAME)]
        size = 1
        for dim in self.dims:
            size *= dim
        head = _encoded(_TENSOR_DIMS, _VARINT, _encoded_varint(size))
        return head + b"".join(_encoded(*f) for f in kept) + _encoded(_TENSOR_NAME, _BYTES, name.encode())


def _node(
    inputs: list[str], outputs: list[str], name: str, op_type: str, domain: str = "", **integers: int
) -> bytes:
    parts = [_encoded(_NODE_INPUT, _BYTES, i.encode()) for i in inputs]
    parts += [_encoded(_NODE_OUTPUT, _BYTES, o.encode()) for o in outputs]
    parts += [
        _encoded(_NODE_NAME, _BYTES, name.encode()),
        _encoded(_NODE_OP_TYPE, _BYTES, op_type.encode()),
    ]
    for key, value in integers.items():
        attribute = (
            _encoded(_ATTRIBUTE_NAME, _BYTES, key.encode())
            + _encoded(_ATTRIBUTE_INT, _VARINT, _encoded_varint(value))
            + _encoded(_ATTRIBUTE_TYPE, _VARINT, _encoded_varint(_ATTRIBUTE_TYPE_INT))
        )
        parts.append(_encoded(_NODE_ATTRIBUTE, _BYTES, attribute))
    if domain:
        parts.append(_encoded(_NODE_DOMAIN, _BYTES, domain.encode()))
    return b"".join(parts)


def _rewrite_graph(graph: bytes, products: bool) -> tuple[bytes, int, int]:
    """``graph`` rewritten, with the number of row lookups and of products rewritten."""
    fields = _fields(graph)
    nodes = [_Node(_fields(v)) for n, _, v in fields if n == _GRAPH_NODE]
    tensors = {t.name: t for t in (_Tensor(_fields(v)) for n, _, v in fields if n == _GRAPH_INITIALIZER)}
    producer = {out: node for node in nodes for out in node.outputs}
    readers: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            readers[name] = readers.get(name, 0) + 1

    def dequantized(name: str) -> tuple[_Tensor, _Tensor, list[_Node]] | None:
        """(int8 weights, their scale, the nodes that dequantize them) when ``name`` is
        ``Mul(Cast(W), scale)`` read by nothing else, W an int8 matrix of initializers and the
        scale one per column or one per row."""
        mul = producer.get(name)
        if mul is None or mul.op_type != "Mul" or readers.get(name) != 1:
            return None
        if len(mul.inputs) != 2:
            return None
        cast = next((producer[i] for i in mul.inputs if i in producer), None)
        scale = next((tensors[i] for i in mul.inputs if i in tensors), None)
        if cast is None or cast.op_type != "Cast" or cast.integer("to", 0) != _FLOAT:
            return None
        if scale is None or scale.data_type != _FLOAT or readers.get(cast.outputs[0]) != 1:
            return None
        weights = tensors.get(cast.inputs[0])
        if weights is None or weights.data_type != _INT8 or len(weights.dims) != 2:
            return None
        if scale.dims not in ([1, weights.dims[1]], [weights.dims[1]], [weights.dims[0], 1]):
            return None
        return weights, scale, [mul, cast]

    taken: set[int] = set()
    replaced: dict[int, list[bytes]] = {}
    scales: dict[str, bytes] = {}
    lookups = 0
    for node in nodes:
        if node.op_type == "Gather" and len(node.inputs) == 2 and node.integer("axis", 0) == 0:
            found = dequantized(node.inputs[0])
            if found is None or found[1].dims != [found[0].dims[0], 1]:
                continue
            # Gather(W * s, ids) == Cast(Gather(W, ids)) * Gather(s, ids), row by row: the same
            # float32 products, for the rows asked only (not a float32 copy of the whole table).
            weights, scale, dequantizing = found
            (result,) = node.outputs
            ids = node.inputs[1]
            replaced[id(node)] = [
                _node([weights.name, ids], [f"{result}/int8"], f"{node.name}/int8", "Gather", axis=0),
                _node([f"{result}/int8"], [f"{result}/rows"], f"{node.name}/cast", "Cast", to=_FLOAT),
                _node([scale.name, ids], [f"{result}/scales"], f"{node.name}/scales", "Gather", axis=0),
                _node([f"{result}/rows", f"{result}/scales"], [result], f"{node.name}/scaled", "Mul"),
            ]
            taken.update(id(n) for n in dequantizing)
            lookups += 1
            continue
        if not products or node.op_type != "MatMul" or len(node.inputs) != 2:
            continue
        found = dequantized(node.inputs[1])
        if found is None or found[1].dims == [found[0].dims[0], 1]:
            continue
        weights, scale, dequantizing = found
        per_column = f"{scale.name}/per_column"
        scales.setdefault(per_column, scale.renamed_flat(per_column))
        replaced[id(node)] = [
            _node(
                [node.inputs[0], weights.name, per_column], node.outputs, f"{node.name}/int8",
                "DynamicQuantizeMatMul", _CONTRIB,
            )
        ]  # fmt: skip
        taken.update(id(n) for n in dequantizing)

    by_bytes = iter(nodes)
    out: list[bytes] = []
    for number, wire, value in fields:
        if number == _GRAPH_NODE:
            node = next(by_bytes)
            if id(node) in taken:
                continue
            if id(node) in replaced:  # by one node or several, in the same place
                out.extend(_encoded(_GRAPH_NODE, _BYTES, n) for n in replaced[id(node)])
                continue
        out.append(_encoded(number, wire, value))
    out.extend(_encoded(_GRAPH_INITIALIZER, _BYTES, tensor) for tensor in scales.values())
    return b"".join(out), lookups, len(replaced) - lookups


def _rewrite(model: bytes, products: bool) -> bytes:
    fields = _fields(model)
    graphs = [i for i, (number, wire, _) in enumerate(fields) if number == _MODEL_GRAPH and wire == _BYTES]
    if len(graphs) != 1:
        raise ModelFormatError("not an ONNX model: no graph")
    try:
        graph, lookups, count = _rewrite_graph(fields[graphs[0]][2], products)
    except UnicodeDecodeError:
        raise ModelFormatError("not an ONNX model: a name is not UTF-8") from None
    if not (count if products else lookups):
        raise ModelFormatError(
            "the model has no int8 weight products to run in int8" if products
            else "the model has no int8 table whose rows to look up in int8"
        )  # fmt: skip
    fields[graphs[0]] = (_MODEL_GRAPH, _BYTES, graph)
    out = b"".join(_encoded(*f) for f in fields)
    has_contrib = any(
        number == _MODEL_OPSET_IMPORT and _text(_fields(value), _OPSET_DOMAIN) == [_CONTRIB]
        for number, _, value in fields
    )
    if products and not has_contrib:
        opset = _encoded(_OPSET_DOMAIN, _BYTES, _CONTRIB.encode())
        opset += _encoded(_OPSET_VERSION, _VARINT, _encoded_varint(1))
        out += _encoded(_MODEL_OPSET_IMPORT, _BYTES, opset)
    return out


def int8_lookups(model: bytes) -> bytes:
    """``model`` (an ONNX file's bytes) with every row lookup (``Gather``) in a table of int8
    constants dequantized with a scale per row made in int8: the rows asked for are dequantized
    after the lookup, not the whole table before it. Its results are the same, bit for bit; the
    float32 copy of the table (47 MB for MiniLM's vocabulary) is never made.

    Raises:
        ModelFormatError: ``model`` is not an encoded ONNX model with a graph, or has no such
            lookup to rewrite.
    """
    return _rewrite(model, products=False)


def int8_matmuls(model: bytes) -> bytes:
    """``model`` as :func:`int8_lookups` rewrites it, and with every ``MatMul`` by a matrix of
    int8 constants dequantized with a scale per column replaced by ``DynamicQuantizeMatMul`` over
    that matrix and its scales (the activations quantized per call: close results, not equal).

    Raises:
        ModelFormatError: ``model`` is not an encoded ONNX model with a graph, or has no such
            product to replace.
    """
    return _rewrite(model, products=True)
