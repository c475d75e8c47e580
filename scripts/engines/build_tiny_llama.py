"""Build a small random-weight Llama with a locally trained tokenizer, for a real vLLM on CPU.

No model can be downloaded on CI's machines, so the model vLLM serves is made here: a byte-level BPE
tokenizer trained on text that ships with the machine (this repository's sources and docs, then Python's
standard library), and a Llama of a few layers with seeded random weights, saved as safetensors with a
chat template. The outputs are meaningless text; what matters for serving benchmarks is that the engine
runs its real code paths (scheduler, paged KV cache, prefix caching, metrics) on a real architecture.

Run with the vLLM virtual environment's Python (it has torch, transformers and tokenizers)::

    python scripts/engines/build_tiny_llama.py --out ~/.cache/servelab-engines/models/tiny-llama

It writes ``DONE`` last, so a half-built directory is rebuilt on the next call.
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] if m['content'] is string else '' }}</s>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
RECIPE = "tiny-llama-v2"  # bump when the recipe changes: a built model of an older recipe is rebuilt
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]


def corpus_files(repo: Path, limit_bytes: int) -> list[str]:
    """Text files to train the tokenizer on, up to ``limit_bytes`` in all (deterministic order)."""
    roots = [repo / "src", repo / "docs", repo / "README.md", Path(sysconfig.get_paths()["stdlib"])]
    out: list[str] = []
    total = 0
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in (".py", ".md"))
        for f in files:
            if "site-packages" in f.parts or "test" in f.parts or "tests" in f.parts:
                continue
            try:
                size = f.stat().st_size
            except OSError:
                continue
            out.append(str(f))
            total += size
            if total >= limit_bytes:
                return out
    return out


def train_tokenizer(files: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    return tok


def silent_tokens(tok) -> list[int]:
    """Ids that decode to no visible text alone: special tokens, and single bytes of multi-byte characters.

    A random model loops on one token; if that token is silent (skipped as special, or held back by the
    detokenizer as an incomplete character) the server streams no text at all for the whole request.
    """
    out = []
    for i in range(len(tok)):
        text = tok.decode([i], skip_special_tokens=True)
        if i in tok.all_special_ids or not text or "\ufffd" in text:
            out.append(i)
    return out


def build(out: Path, repo: Path, vocab_size: int, layers: int, hidden: int, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    (out / "DONE").unlink(missing_ok=True)
    files = corpus_files(repo, 8_000_000)
    if not files:
        raise SystemExit(f"no text found to train a tokenizer on under {repo} or the standard library")
    raw = train_tokenizer(files, vocab_size)
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                  pad_token="<pad>", model_max_length=4096)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(out)
    heads = max(1, hidden // 64)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    silent = silent_tokens(tok)
    with torch.no_grad():  # tied embeddings: a zero row scores 0, below the best of 8k random logits
        model.get_input_embeddings().weight[silent] = 0
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    facts = {"name": "servelab-tiny-llama", "vocab_size": len(tok), "layers": layers, "hidden": hidden,
             "seed": seed, "silent_tokens": len(silent), "recipe": RECIPE,
             "params": sum(p.numel() for p in model.parameters()), "corpus_files": len(files)}
    (out / "servelab_model.json").write_text(json.dumps(facts, indent=1))
    (out / "DONE").write_text(RECIPE + "\n")
    print(json.dumps(facts))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2])
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rebuild even if DONE exists")
    a = ap.parse_args(argv)
    done = a.out / "DONE"
    if done.exists() and done.read_text().strip() == RECIPE and not a.force:
        print(f"model already built at {a.out}")
        return 0
    build(a.out, a.repo, a.vocab_size, a.layers, a.hidden, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
