"""load_weights: HF names for each family, sharded checkpoints, and a clear error for a directory that does not fit,
a malformed checkpoint index or a FIFO for a tensor file."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F
from helpers import ROOT
from helpers.engine import LLAMA, QWEN, load_one_layer
from safetensors.torch import load_file, save_file

from gpu_engine.model import build_model
from gpu_engine.runner import allocate_kv_caches, build_batch
from gpu_engine.weights import WeightLoadError, init_random_weights, load_weights
from sim.config import ModelSpec
from sim.request import Request


def random_model(spec: ModelSpec, seed: int = 0):
    model = build_model(spec, torch.float32, "cpu")
    init_random_weights(model, seed, std=0.2)
    for name, param in model.named_parameters():  # non-trivial norms and biases, so a mix-up shows
        if param.dim() == 1:
            param.data.uniform_(0.5, 1.5) if "norm" in name else param.data.normal_(0, 0.2)
    return model


def llama_checkpoint(model) -> dict[str, torch.Tensor]:
    """The model's weights under HF Llama names (q/k/v and gate/up unfused)."""
    spec, out = model.spec, {}
    out["model.embed_tokens.weight"] = model.embed_tokens.weight
    out["model.norm.weight"] = model.norm.weight
    out["lm_head.weight"] = model.lm_head.weight
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        qkv = layer.self_attn.qkv_proj
        sizes = [spec.q_size, spec.kv_size, spec.kv_size]
        for proj, w in zip("qkv", qkv.weight.split(sizes)):
            out[p + f"self_attn.{proj}_proj.weight"] = w
        if qkv.bias is not None:
            for proj, b in zip("qkv", qkv.bias.split(sizes)):
                out[p + f"self_attn.{proj}_proj.bias"] = b
        out[p + "self_attn.o_proj.weight"] = layer.self_attn.o_proj.weight
        gate, up = layer.mlp.gate_up_proj.weight.chunk(2)
        out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gate, up
        out[p + "mlp.down_proj.weight"] = layer.mlp.down_proj.weight
        out[p + "input_layernorm.weight"] = layer.input_layernorm.weight
        out[p + "post_attention_layernorm.weight"] = layer.post_attention_layernorm.weight
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def qwen7b_checkpoint(llama: dict[str, torch.Tensor], spec: ModelSpec) -> dict[str, torch.Tensor]:
    """The same weights under Qwen-7B's names: c_attn = [q; k; v], w1 = up, w2 = gate."""
    out = {
        "transformer.wte.weight": llama["model.embed_tokens.weight"],
        "transformer.ln_f.weight": llama["model.norm.weight"],
        "lm_head.weight": llama["lm_head.weight"],
    }
    for i in range(spec.num_hidden_layers):
        src, dst = f"model.layers.{i}.", f"transformer.h.{i}."
        for kind in ("weight", "bias"):
            qkv = [llama[src + f"self_attn.{proj}_proj.{kind}"] for proj in "qkv"]
            out[dst + f"attn.c_attn.{kind}"] = torch.cat(qkv)
        out[dst + "attn.c_proj.weight"] = llama[src + "self_attn.o_proj.weight"]
        out[dst + "mlp.w1.weight"] = llama[src + "mlp.up_proj.weight"]
        out[dst + "mlp.w2.weight"] = llama[src + "mlp.gate_proj.weight"]
        out[dst + "mlp.c_proj.weight"] = llama[src + "mlp.down_proj.weight"]
        out[dst + "ln_1.weight"] = llama[src + "input_layernorm.weight"]
        out[dst + "ln_2.weight"] = llama[src + "post_attention_layernorm.weight"]
    return out


def forward_all(model, prompt: list[int]) -> torch.Tensor:  # [len(prompt), vocab]
    request = Request(0, 0.0, len(prompt), 1, prompt_token_ids=prompt)
    request.block_ids = [2, 0, 1]
    batch = build_batch([(request, len(prompt))], 8, "cpu")
    attn = dataclasses.replace(batch.attn, logits_indices=torch.arange(len(prompt)))
    with torch.inference_mode():
        return model(batch.input_ids, batch.positions, attn, allocate_kv_caches(model.spec, 3, 8, torch.float32, "cpu"))


def qwen7b_reference(t: dict[str, torch.Tensor], spec: ModelSpec, prompt: list[int]) -> torch.Tensor:
    """Qwen-7B's forward in plain torch, transcribed from its modeling_qwen.py (no cache, causal SDPA)."""
    heads, hd, eps = spec.num_attention_heads, spec.head_dim, spec.rms_norm_eps

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    inv_freq = 1.0 / spec.rope_theta ** (torch.arange(0, hd, 2).float() / hd)
    freqs = torch.outer(torch.arange(len(prompt)).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # [T, hd]
    cos, sin = emb.cos(), emb.sin()
    x = t["transformer.wte.weight"][torch.tensor(prompt)]  # [T, hidden]
    for i in range(spec.num_hidden_layers):
        p = f"transformer.h.{i}."
        h = rms(x, t[p + "ln_1.weight"])
        q, k, v = F.linear(h, t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"]).split(spec.hidden_size, -1)
        q, k, v = (y.view(len(prompt), heads, hd).transpose(0, 1) for y in (q, k, v))  # [heads, T, hd]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(0, 1).reshape(len(prompt), -1)
        x = x + F.linear(o, t[p + "attn.c_proj.weight"])
        h = rms(x, t[p + "ln_2.weight"])
        a1, a2 = F.linear(h, t[p + "mlp.w1.weight"]), F.linear(h, t[p + "mlp.w2.weight"])
        x = x + F.linear(a1 * F.silu(a2), t[p + "mlp.c_proj.weight"])
    return F.linear(rms(x, t["transformer.ln_f.weight"]), t["lm_head.weight"])


@pytest.fixture
def llama_dir(tmp_path):
    path = tmp_path / "llama"
    path.mkdir()
    save_file(llama_checkpoint(random_model(LLAMA)), path / "model.safetensors")
    return path


def test_qwen7b_names_load_and_match_its_reference_forward(tmp_path):
    source = random_model(dataclasses.replace(QWEN, model_type="llama"))  # Llama names, Qwen-7B's shapes
    llama = llama_checkpoint(source)
    qwen = qwen7b_checkpoint(llama, QWEN)
    save_file(qwen, tmp_path / "model.safetensors")
    model = build_model(QWEN, torch.float32, "cpu")
    load_weights(model, tmp_path)

    for (name, ours), theirs in zip(model.named_parameters(), source.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, atol=0, rtol=0, msg=name)
    prompt = [7, 300, 12, 99, 5, 5, 411, 64, 3, 250, 18, 77, 140]
    torch.testing.assert_close(forward_all(model, prompt), qwen7b_reference(qwen, QWEN, prompt), atol=1e-4, rtol=1e-4)


def test_sharded_checkpoint_loads_like_a_single_file(llama_dir, tmp_path):
    tensors = load_file(llama_dir / "model.safetensors")
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    names = sorted(tensors)
    weight_map = {}
    for shard, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
        file = f"model-0000{shard + 1}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, sharded / file)
        weight_map |= dict.fromkeys(part, file)
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))

    single, split = build_model(LLAMA, torch.float32, "cpu"), build_model(LLAMA, torch.float32, "cpu")
    load_weights(single, llama_dir)
    load_weights(split, sharded)
    for a, b in zip(single.parameters(), split.parameters(), strict=True):
        assert torch.equal(a, b)


def test_random_init_is_seeded():
    a, b, c = (build_model(LLAMA, torch.float32, "cpu") for _ in range(3))
    init_random_weights(a, seed=1)
    init_random_weights(b, seed=1)
    init_random_weights(c, seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.embed_tokens.weight, c.embed_tokens.weight)
    assert 0.015 < a.embed_tokens.weight.std() < 0.025
    assert torch.equal(a.norm.weight, torch.ones(LLAMA.hidden_size))


def edit_checkpoint(path, edit) -> None:
    tensors = load_file(path / "model.safetensors")
    edit(tensors)
    save_file(tensors, path / "model.safetensors")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), r"missing \(1\): model.layers.1.mlp.up_proj.weight"),
        (
            lambda t: t.update({"model.layers.0.self_attn.k_proj.weight": torch.zeros(16, 64)}),
            (
                r"shape mismatch \(1\): layers.0.self_attn.qkv_proj.weight: model wants \[128, 64\], checkpoint has "
                r"model.layers.0.self_attn.q_proj.weight \[64, 64\] \+ model.layers.0.self_attn.k_proj.weight \[16, 64\]"
            ),
        ),
        (
            lambda t: t.update({"model.layers.9.mlp.up_proj.weight": torch.zeros(1)}),
            r"unexpected \(1\): model.layers.9",
        ),
        (  # a 0-dimensional tensor has no dim 0 to stack: it was an IndexError
            lambda t: t.update({"model.embed_tokens.weight": torch.tensor(1.0)}),
            r"shape mismatch \(1\): embed_tokens.weight: model wants \[\d+, 64\], checkpoint has model.embed_tokens.weight \[\]",
        ),
    ],
    ids=["missing", "shape", "unexpected", "0-d"],
)
def test_checkpoint_that_does_not_fit_is_rejected_untouched(llama_dir, edit, message):
    edit_checkpoint(llama_dir, edit)
    model = random_model(LLAMA, seed=3)
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(WeightLoadError, match=message):
        load_weights(model, llama_dir)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # checked before any copy


def test_wrong_family_lists_the_first_names_and_a_count(llama_dir):
    with pytest.raises(WeightLoadError) as error:
        load_weights(build_model(QWEN, torch.float32, "cpu"), llama_dir)
    text = str(error.value)
    assert "model_type qwen" in text
    assert "missing (18): transformer.h.0.attn.c_attn.bias, transformer.h.0.attn.c_attn.weight" in text
    assert "... and 13 more; unexpected (20): model.embed_tokens.weight" in text


def test_directory_without_a_checkpoint(tmp_path):
    with pytest.raises(WeightLoadError, match="no \\*.safetensors files"):
        load_weights(build_model(LLAMA, torch.float32, "cpu"), tmp_path)
    with pytest.raises(WeightLoadError, match="not a directory"):
        load_weights(build_model(LLAMA, torch.float32, "cpu"), tmp_path / "absent")


def test_index_naming_an_absent_shard(llama_dir):
    names = load_file(llama_dir / "model.safetensors").keys()
    weight_map = dict.fromkeys(names, "model.safetensors") | {"lm_head.weight": "model-2.safetensors"}
    (llama_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(WeightLoadError, match="lists shards that are not there: model-2.safetensors"):
        load_weights(build_model(LLAMA, torch.float32, "cpu"), llama_dir)


def test_index_naming_a_shard_without_the_tensor(llama_dir):
    # The shard is there but does not hold what the index says (swapped entries): safetensors raised its own error.
    tensors = load_file(llama_dir / "model.safetensors")
    save_file({"lm_head.weight": tensors.pop("lm_head.weight")}, llama_dir / "model-2.safetensors")
    save_file(tensors, llama_dir / "model.safetensors")
    weight_map = dict.fromkeys(tensors, "model-2.safetensors") | {"lm_head.weight": "model.safetensors"}
    (llama_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(
        WeightLoadError, match=r"not in the shard the index names \(\d+\): lm_head.weight \(the index says"
    ):
        load_weights(build_model(LLAMA, torch.float32, "cpu"), llama_dir)


def test_index_without_a_weight_map(llama_dir):
    (llama_dir / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(WeightLoadError, match="no weight_map"):
        load_weights(build_model(LLAMA, torch.float32, "cpu"), llama_dir)


def test_unreadable_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(WeightLoadError, match="not a readable safetensors file"):
        load_weights(build_model(LLAMA, torch.float32, "cpu"), tmp_path)


INDEX = "model.safetensors.index.json"


@pytest.mark.parametrize(
    "index, words",
    [
        ("[1,2]", "found [1, 2]"),
        ('{"weight_map": [1,2]}', 'found {"weight_map": [1, 2]}'),
        ('{"weight_map": {"a": 5}}', 'weight_map maps "a" to 5'),
        ('{"weight_map": {"a": "../x.safetensors"}}', 'weight_map maps "a" to "../x.safetensors"'),
        ('{"weight_map": {"a": "/tmp/x.safetensors"}}', 'weight_map maps "a" to "/tmp/x.safetensors"'),
        ("[" * 100_000, "not JSON"),
        (None, "not a regular file"),  # a folder of that name
    ],
)
def test_a_malformed_index_is_one_clear_error(tmp_path, index, words):
    if index is None:
        (tmp_path / INDEX).mkdir()
    else:
        (tmp_path / INDEX).write_text(index)
    with pytest.raises(WeightLoadError) as err:
        load_one_layer(tmp_path)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / INDEX}: ") and words in message
    assert "weight_map maps tensor names to .safetensors file names in its folder" in message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("indexed", [False, True])
def test_a_fifo_for_a_tensor_file_is_refused_before_opening(tmp_path, indexed):
    fifo = tmp_path / ("x.safetensors" if indexed else "model.safetensors")
    os.mkfifo(fifo)
    if indexed:
        (tmp_path / INDEX).write_text(json.dumps({"weight_map": {"a": "x.safetensors"}}))
    # in a process of its own: opening the FIFO blocks without releasing the GIL, so no thread could time it out
    code = f"from helpers.engine import load_one_layer\nload_one_layer({str(tmp_path)!r})"
    try:
        child = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "tests", capture_output=True, text=True,
                               timeout=30, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"load_weights blocked on the FIFO {fifo}")
    assert f"WeightLoadError: {fifo}: not a regular file" in child.stderr
