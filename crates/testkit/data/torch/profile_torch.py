#!/usr/bin/env python3
"""Real torch.profiler fixtures mirroring tracegraph's Candle examples (Llama decode, BERT forward).

What it makes (next to this file, or in --out):

  llama.trace.json.gz       torch.profiler Chrome trace (export_chrome_trace, gzipped, gzip mtime 0)
                            of a tiny random-weight Hugging Face LlamaForCausalLM decoding greedily
                            with a KV cache, one generated token per profiler step.
  llama.key_averages.json   torch's own prof.key_averages() for the SAME profiler cycle (both are
                            written from one on_trace_ready callback): per op name the count,
                            self_cpu_time_total_us and cpu_time_total_us (microseconds, floats,
                            exactly as torch reports them), plus run metadata.
  bert.trace.json.gz        the same for a tiny random-weight BertModel, one forward per step.
  bert.key_averages.json

The models mirror crates/trace-candle/examples/profile_llama.rs (`tiny_config()`, PROMPT=16,
DECODE=20, tokens (i*37+11)%1000) and profile_bert.rs (hidden 128, 2 layers, 8 heads,
intermediate 512, vocab 1000, max positions 256, batch 4 x 128 tokens, ids i*37%1000, token
types 0, no attention mask), f32 on the CPU, eval mode, torch.no_grad(), eager attention
(Candle computes q@k^T, softmax, @v explicitly), seeded random weights (never from_pretrained).

Candle-like span names. Forward pre/post hooks on modules open/close torch.profiler
record_function ranges (chrome trace cat "user_annotation") named like candle-transformers'
`tracing` spans, with the `#k` sibling index trace-candle's TraceLayer appends (k counts earlier
siblings of the same name under the same parent; it restarts inside each op). One root range per
forward is named like the Candle example's `capture.op(..)`: `llama.forward` / `bert.forward`.
So nesting gives paths such as
  llama.forward/block#0/attn#0/linear#2        (v_proj)
  llama.forward/block#1/mlp#0/linear#0         (gate_proj)
  bert.forward/model#0/encoder#0/layer#1/attn#0/self-attn#0/linear#0   (query)
Mapping (HF module -> Candle span):
  Llama: decoder layer -> block, input/post_attention_layernorm and final norm -> rms-norm,
         self_attn -> attn, q/k/v/o_proj, gate/up/down_proj, lm_head -> linear, mlp -> mlp;
         rotary: HF's apply_rotary_pos_emb is replaced by the same math split in two ranges
         attn-rot#0 (q) and attn-rot#1 (k), as Candle rotates q and k in two attn-rot spans.
         Not spanned (no Candle span either): embed_tokens, silu; HF-only: rotary_emb (cos/sin,
         which Candle precomputes in its Cache), mask creation.
  BERT:  BertModel -> model, embeddings -> embeddings, LayerNorm -> layer-norm, encoder ->
         encoder, layer.N -> layer, attention -> attn, attention.self -> self-attn,
         attention.output -> self-out, intermediate -> inter, its activation -> hidden-act,
         output -> out, every dense/query/key/value -> linear. Not spanned: Candle's
         `softmax` span (HF calls F.softmax inside a function), embeddings (no Candle span).

Steps. schedule(wait=1, warmup=1, active=N, repeat=1); prof.step() after each step:
  Llama: step 0 = prefill of the 16-token prompt (the wait step, not recorded), steps 1..20 =
         one decoded token each (input [1,1], KV cache), like the Candle example's steps 0..20.
         Step 1 is warmup; ProfilerStep#2..#(N+1) are recorded (decode tokens 2..N+1). The Candle
         example's 4 AdamW training steps are not mirrored.
  BERT:  one forward of [4,128] per step; 2 + N forwards run (the Candle example runs 3),
         ProfilerStep#2..#(N+1) recorded.

Threads: torch.set_num_threads(--threads, default 1) and set_num_interop_threads(1). The Candle
examples do not set a thread count themselves (Candle then uses RAYON_NUM_THREADS or all cores);
tracegraph's tests that time ops run them with RAYON_NUM_THREADS=1, which the default mirrors.

How to run (from the workspace root; CPU-only, no network needed once installed):
  python3 -m venv target/torchenv
  target/torchenv/bin/pip install torch==2.15.0 transformers==5.25.0
  target/torchenv/bin/python crates/testkit/data/torch/profile_torch.py
  target/torchenv/bin/python crates/testkit/data/torch/check_self_time.py   # stdlib only

Made with: Python 3.11.7, torch 2.15.0 (+cu132 PyPI wheel, run on CPU), transformers 5.25.0.
Timings are host wall-clock of whatever machine runs it; regenerate rather than compare numbers.
"""

import argparse
import collections
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function, schedule  # noqa: E402
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# --- crates/trace-candle/examples/profile_llama.rs -------------------------------------------
LLAMA = dict(
    hidden_size=128,
    intermediate_size=256,
    vocab_size=1000,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    rope_theta=10_000.0,
    max_position_embeddings=64,
    tie_word_embeddings=False,
    # Candle: no rope_scaling, no flash attention, linear_no_bias everywhere, silu MLP.
)
PROMPT = 16  # prompt length (prefill)
DECODE = 20  # tokens decoded after the prompt, one step each

# --- crates/trace-candle/examples/profile_bert.rs ---------------------------------------------
BERT = dict(
    vocab_size=1000,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=8,
    intermediate_size=512,
    max_position_embeddings=256,
    # candle-transformers bert::Config::default() for the rest:
    hidden_act="gelu",  # HiddenAct::Gelu = erf GELU
    hidden_dropout_prob=0.1,  # eval mode: identity
    type_vocab_size=2,
    initializer_range=0.02,
    layer_norm_eps=1e-12,
    pad_token_id=0,
    position_embedding_type="absolute",
)
BATCH = 4
SEQ = 128


class Spans:
    """record_function ranges named like trace-candle's span names (`name#k`)."""

    def __init__(self):
        # Each frame: (the open record_function or None, sibling counts of its children).
        self.stack = []

    def open(self, name, indexed=True):
        if indexed and self.stack:
            counts = self.stack[-1][1]
            label = f"{name}#{counts[name]}"
            counts[name] += 1
        else:
            label = name
        rf = record_function(label)
        rf.__enter__()
        self.stack.append((rf, collections.Counter()))

    def close(self):
        rf, _ = self.stack.pop()
        rf.__exit__(None, None, None)

    def root(self, name):
        """A root range (the Candle capture op): no index, fresh sibling counts inside."""
        spans = self

        class _Root:
            def __enter__(self):
                spans.open(name, indexed=False)

            def __exit__(self, *exc):
                spans.close()

        return _Root()

    def range(self, name):
        spans = self

        class _Range:
            def __enter__(self):
                spans.open(name)

            def __exit__(self, *exc):
                spans.close()

        return _Range()

    def attach(self, module, name):
        module.register_forward_pre_hook(lambda m, args: self.open(name))
        module.register_forward_hook(lambda m, args, out: self.close(), always_call=True)


def llama_model(spans):
    cfg = dict(LLAMA)
    theta = cfg.pop("rope_theta")
    config = LlamaConfig(
        **cfg,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).eval()
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    for layer in model.model.layers:
        spans.attach(layer, "block")
        spans.attach(layer.input_layernorm, "rms-norm")
        spans.attach(layer.self_attn, "attn")
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            spans.attach(getattr(layer.self_attn, proj), "linear")
        spans.attach(layer.post_attention_layernorm, "rms-norm")
        spans.attach(layer.mlp, "mlp")
        for proj in ("gate_proj", "up_proj", "down_proj"):
            spans.attach(getattr(layer.mlp, proj), "linear")
    spans.attach(model.model.norm, "rms-norm")
    spans.attach(model.lm_head, "linear")

    rotate_half = modeling_llama.rotate_half

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        # HF's math exactly, q and k in separate ranges (Candle: two `attn-rot` spans).
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        with spans.range("attn-rot"):
            q_embed = (q * cos) + (rotate_half(q) * sin)
        with spans.range("attn-rot"):
            k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed

    modeling_llama.apply_rotary_pos_emb = apply_rotary_pos_emb
    return model, config


def bert_model(spans):
    config = BertConfig(**BERT)
    config._attn_implementation = "eager"
    model = BertModel(config, add_pooling_layer=False).eval()  # Candle's BertModel has no pooler
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    spans.attach(model, "model")
    spans.attach(model.embeddings, "embeddings")
    spans.attach(model.embeddings.LayerNorm, "layer-norm")
    spans.attach(model.encoder, "encoder")
    for layer in model.encoder.layer:
        spans.attach(layer, "layer")
        att = layer.attention
        spans.attach(att, "attn")
        spans.attach(att.self, "self-attn")
        for lin in (att.self.query, att.self.key, att.self.value):
            spans.attach(lin, "linear")
        spans.attach(att.output, "self-out")
        spans.attach(att.output.dense, "linear")
        spans.attach(att.output.LayerNorm, "layer-norm")
        spans.attach(layer.intermediate, "inter")
        spans.attach(layer.intermediate.dense, "linear")
        assert isinstance(layer.intermediate.intermediate_act_fn, torch.nn.Module)
        spans.attach(layer.intermediate.intermediate_act_fn, "hidden-act")
        spans.attach(layer.output, "out")
        spans.attach(layer.output.dense, "linear")
        spans.attach(layer.output.LayerNorm, "layer-norm")
    return model, config


def key_averages_json(prof, meta):
    ops = []
    for e in prof.key_averages():
        row = {
            "name": e.key,
            "count": e.count,
            "self_cpu_time_total_us": e.self_cpu_time_total,
            "cpu_time_total_us": e.cpu_time_total,
            "self_cpu_memory_usage_bytes": e.self_cpu_memory_usage,
            "cpu_memory_usage_bytes": e.cpu_memory_usage,
        }
        if hasattr(e, "is_user_annotation"):
            row["is_user_annotation"] = bool(e.is_user_annotation)
        ops.append(row)
    ops.sort(key=lambda r: (-r["self_cpu_time_total_us"], r["name"]))
    total_self = sum(r["self_cpu_time_total_us"] for r in ops)
    out = dict(meta)
    out["time_unit"] = "us"
    out["total_self_cpu_time_us"] = total_self
    out["self_cpu_time_per_step_us"] = total_self / meta["active_steps"]
    out["ops"] = ops
    return out


def write_gz(src, dst):
    with open(src, "rb") as f, open(dst, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            shutil.copyfileobj(f, gz)


def profiled(name, out_dir, active, total_steps, step_fn, meta):
    """Runs step_fn(i) for i in range(total_steps) under the profiler, one prof.step() each."""
    done = {}

    def on_ready(prof):
        with tempfile.TemporaryDirectory() as tmp:
            raw = os.path.join(tmp, f"{name}.trace.json")
            prof.export_chrome_trace(raw)
            write_gz(raw, os.path.join(out_dir, f"{name}.trace.json.gz"))
        with open(os.path.join(out_dir, f"{name}.key_averages.json"), "w") as f:
            json.dump(key_averages_json(prof, meta), f, indent=1)
            f.write("\n")
        done["cycles"] = done.get("cycles", 0) + 1

    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        profile_memory=True,
        with_stack=False,
        schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
        on_trace_ready=on_ready,
    ) as prof:
        for i in range(total_steps):
            step_fn(i)
            prof.step()
    assert done.get("cycles") == 1, done


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=HERE, help="output folder (default: this file's)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--llama-active", type=int, default=4, help="recorded decode steps")
    ap.add_argument("--bert-active", type=int, default=3, help="recorded forwards")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.set_default_dtype(torch.float32)
    os.makedirs(args.out, exist_ok=True)

    common = {
        "generator": "crates/testkit/data/torch/profile_torch.py",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "dtype": "float32",
        "device": "cpu",
        "seed": args.seed,
        "schedule": "wait=1, warmup=1, repeat=1",
        "attn_implementation": "eager",
    }

    # ---- Llama: prefill (step 0) then one decoded token per step ----
    spans = Spans()
    torch.manual_seed(args.seed)
    llama, _ = llama_model(spans)
    active = args.llama_active
    assert 2 + active <= 1 + DECODE
    tokens = [(i * 37 + 11) % 1000 for i in range(PROMPT)]
    state = {"cache": None, "pos": 0}

    def llama_step(step):
        context = tokens if step == 0 else tokens[-1:]
        ids = torch.tensor([context], dtype=torch.long)
        n = len(context)
        position_ids = torch.arange(state["pos"], state["pos"] + n).unsqueeze(0)
        with spans.root("llama.forward"):
            out = llama(
                input_ids=ids,
                position_ids=position_ids,
                cache=state["cache"],
                use_cache=True,
                logits_to_keep=1,  # Candle's lm_head sees the last position only
            )
        state["cache"] = out.cache
        state["pos"] += n
        tokens.append(int(out.logits[0, -1].argmax()))

    meta = dict(common)
    meta.update(
        model="LlamaForCausalLM",
        candle_example="crates/trace-candle/examples/profile_llama.rs",
        config=LLAMA,
        prompt_tokens=PROMPT,
        step="one llama.forward: step 0 prefill [1,16] (wait), then one decoded token [1,1] "
        "with the KV cache per step",
        recorded_profiler_steps=list(range(2, 2 + active)),
        active_steps=active,
    )
    with torch.no_grad():
        # All 1 + DECODE Candle steps run; the profiler records steps 2..active+1 only.
        profiled("llama", args.out, active, 1 + DECODE, llama_step, meta)
    print("llama generated:", tokens[PROMPT:])

    # ---- BERT: one forward of [4, 128] per step ----
    spans = Spans()
    torch.manual_seed(args.seed)
    bert, _ = bert_model(spans)
    active = args.bert_active
    ids = torch.tensor([(i * 37 % 1000) for i in range(BATCH * SEQ)], dtype=torch.long).reshape(BATCH, SEQ)
    types = torch.zeros_like(ids)

    def bert_step(step):
        with spans.root("bert.forward"):
            out = bert(input_ids=ids, token_type_ids=types)
        assert tuple(out.last_hidden_state.shape) == (BATCH, SEQ, 128)

    meta = dict(common)
    meta.update(
        model="BertModel(add_pooling_layer=False)",
        candle_example="crates/trace-candle/examples/profile_bert.rs",
        config=BERT,
        input_shape=[BATCH, SEQ],
        step="one bert.forward of input_ids [4,128], token types 0, no attention mask",
        recorded_profiler_steps=list(range(2, 2 + active)),
        active_steps=active,
    )
    with torch.no_grad():
        profiled("bert", args.out, active, 2 + active, bert_step, meta)

    for name in ("llama", "bert"):
        for suffix in (".trace.json.gz", ".key_averages.json"):
            p = os.path.join(args.out, name + suffix)
            print(f"{p}: {os.path.getsize(p)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
