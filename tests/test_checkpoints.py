"""Issue 25: --model-file, a model read from its checkpoint's headers (catalog/checkpoints.py).

The fixtures are made here, tiny: a GGUF written with gguf.GGUFWriter (the Llama layout, 2 layers
of width 64), safetensors files written by hand (8-byte header length, the JSON header, zero
bytes), and a sparse GGUF of 40 GB apparent size whose data is never written (nor read)."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from catalog.checkpoints import GGUFHeader, model_from_files, safetensors_header  # noqa: E402
from catalog.schema import CatalogError  # noqa: E402
from tests.clirun import run_cli  # noqa: E402

H, F, L, HEADS, KV, V, CTX = 64, 128, 2, 4, 2, 96, 256
KVD = H // HEADS * KV


def llama_tensors(tied=False):
    """(name, shape as torch writes it (out, in)) of the Llama layout."""
    out = [("token_embd.weight", (V, H))]
    for i in range(L):
        out += [(f"blk.{i}.attn_norm.weight", (H,)), (f"blk.{i}.attn_q.weight", (H, H)),
                (f"blk.{i}.attn_k.weight", (KVD, H)), (f"blk.{i}.attn_v.weight", (KVD, H)),
                (f"blk.{i}.attn_output.weight", (H, H)), (f"blk.{i}.ffn_norm.weight", (H,)),
                (f"blk.{i}.ffn_gate.weight", (F, H)), (f"blk.{i}.ffn_up.weight", (F, H)),
                (f"blk.{i}.ffn_down.weight", (H, F))]
    out.append(("output_norm.weight", (H,)))
    if not tied:
        out.append(("output.weight", (V, H)))
    return out


def llama_params(tied=False):
    return sum(int(np.prod(s)) for _n, s in llama_tensors(tied))


def write_gguf(path, tied=False, file_type=7, arch="llama", extra=None, tensors=None):
    """A small GGUF: norms F32, embeddings F16, the rest Q8_0 (34 bytes per 32 weights)."""
    w = gguf.GGUFWriter(str(path), arch)
    if arch == "clip":
        w.add_string("general.name", "projector")
    else:
        w.add_block_count(L)
        w.add_embedding_length(H)
        w.add_feed_forward_length(F)
        w.add_head_count(HEADS)
        w.add_head_count_kv(KV)
        w.add_context_length(CTX)
        w.add_token_list([f"t{i}" for i in range(V)])
        w.add_name("Tiny Llama")
        w.add_file_type(file_type)
    for key, value in (extra or {}).items():
        w.add_uint32(key, value)
    for name, shape in tensors or llama_tensors(tied):
        if len(shape) == 1:
            w.add_tensor(name, np.zeros(shape, np.float32))
        elif name.startswith("token_embd"):
            w.add_tensor(name, np.zeros(shape, np.float16))
        else:
            w.add_tensor(name, np.zeros((shape[0], shape[1] // 32 * 34), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def hf_tensors(tied=False):
    out = [("model.embed_tokens.weight", [V, H])]
    for i in range(L):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", [H]), (p + "self_attn.q_proj.weight", [H, H]),
                (p + "self_attn.k_proj.weight", [KVD, H]), (p + "self_attn.v_proj.weight", [KVD, H]),
                (p + "self_attn.o_proj.weight", [H, H]), (p + "post_attention_layernorm.weight", [H]),
                (p + "mlp.gate_proj.weight", [F, H]), (p + "mlp.up_proj.weight", [F, H]),
                (p + "mlp.down_proj.weight", [H, F])]
    out.append(("model.norm.weight", [H]))
    if not tied:
        out.append(("lm_head.weight", [V, H]))
    return out


def write_safetensors(path, tensors, dtype="BF16", size=2):
    """A safetensors file by hand: the 8-byte header length, the JSON header, zero bytes."""
    _write_mixed_safetensors(path, [(name, shape, dtype, size) for name, shape in tensors])
    return path


def write_config(folder, **over):
    cfg = {"model_type": "llama", "hidden_size": H, "intermediate_size": F, "num_hidden_layers": L,
           "num_attention_heads": HEADS, "num_key_value_heads": KV, "vocab_size": V, "max_position_embeddings": CTX,
           "tie_word_embeddings": False, "_name_or_path": "tiny/llama", **over}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder / "config.json"


def test_gguf_params_and_bytes_from_the_tensor_table(tmp_path):
    path = write_gguf(tmp_path / "tiny-Q8_0.gguf", tensors=llama_tensors() + [("rope_freqs.weight", (8,))])
    record, info = model_from_files(path)
    assert (record["num_layers"], record["hidden_size"], record["num_heads"], record["num_kv_heads"]) == (L, H, HEADS, KV)
    assert (record["intermediate_size"], record["vocab_size"], record["max_context"]) == (F, V, CTX)
    assert record["tied_embeddings"] is False
    assert info["params_stored"] == llama_params() == record["params"] == info["params_config"]
    assert info["weights_source"] == "header"
    norms = (2 * L + 1) * H
    linear = llama_params() - norms - V * H
    assert info["dtypes"]["F32"] == {"tensors": 2 * L + 1, "params": norms, "bytes": 4 * norms}
    assert info["dtypes"]["F16"]["bytes"] == 2 * V * H
    assert info["dtypes"]["Q8_0"]["bytes"] == linear * 34 // 32
    assert info["weights_bytes_stored"] == 4 * norms + 2 * V * H + linear * 34 // 32 + 4 * 8
    assert info["buffer_bytes"] == 4 * 8  # llama.cpp's rope_freqs: stored, not a parameter
    assert info["precision"] == "q8_0" and info["file_type_name"] == "MOSTLY_Q8_0"


def test_the_header_parser_agrees_with_gguf_reader(tmp_path):
    path = write_gguf(tmp_path / "t.gguf", extra={"llama.rope.dimension_count": 16})
    ours, theirs = GGUFHeader(path), gguf.GGUFReader(str(path))
    assert [(t.name, t.type_name, t.n_elements, t.n_bytes, t.offset, t.dims) for t in ours.tensors] == [
        (t.name, t.tensor_type.name, t.n_elements, t.n_bytes, t.data_offset - theirs.data_offset, t.shape.tolist())
        for t in theirs.tensors]
    assert ours.data_offset == theirs.data_offset
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):
            continue
        value = ours.fields[key]
        if key == "tokenizer.ggml.tokens":
            assert value.count == len(field.data) == V
        else:
            assert value == field.contents(), key
    # truncated: the tensors end past the file's end; an unknown value type
    data = path.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:-100])
    with pytest.raises(CatalogError, match="cut.gguf: is not a readable GGUF file .its tensors end at byte"):
        model_from_files(tmp_path / "cut.gguf")
    (tmp_path / "v9.gguf").write_bytes(data[:4] + (9).to_bytes(4, "little") + data[8:])
    with pytest.raises(CatalogError, match="GGUF version 9"):
        model_from_files(tmp_path / "v9.gguf")


def test_gguf_tied_split_and_mmproj(tmp_path):
    tied = write_gguf(tmp_path / "t.gguf", tied=True)
    record, _ = model_from_files(tied)
    assert record["tied_embeddings"] is True and record["params"] == llama_params(tied=True)
    # split parts: the first part's metadata, every part's tensors
    names = llama_tensors()
    write_gguf(tmp_path / "m-00001-of-00002.gguf", tensors=names[:10])
    write_gguf(tmp_path / "m-00002-of-00002.gguf", tensors=names[10:])
    record, info = model_from_files(tmp_path / "m-00001-of-00002.gguf")
    assert info["params_stored"] == llama_params() and len(info["files"]) == 2
    os.remove(tmp_path / "m-00002-of-00002.gguf")
    with pytest.raises(CatalogError, match="m-00002-of-00002.gguf: is missing"):
        model_from_files(tmp_path / "m-00001-of-00002.gguf")
    proj = write_gguf(tmp_path / "mmproj.gguf", arch="clip", tensors=[("mm.0.weight", (64, 64)), ("v.norm", (64,))])
    record, info = model_from_files([tmp_path / "t.gguf", proj])
    assert info["vision_params"] == 64 * 64 + 64 and info["vision_weights_bytes"] == 64 * 68 + 4 * 64
    assert any("vision tower/projector" in n and "--mmproj" in n for n in info["notes"])
    with pytest.raises(CatalogError, match="vision projector"):
        model_from_files(proj)


def test_a_40_gb_gguf_is_sized_without_reading_its_data(tmp_path):
    """Sparse: the header says 40 GB of tensors, the disk holds the header only."""
    path = tmp_path / "big.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    h, f, layers, vocab = 8192, 28672, 48, 128256
    for key, value in (("block_count", layers), ("embedding_length", h), ("feed_forward_length", f),
                       ("attention.head_count", 64), ("attention.head_count_kv", 8), ("context_length", 8192),
                       ):
        w.add_uint32(f"llama.{key}", value)
    w.add_token_list([f"token{i}" for i in range(vocab)])  # a real vocabulary's size: counted, not decoded
    q8 = gguf.GGMLQuantizationType.Q8_0

    def info(name, shape):  # numpy order (rows, columns); Q8_0: 34 bytes per 32 weights
        w.add_tensor_info(name, (shape[0], shape[1] // 32 * 34), np.dtype(np.uint8), shape[0] * shape[1] // 32 * 34, q8)
    info("token_embd.weight", (vocab, h))
    for i in range(layers):
        for name, shape in (("attn_q", (h, h)), ("attn_k", (1024, h)), ("attn_v", (1024, h)), ("attn_output", (h, h)),
                            ("ffn_gate", (f, h)), ("ffn_up", (f, h)), ("ffn_down", (h, f))):
            info(f"blk.{i}.{name}.weight", shape)
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor_info(f"blk.{i}.{name}.weight", (h,), np.dtype(np.float32), 4 * h)
    w.add_tensor_info("output_norm.weight", (h,), np.dtype(np.float32), 4 * h)
    info("output.weight", (vocab, h))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    total = sum(ti.nbytes + (-ti.nbytes % 32) for ti in w.tensors[0].values())
    with open(path, "r+b") as fh:
        header = fh.seek(0, 2)
        fh.truncate(header + (-header % 32) + total)
    assert os.path.getsize(path) > 40e9
    start = time.perf_counter()
    record, stored = model_from_files(path)
    elapsed = time.perf_counter() - start
    assert stored["weights_bytes_stored"] > 40e9 and stored["params_stored"] == record["params"]
    assert record["vocab_size"] == vocab
    assert elapsed < 5, elapsed  # under a second on a laptop; loose for a loaded CI machine


def test_safetensors_folder_with_index_and_config(tmp_path):
    tensors = hf_tensors()
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", tensors[:8])
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", tensors[8:])
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        n: f"model-0000{1 if i < 8 else 2}-of-00002.safetensors" for i, (n, _s) in enumerate(tensors)}}))
    with pytest.raises(CatalogError, match=f"has no config.json.*headers give {llama_params():,} parameters in 21 tensors .BF16"):
        model_from_files(tmp_path)
    write_config(tmp_path)
    record, info = model_from_files(tmp_path)
    assert record["params"] == info["params_stored"] == llama_params()
    assert info["weights_bytes_stored"] == 2 * llama_params() and info["precision"] == "bf16"
    assert info["weights_source"] == "header" and len(info["files"]) == 2
    # one file, in fp32, with a config that disagrees (tied): the count used is the config's, said so
    single = tmp_path / "one"
    single.mkdir()
    write_safetensors(single / "model.safetensors", tensors, "F32", 4)
    write_config(single, tie_word_embeddings=True)
    record, info = model_from_files(single / "model.safetensors")
    assert info["weights_source"] == "config" and info["precision"] == "fp32"
    assert info["params_stored"] - record["params"] == V * H
    # a missing shard is named
    os.remove(tmp_path / "model-00002-of-00002.safetensors")
    with pytest.raises(CatalogError, match="1 of the 2 shards that model.safetensors.index.json lists is missing: "
                                           "model-00002-of-00002.safetensors; "):
        model_from_files(tmp_path)


def _shards(folder, count, present):
    """A checkpoint's tensors spread over `count` shards named as transformers names them; only the
    shards numbered in `present` written (a partial download), with the config.json."""
    folder.mkdir(exist_ok=True)
    tensors = hf_tensors()
    for i in present:
        write_safetensors(folder / f"model-{i:05d}-of-{count:05d}.safetensors", tensors[i - 1::count])
    write_config(folder)
    return folder


def test_a_partly_downloaded_sharded_checkpoint_is_refused_by_its_missing_shards(tmp_path):
    """Some of a checkpoint's shards without the others (no index beside them, or one shard given as
    the file) were read as the whole model: its stored bytes a fraction of the weights, taken as the
    inference estimate's weights without a word. The shards' own names number their set: a missing one
    is named, as a missing GGUF split part is; a whole set given by one shard is read whole."""
    whole = _shards(tmp_path / "whole", 2, (1, 2))
    record, info = model_from_files(whole / "model-00001-of-00002.safetensors")  # one shard: its whole set
    assert info["params_stored"] == record["params"] == llama_params() and info["weights_source"] == "header"
    assert info["weights_bytes_stored"] == 2 * llama_params() and len(info["files"]) == 2
    assert model_from_files(whole)[1]["weights_bytes_stored"] == 2 * llama_params()
    part = _shards(tmp_path / "part", 4, (1, 3))
    for given in (part, part / "model-00003-of-00004.safetensors"):
        with pytest.raises(CatalogError, match="2 of the 4 shards named model-NNNNN-of-00004.safetensors are missing: "
                                               "model-00002-of-00004.safetensors, model-00004-of-00004.safetensors; "):
            model_from_files(given)
    code, out, err = run_cli("estimate", "--model-file", part, "--task", "infer", "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "model-00002-of-00004.safetensors, model-00004-of-00004.safetensors" in err
    assert "give the folder's config.json alone (--model-file PATH/config.json) to size the model" in err and "Traceback" not in err
    # an index listing more shards than are here: every missing one named (the first few, then a count)
    many = _shards(tmp_path / "many", 8, (1,))
    (many / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {"total_size": 2 * llama_params()},
        "weight_map": {n: f"model-{i % 8 + 1:05d}-of-00008.safetensors" for i, (n, _s) in enumerate(hf_tensors())}}))
    with pytest.raises(CatalogError, match="7 of the 8 shards that model.safetensors.index.json lists are missing: "
                                           "model-00002-of-00008.safetensors, .*model-00005-of-00008.safetensors and 3 more"):
        model_from_files(many)


def test_safetensors_header_is_checked(tmp_path):
    good = write_safetensors(tmp_path / "a.safetensors", [("w", [4, 4])])
    assert safetensors_header(good)["tensors"] == {"w": ("BF16", [4, 4], 32)}
    bad = tmp_path / "b.safetensors"
    bad.write_bytes((10**12).to_bytes(8, "little") + b"{}")
    with pytest.raises(CatalogError, match="header of 1,000,000,000,000 bytes"):
        safetensors_header(bad)
    raw = json.dumps({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 64]}}).encode()
    bad.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(32))
    with pytest.raises(CatalogError, match="truncated download"):
        safetensors_header(bad)
    raw = json.dumps({"w": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 4]}}).encode()
    bad.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(4))
    with pytest.raises(CatalogError, match="dtype 'Q9' is not known"):
        safetensors_header(bad)


def test_cli_estimate_serve_and_bad_input(tmp_path):
    path = write_gguf(tmp_path / "tiny-Q8_0.gguf")
    code, out, err = run_cli("estimate", "--model-file", path, "--task", "infer", "--json")
    assert code == 0, err
    data = json.loads(out)
    ck = data["checkpoint"]
    assert data["model"] == "tiny-llama" and data["precision"] == "q8_0"
    assert ck["format"] == "gguf" and ck["weights_source"] == "header" and ck["params_stored"] == llama_params()
    assert ck["weights_bytes_engine"] == data["weights_bytes"]
    assert ck["weights_bytes_difference"] == ck["weights_bytes_stored"] - data["weights_bytes"]
    code, out, err = run_cli("serve", "--model-file", path, "--gpu", "h100-sxm-80gb", "--engine", "llama.cpp",
                             "--max-model-len", "256", "--json")
    assert code == 0, err
    assert json.loads(out)["checkpoint"]["precision"] == "q8_0"
    folder = tmp_path / "st"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", hf_tensors())
    write_config(folder)
    code, out, err = run_cli("estimate", "--model-file", folder, "--model", "mine", "--task", "infer", "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == "mine" and json.loads(out)["checkpoint"]["weights_source"] == "header"
    code, out, err = run_cli("estimate", "--model-file", folder / "config.json", "--task", "infer", "--json")
    assert code == 0 and json.loads(out)["checkpoint"]["weights_source"] == "config"
    for bad, message in ((tmp_path / "nope.gguf", "does not exist; accepted: a GGUF file"),
                         (tmp_path, "is a folder without"),
                         (tmp_path / "tiny-Q8_0.gguf.txt", "does not exist")):
        code, out, err = run_cli("estimate", "--model-file", bad, "--task", "infer")
        assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1, err
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello world, not a model")
    code, _out, err = run_cli("estimate", "--model-file", junk, "--task", "infer")
    assert code == 2 and "is not a model file; accepted" in err
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(path.read_bytes()[:200])
    code, _out, err = run_cli("estimate", "--model-file", broken, "--task", "infer")
    assert code == 2 and "broken.gguf" in err and len(err.strip().splitlines()) == 1, err
    code, _out, err = run_cli("estimate", "--model-file", path, "--model-config", folder / "config.json", "--task", "infer")
    assert code == 2 and "not both" in err


# ---- --model ORG/NAME: the Hub, through huggingface_hub (no network here: a cache built in tmp) ----

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_cache(home, repo="tiny-org/Tiny-Llama", shards=True):
    """The Hub cache's layout: models--ORG--NAME/refs/main holds the commit, snapshots/COMMIT the files."""
    folder = home / "hub" / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    write_config(snap)
    if shards:
        write_safetensors(snap / "model.safetensors", hf_tensors())
    return snap


def _offline_hub(monkeypatch, home) -> None:
    """huggingface_hub reads the cache under `home` (fake_cache's) and goes to no network."""
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_hub_id_offline_from_the_cache(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    fake_cache(tmp_path)
    _offline_hub(monkeypatch, tmp_path)
    code, out, err = run_cli("estimate", "--model", "tiny-org/Tiny-Llama", "--task", "infer", "--json")
    assert code == 0, err
    data = json.loads(out)
    ck = data["checkpoint"]
    assert data["model"] == "tiny-org-tiny-llama" and data["params"] == llama_params()
    assert (ck["hub_id"], ck["commit"], ck["offline"], ck["weights_source"]) == ("tiny-org/Tiny-Llama", COMMIT, True, "header")
    assert ck["precision"] == "bf16" and ck["weights_bytes_stored"] == 2 * llama_params()
    # a revision by commit; a repo not in the cache: one line naming the id and what to do
    code, out, err = run_cli("estimate", "--model", f"tiny-org/Tiny-Llama@{COMMIT}", "--task", "infer", "--json")
    assert code == 0 and json.loads(out)["checkpoint"]["commit"] == COMMIT
    code, out, err = run_cli("estimate", "--model", "other/missing", "--task", "infer")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "other/missing" in err and "HF_HUB_OFFLINE" in err and str(tmp_path) in err
    code, _out, err = run_cli("estimate", "--model", "bad/id/three", "--task", "infer")
    assert code == 2 and "accepted: ORG/NAME" in err
    # sweep: Hub ids among catalog ids in --models; the CSV names the Hub id and its commit
    code, out, err = run_cli("sweep", "--models", "llama-3.1-8b,tiny-org/Tiny-Llama", "--task", "infer",
                             "--gpu-ids", "h100-sxm-80gb")
    assert code == 0, err
    import csv
    import io
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["model"]: r["model_source"] for r in rows} == {
        "llama-3.1-8b": "catalog", "tiny-org-tiny-llama": f"Hugging Face Hub tiny-org/Tiny-Llama@{COMMIT}"}
    code, out, err = run_cli("budget", "--budget", "100000", "--workloads", "tiny-org/Tiny-Llama:infer-int4", "--json")
    assert code == 0, err
    assert {r["model"] for r in json.loads(out)["rows"]} == {"tiny-org-tiny-llama"}
    # the config alone (no shard cached): the config's count, said so
    fake_cache(tmp_path, "tiny-org/config-only", shards=False)
    code, out, err = run_cli("serve", "--model", "tiny-org/config-only", "--gpu", "h100-sxm-80gb", "--engine", "vllm",
                             "--max-model-len", "256", "--json")
    assert code == 0, err
    ck = json.loads(out)["checkpoint"]
    assert ck["weights_source"] == "config" and "no safetensors file" in ck["notes"][0]


def test_a_hub_host_that_does_not_resolve_reads_the_cache_at_once(tmp_path, monkeypatch):
    """With no DNS, huggingface_hub retried a HEAD five times with backoff (24 s measured) before the
    message. A name that does not resolve is asked once: the cache is read as if offline, and a repo
    not in it gets the one-line message at once; hf_hub_download is never called."""
    hub = pytest.importorskip("huggingface_hub")
    import socket
    fake_cache(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.invalid")
    asked = []

    def no_dns(host, *a, **kw):
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def never(*a, **kw):
        raise AssertionError("hf_hub_download called: its retries take 24 s")
    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    monkeypatch.setattr(hub, "hf_hub_download", never)
    code, out, err = run_cli("estimate", "--model", "tiny-org/Tiny-Llama", "--task", "infer", "--json")
    assert code == 0, err
    ck = json.loads(out)["checkpoint"]
    assert asked == ["hub.example.invalid"]
    assert (ck["offline"], ck["commit"], ck["weights_source"]) == (True, COMMIT, "header")
    assert "hub.example.invalid: name not resolved" in ck["notes"][0] and "local cache" in ck["notes"][0]
    code, out, err = run_cli("estimate", "--model", "other/missing", "--task", "infer")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "other/missing" in err and "name not resolved" in err and str(tmp_path) in err


def test_hub_id_offline_with_some_shards_cached_is_sized_by_its_config(tmp_path, monkeypatch):
    """A cache holding 1 of a checkpoint's 2 shards (no index cached) gave that shard's bytes as the
    model's stored weights; the missing shard is now named in a note and the config sizes the model."""
    pytest.importorskip("huggingface_hub")
    snap = fake_cache(tmp_path, shards=False)
    _shards(snap, 2, (1,))
    _offline_hub(monkeypatch, tmp_path)
    code, out, err = run_cli("estimate", "--model", "tiny-org/Tiny-Llama", "--task", "infer", "--json")
    assert code == 0, err
    data = json.loads(out)
    ck = data["checkpoint"]
    assert data["params"] == llama_params() and ck["weights_source"] == "config" and "weights_bytes_stored" not in ck
    assert ck["notes"][0].startswith("offline: 1 of the 2 shards named model-NNNNN-of-00002.safetensors is missing: "
                                     "model-00002-of-00002.safetensors")


def test_hub_id_online_and_the_hub_errors(tmp_path, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")
    from types import SimpleNamespace

    from catalog.checkpoints import _hub_errors
    snap = fake_cache(tmp_path, shards=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    import catalog.checkpoints as checkpoints
    monkeypatch.setattr(checkpoints, "_hub_unresolvable", lambda endpoint: None)  # the Hub's host resolves
    calls = []

    def download(repo, filename, **kw):
        calls.append((repo, filename, kw.get("token"), kw.get("revision")))
        return str(snap / filename)

    tensors = {n: SimpleNamespace(dtype="BF16", shape=s, data_offsets=(0, 2 * int(np.prod(s)))) for n, s in hf_tensors()}
    meta = SimpleNamespace(files_metadata={"model.safetensors": SimpleNamespace(tensors=tensors)})
    monkeypatch.setattr(hub, "hf_hub_download", download)
    monkeypatch.setattr(hub.HfApi, "get_safetensors_metadata", lambda self, repo, revision=None: meta, raising=False)
    code, out, err = run_cli("estimate", "--model", "tiny-org/Tiny-Llama@main", "--task", "infer", "--json")
    assert code == 0, err
    ck = json.loads(out)["checkpoint"]
    assert calls == [("tiny-org/Tiny-Llama", "config.json", "hf_test", "main")]
    assert (ck["commit"], ck["revision"], ck["weights_source"], ck["params_stored"]) == (COMMIT, "main", "header", llama_params())
    E = _hub_errors()
    for error, message in (("GatedRepoError", "is gated on the Hugging Face Hub: accept its terms"),
                           ("RepositoryNotFoundError", "was not found on the Hugging Face Hub"),
                           ("RevisionNotFoundError", "has no revision")):
        def refuse(*a, _e=E[error], **kw):
            exc = _e.__new__(_e)  # the library's own class; its __init__ wants an HTTP response (requests or httpx)
            exc.args = ("refused",)
            raise exc
        monkeypatch.setattr(hub, "hf_hub_download", refuse)
        code, out, err = run_cli("estimate", "--model", "gated-org/Gated-7B", "--task", "infer")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "gated-org/Gated-7B" in err and message in err, err


def _write_mixed_safetensors(path, tensors):
    """tensors: (name, shape, dtype, bytes per element); zero data after the header."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, dtype, size in tensors:
        n = int(np.prod(shape)) * size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        fh.truncate(8 + len(raw) + offset)
    return offset


FP8_LAYERS = 4  # the first and the last stay BF16, so two layers in between are FP8


def _fp8_mlp_only_tensors():
    """Meta's fp8_mixed layout: e4m3 feed-forward weights (with an fp32 scale per output row) in every
    layer but the first and the last; attention, norms, embeddings and lm_head in BF16."""
    out = [("model.embed_tokens.weight", [V, H], "BF16", 2)]
    for i in range(FP8_LAYERS):
        p = f"model.layers.{i}."
        out += [(p + n, shape, "BF16", 2) for n, shape in (
            ("input_layernorm.weight", [H]), ("self_attn.q_proj.weight", [H, H]), ("self_attn.k_proj.weight", [KVD, H]),
            ("self_attn.v_proj.weight", [KVD, H]), ("self_attn.o_proj.weight", [H, H]),
            ("post_attention_layernorm.weight", [H]))]
        for n, shape in (("mlp.gate_proj", [F, H]), ("mlp.up_proj", [F, H]), ("mlp.down_proj", [H, F])):
            if i in (0, FP8_LAYERS - 1):
                out.append((p + n + ".weight", shape, "BF16", 2))
            else:
                out += [(p + n + ".weight", shape, "F8_E4M3", 1), (p + n + ".weight_scale", [shape[0], 1], "F32", 4)]
    return out + [("model.norm.weight", [H], "BF16", 2), ("lm_head.weight", [V, H], "BF16", 2)]


@pytest.mark.parametrize("quant", [
    {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
     "modules_to_not_convert": [f"model.layers.{i}.self_attn.{p}_proj" for i in range(FP8_LAYERS) for p in "qkvo"]
     + ["model.layers.0.mlp", f"model.layers.{FP8_LAYERS - 1}.mlp", "lm_head"]},
    {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
     "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}},
])
def test_an_fp8_checkpoint_that_keeps_layers_in_bf16_is_weighed_by_its_stored_bytes(tmp_path, quant):
    folder = tmp_path / "fp8-ckpt"
    folder.mkdir()
    write_config(folder, quantization_config=quant, torch_dtype="bfloat16", num_hidden_layers=FP8_LAYERS)
    tensors = _fp8_mlp_only_tensors()
    stored = _write_mixed_safetensors(folder / "model.safetensors", tensors)
    assert {dtype for _n, _s, dtype, _b in tensors} == {"BF16", "F8_E4M3", "F32"}
    code, out, err = run_cli("estimate", "--model-file", str(folder), "--task", "infer", "--precision", "fp8", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["checkpoint"]["weights_bytes_source"] == "header"
    assert data["weights_bytes"] == data["checkpoint"]["weights_bytes_stored"] == stored
    # the parameters are the config's (the scales are not parameters)
    assert data["params"] == sum(int(np.prod(shape)) for name, shape, _d, _b in tensors if not name.endswith("_scale"))
    # a quantization_config the engine does not know leaves the row to the arithmetic (fp8 at 8 bits
    # for every linear layer): the stored bytes are only shown beside it
    write_config(folder, quantization_config={"quant_method": "some_other_fp8"}, torch_dtype="bfloat16",
                 num_hidden_layers=FP8_LAYERS)
    code, out, err = run_cli("estimate", "--model-file", str(folder), "--task", "infer", "--precision", "fp8", "--json")
    assert code == 0, err
    other = json.loads(out)
    assert other["checkpoint"]["weights_bytes_source"] == "config" and other["weights_bytes"] < stored


def test_the_catalog_405b_at_fp8_is_metas_fp8_checkpoint(models):
    """The catalog's Llama 3.1 405B served at fp8 weighs Meta's FP8 checkpoint (fbgemm_fp8, the layout of
    _fp8_mlp_only_tensors above at full size): worked out here from the catalog's shapes, not read back
    from the YAML's comment. Other precisions keep the arithmetic."""
    m = models.set_index("id").loc["llama-3.1-405b"]
    h, f, layers, params = (int(m[k]) for k in ("hidden_size", "intermediate_size", "num_layers", "params"))
    ffn = 3 * h * f  # gate, up, down
    fp8_layers = layers - 2  # the first and the last stay BF16
    row_scales = fp8_layers * (f + f + h) * 4  # one fp32 scale per output row of gate, up and down
    expected = fp8_layers * ffn * 1 + row_scales + (params - fp8_layers * ffn) * 2
    assert int(m["stored_weights_bytes"]) == expected and m["stored_precision"] == "fp8"
    per_gpu = {}
    for precision in ("fp8", "bf16", "int4"):
        code, out, err = run_cli("estimate", "--model", "llama-3.1-405b", "--task", "infer", "--precision", precision,
                                 "--gpus", "8", "--tp", "8", "--json")
        assert code == 0, err
        per_gpu[precision] = json.loads(out)["weights_bytes"]
    assert per_gpu["fp8"] == expected / 8  # 56.72 GiB, vLLM logged 57.75 (references.yaml)
    assert per_gpu["bf16"] == params * 2 / 8  # every weight in BF16, the arithmetic as before
    # int4 (AWQ / GPTQ, group 128): the arithmetic's linear layers at 4.25 bits, under the FP8 checkpoint
    assert per_gpu["int4"] < per_gpu["fp8"] / 2


def phi3_tensors(tied=False):
    """llama.cpp's phi3 layout: q/k/v in one attn_qkv, gate and up in one ffn_up (2F rows)."""
    out = [("token_embd.weight", (V, H))]
    for i in range(L):
        out += [(f"blk.{i}.attn_norm.weight", (H,)), (f"blk.{i}.attn_qkv.weight", (H + 2 * KVD, H)),
                (f"blk.{i}.attn_output.weight", (H, H)), (f"blk.{i}.ffn_norm.weight", (H,)),
                (f"blk.{i}.ffn_up.weight", (2 * F, H)), (f"blk.{i}.ffn_down.weight", (H, F))]
    out.append(("output_norm.weight", (H,)))
    if not tied:
        out.append(("output.weight", (V, H)))
    return out


@pytest.mark.parametrize("tied", [False, True])
def test_a_phi3_gguf_with_fused_tensors_is_read_as_the_llama_layout(tmp_path, tied):
    """Phi-3 / Phi-4 GGUFs (general.architecture phi3) fuse q/k/v and gate/up: the same weights as the Llama
    layout's separate tensors, so the architecture's count equals the file's, and the family is the checkpoint's."""
    path = write_gguf(tmp_path / "phi.gguf", arch="phi3", tied=tied, tensors=phi3_tensors(tied))
    record, info = model_from_files([path])
    assert record["family"] == "custom-phi3" and record["tied_embeddings"] is tied
    assert record["params"] == llama_params(tied) == sum(int(np.prod(s)) for _n, s in phi3_tensors(tied))
    assert info["weights_source"] == "header"  # the tensors hold the architecture's count


def test_a_gpt_oss_gguf_is_read_as_gpt_oss(tmp_path):
    """llama.cpp's gpt-oss GGUFs (general.architecture gpt-oss: the experts' count, the experts per token, 64-wide heads,
    a 128-token window on alternating layers) map onto the fields catalog/user.py reads for gpt_oss: the family is
    custom-gpt_oss (the engine's eager attention under transformers, its sinks and biases), the window alternates."""
    extra = {"gpt-oss.expert_count": 4, "gpt-oss.expert_used_count": 2, "gpt-oss.attention.key_length": 16,
             "gpt-oss.attention.sliding_window": 128}
    path = write_gguf(tmp_path / "gpt-oss.gguf", arch="gpt-oss", extra=extra)
    record, _info = model_from_files([path])
    assert record["family"] == "custom-gpt_oss"
    assert (record["num_experts"], record["experts_per_token"], record["head_dim"]) == (4, 2, 16)
    assert record["expert_intermediate_size"] == F and record["attention_sinks"] and record["expert_bias"]
    assert (record["sliding_window"], record["sliding_window_layers"]) == (128, (L + 1) // 2)


def test_a_multi_token_prediction_layer_is_named_not_counted(tmp_path):
    """Qwen3-Next's and Qwen3.5's checkpoints carry an `mtp.*` layer that transformers drops on load
    (`_keys_to_ignore_on_load_unexpected = [r"^mtp.*"]`) and vLLM / SGLang load only as a speculative draft: its
    tensors stay out of the stored count and bytes (which then equal the config's), and the note names them."""
    mtp = [("mtp.fc.weight", [H, 2 * H]), ("mtp.layers.0.self_attn.q_proj.weight", [H, H]), ("mtp.norm.weight", [H])]
    write_safetensors(tmp_path / "model.safetensors", hf_tensors() + mtp)
    write_config(tmp_path)
    record, info = model_from_files(tmp_path)
    assert info["params_stored"] == record["params"] == llama_params() and info["weights_source"] == "header"
    assert info["weights_bytes_stored"] == 2 * llama_params()
    extra = 2 * H * H + H * H + H
    assert any(f"multi-token-prediction layer (mtp.*): {extra:,} parameters, {2 * extra:,} bytes" in n for n in info["notes"])


def test_a_split_gguf_whose_output_matrix_is_in_a_later_part_is_not_read_as_tied(tmp_path):
    """llama.cpp's gguf-split keeps the metadata in the first part and cuts the tensor list in order, so
    output.weight (the untied lm_head) is in a later part. The tied check read the first part's tensors only:
    the model lost a vocab x hidden matrix (a Llama 3.1 8B F16 in two parts: 7,504,924,672 parameters, not
    8,030,261,248) and weights_source fell to config with a note of a mismatch that was not there."""
    names = llama_tensors()
    write_gguf(tmp_path / "m-00001-of-00002.gguf", tensors=names[:10])
    write_gguf(tmp_path / "m-00002-of-00002.gguf", tensors=names[10:])  # output.weight is the last tensor
    for given in ("m-00001-of-00002.gguf", "m-00002-of-00002.gguf"):
        record, info = model_from_files(tmp_path / given)
        assert record["tied_embeddings"] is False and record["params"] == llama_params() == info["params_stored"]
        assert info["weights_source"] == "header" and not any("the tensors hold" in n for n in info["notes"])


def test_serve_offers_a_stored_precision_only_to_an_engine_that_runs_it(tmp_path):
    """A BF16 safetensors checkpoint under llama.cpp, Ollama, ExLlamaV2 or MLC-LLM was given bf16 as its precision
    (default_precision), which those engines refuse: `serve --engine llama.cpp --model-file FOLDER` exited 2 with
    "precision 'bf16' is not accepted for llama.cpp/ollama", a precision the user never gave. The engine's default is
    used instead (as for a catalog model), with a note. A GGUF whose type serve does not model (F32) under llama.cpp
    is refused naming the file's type, not sized at the engine's default q4_k_m."""
    folder = tmp_path / "st"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", hf_tensors())
    write_config(folder)
    for engine, default in (("llama.cpp", "q4_k_m"), ("ollama", "q4_k_m"), ("exllamav2", "exl2-4.0"),
                            ("exllamav3", "exl3-4.0"), ("mlc-llm", "q4f16_1"), ("vllm", "bf16")):
        code, out, err = run_cli("serve", "--model-file", folder, "--gpu", "h100-sxm-80gb", "--engine", engine,
                                 "--max-model-len", "256", "--json")
        assert code == 0, (engine, err)
        data = json.loads(out)
        assert data["precision"] == default, engine
        assert (engine == "vllm") != any("does not take" in n for n in data["checkpoint"]["notes"]), engine
    # a 16-bit GGUF (F16, BF16: convert_hf_to_gguf.py's own output) is served as stored; an F32 one is refused, naming
    # the file's type, not sized at the engine's default q4_k_m
    f16 = write_gguf(tmp_path / "tiny-F16.gguf", file_type=1)
    code, out, err = run_cli("serve", "--model-file", f16, "--gpu", "h100-sxm-80gb", "--engine", "llama.cpp",
                             "--max-model-len", "256", "--json")
    assert code == 0, err
    assert json.loads(out)["precision"] == "fp16"
    f32 = write_gguf(tmp_path / "tiny-F32.gguf", file_type=0)
    code, out, err = run_cli("serve", "--model-file", f32, "--gpu", "h100-sxm-80gb", "--engine", "llama.cpp",
                             "--max-model-len", "256")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "tiny-F32.gguf" in err and "ALL_F32" in err and "accepted: --precision q8_0" in err and "bf16, fp16" in err


def test_a_bf16_checkpoint_is_served_in_fp16_on_a_card_without_bf16(tmp_path):
    """vLLM loads a bf16 checkpoint in float16 on a T4 (its dtype 'auto', vllm/config/model.py _resolve_auto_dtype) and
    refuses --dtype bfloat16 there (engine/serving.py NO_BF16_ARCHITECTURES): the stored precision, which the user did
    not type, becomes fp16 on such a card (the same bytes), as a catalog model's default does; --precision bf16 typed
    is still refused."""
    folder = tmp_path / "st"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", hf_tensors())
    write_config(folder)
    argv = ("serve", "--model-file", folder, "--engine", "vllm", "--max-model-len", "256", "--json")
    code, out, err = run_cli(*argv, "--gpu", "t4")
    assert code == 0, err
    assert json.loads(out)["precision"] == "fp16" and "--dtype float16" in json.loads(out)["command"]
    code, out, err = run_cli(*argv, "--gpu", "t4", "--precision", "bf16")
    assert code == 2 and "precision 'bf16' is not accepted on gpu 't4'" in err


def test_engine_takes_precision_agrees_with_serve():
    """engine/serving.py engine_takes_precision (what default_precision asks) is serve's own per-engine precision
    checks, one value at a time: every engine x every precision, on a card that refuses no format."""
    import pandas as pd

    from catalog.db import default_catalog
    from engine.scenarios import INFER_PRECISIONS
    from engine.serving import ENGINES, MLC_BITS, MLX_BITS, REQUEST_DEFAULTS, _check, engine_takes_precision
    cat = default_catalog()
    models, gpus = cat.models(), cat.gpus()
    for engine in ENGINES:
        for precision in (*INFER_PRECISIONS, *MLC_BITS, *MLX_BITS, "exl2-4.0", "exl3-4.0", "exl3-1.5", "exl3-0.5"):
            gpu = "apple-m4-max-128gb" if engine == "mlx-lm" else "h100-sxm-80gb"  # (mlx-lm: Apple GPUs only)
            req = pd.DataFrame([{**REQUEST_DEFAULTS, "model": "llama-3.1-8b", "gpu": gpu, "engine": engine,
                                 "precision": precision, "max_model_len": 4096}])
            try:
                _check(req, models, gpus)
                served = True
            except ValueError as exc:
                assert "precision" in str(exc) or "fp" in str(exc), (engine, precision, exc)
                served = False
            assert engine_takes_precision(engine, precision) == served, (engine, precision)


def test_the_stored_bytes_are_compared_with_the_whole_language_model(tmp_path):
    """weights_bytes_difference is stored minus estimate: the estimate's weights_bytes are per GPU and count the vision
    tower, the stored bytes are the whole language model's. At --tp 2 a Llama 3.1 8B read +8,030,261,248 (the estimate
    looked half the file), and a Gemma 3 27B's language model -846,120,672 (its SigLIP tower), where both agree to the
    byte. The comparison is now with the whole language model's weights, for estimate, check and serve."""
    folder = tmp_path / "vl"
    folder.mkdir()
    write_safetensors(folder / "model.safetensors", hf_tensors() + [("vision_tower.proj.weight", [H, H])])
    write_config(folder)
    for command in (("estimate", "--task", "infer", "--tp", "2", "--gpus", "2"),
                    ("check", "--task", "infer", "--tp", "2", "--gpus", "2", "--gpu", "h100-sxm-80gb"),
                    ("serve", "--gpu", "h100-sxm-80gb", "--engine", "vllm", "--gpus", "2", "--max-model-len", "256")):
        code, out, err = run_cli(*command, "--model-file", folder, "--json")
        assert code == 0, (command, err)
        data = json.loads(out)
        ck = data["checkpoint"]
        assert ck["vision_params"] == H * H and ck["weights_bytes_stored"] == 2 * llama_params(), command
        assert (ck["weights_bytes_engine"], ck["weights_bytes_difference"]) == (2 * llama_params(), 0), command


def _nvfp4_tensors(packed_name):
    """ModelOpt's / compressed-tensors' NVFP4 layout: every decoder linear as two e2m1 values a byte (U8), an e4m3
    scale per 16 weights, fp32 global scales; embeddings, norms and lm_head in BF16."""
    out = []
    for name, shape in hf_tensors():
        if name.startswith("model.layers.") and name.endswith("_proj.weight"):
            stem = name[: -len(".weight")]
            out += [(f"{stem}.{packed_name}", [shape[0], shape[1] // 2], "U8", 1),
                    (f"{stem}.weight_scale", [shape[0], shape[1] // 16], "F8_E4M3", 1),
                    (f"{stem}.weight_scale_2", [], "F32", 4), (f"{stem}.input_scale", [], "F32", 4)]
        else:
            out.append((name, shape, "BF16", 2))
    return out


@pytest.mark.parametrize("quant,packed_name", [
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
      "exclude_modules": ["lm_head"]}, "weight"),
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "group_size": 16}}, "weight"),
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
                                                                       "strategy": "tensor_group", "group_size": 16}}}},
     "weight_packed"),
])
def test_an_nvfp4_checkpoint_is_estimated_at_nvfp4(tmp_path, quant, packed_name):
    """An NVFP4 checkpoint (NVIDIA ModelOpt's nvidia/*-FP4, llm-compressor's *-NVFP4) was not recognised: without
    --precision the estimate took bf16 (a Llama 3.1 8B NVFP4, 6,027,749,120 bytes stored, estimated at
    16,060,522,496) although the engine models nvfp4. Its precision is now nvfp4 and the stored bytes its weights."""
    folder = tmp_path / "nvfp4"
    folder.mkdir()
    write_config(folder, quantization_config=quant, torch_dtype="bfloat16")
    stored = _write_mixed_safetensors(folder / "model.safetensors", _nvfp4_tensors(packed_name))
    code, out, err = run_cli("estimate", "--model-file", folder, "--task", "infer", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["precision"] == "nvfp4" and data["checkpoint"]["precision"] == "nvfp4"
    assert data["weights_bytes"] == data["checkpoint"]["weights_bytes_stored"] == stored
    assert data["params"] == llama_params() and data["checkpoint"]["weights_bytes_source"] == "header"


def test_a_draft_model_from_a_file_is_sized_as_stored(tmp_path):
    """--draft-model took a catalog id or ORG/NAME only: llama-server's -md takes a GGUF file, and
    `--draft-model draft.gguf` was refused ("not in the catalog"). It takes what --model-file takes now, and a draft
    read from its checkpoint is loaded as stored (llama.cpp loads the file as it is; vLLM the draft with its own
    quantization), not at the target's precision: an F16 draft beside a Q8_0 target weighs its F16 bytes."""
    target = write_gguf(tmp_path / "target-Q8_0.gguf")
    draft = write_gguf(tmp_path / "draft-F16.gguf", file_type=1)
    _record, info = model_from_files(draft)
    code, out, err = run_cli("serve", "--model-file", target, "--draft-model", draft, "--gpu", "h100-sxm-80gb",
                             "--engine", "llama.cpp", "--max-model-len", "256", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["precision"] == "q8_0" and data["draft_model"] != data["model"]
    assert data["draft_weights_bytes"] == info["weights_bytes_stored"]  # as stored (f16 read as fp16), one GPU
    code, out, err = run_cli("serve", "--model-file", target, "--draft-model", tmp_path / "missing.gguf",
                             "--gpu", "h100-sxm-80gb", "--engine", "llama.cpp", "--max-model-len", "256")
    assert code == 2 and out == "" and "missing.gguf: does not exist" in err and len(err.strip().splitlines()) == 1


def test_an_offline_revision_not_in_the_cache_names_the_download_of_that_revision(tmp_path, monkeypatch):
    """ORG/NAME@REV offline with only main cached: the message told the user to run `hf download ORG/NAME config.json`,
    which fetches main's config and leaves the revision asked for missing; it names --revision REV now."""
    pytest.importorskip("huggingface_hub")
    fake_cache(tmp_path)
    _offline_hub(monkeypatch, tmp_path)
    code, out, err = run_cli("estimate", "--model", "tiny-org/Tiny-Llama@v2.0", "--task", "infer")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "hf download tiny-org/Tiny-Llama config.json --revision v2.0" in err
    code, out, err = run_cli("estimate", "--model", "tiny-org/Other", "--task", "infer")
    assert code == 2 and "hf download tiny-org/Other config.json)" in err


def test_a_safetensors_model_names_its_files_as_its_source(tmp_path):
    """sweep's model_source column names the file a row's model came from (docs/models.md): a GGUF's did, a
    safetensors folder's read 'config.json (config.json)', the config's default."""
    import csv
    import io
    folder = tmp_path / "my-model"
    folder.mkdir()
    tensors = hf_tensors()
    write_safetensors(folder / "model-00001-of-00002.safetensors", tensors[:5])
    write_safetensors(folder / "model-00002-of-00002.safetensors", tensors[5:])
    write_config(folder)
    code, out, err = run_cli("sweep", "--model-file", folder, "--task", "infer", "--gpu-ids", "h100-sxm-80gb")
    assert code == 0, err
    assert {r["model_source"] for r in csv.DictReader(io.StringIO(out))} == {"safetensors (my-model, 2 files)"}
    record, _info = model_from_files(folder / "model-00002-of-00002.safetensors")
    assert record["source"] == "safetensors (model-00002-of-00002.safetensors, 2 files)"
