"""Writes the suite's tiny llama: random F32 weights (fixed seed), a ~510-token SentencePiece-style
vocabulary with byte fallback, and the ChatML chat template. About 600 KB; llama-server loads it in
milliseconds. It is not a language model: it exists so that llama.cpp's own server, its tokenizer,
sampler, template, streaming and error paths answer Tollgate for real.

Random weights pick control tokens (<s>, </s>, <|im_start|>, <|im_end|>) and lone bytes that are not
valid UTF-8, which ends replies early or makes the server answer 500. The weights steer away from
them: every token embedding has the same value in dimension 0, no layer writes that dimension, so the
final hidden state always has a positive component there; the output rows of the unwanted tokens have
a large negative weight in that column. Replies are therefore printable ASCII words and always run to
max_tokens.

usage: python make_model.py OUT.gguf
"""
from __future__ import annotations

import sys

import numpy as np
import gguf

SEED = 16
D, LAYERS, HEADS, KV_HEADS, FF, CTX = 64, 2, 4, 4, 128, 2048

WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who oil its now find long down day did "
    "get come made may part gate toll meter token price"
).split()


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    tokens: list[str] = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL,
             gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(gguf.TokenType.BYTE)
    pieces: list[str] = ["\u2581"] + [chr(c) for c in range(0x21, 0x7F)]
    seen = set(pieces)
    for w in WORDS:  # each word with every prefix, so SentencePiece's pairwise merges can reach it
        p = "\u2581" + w
        for i in range(2, len(p) + 1):
            if p[:i] not in seen and len(tokens) + len(pieces) < 510:
                seen.add(p[:i])
                pieces.append(p[:i])
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    # Longer pieces merge first.
    scores = [0.0] * (len(tokens) - len(pieces)) + [float(len(p)) - i * 1e-4 for i, p in enumerate(pieces)]
    return tokens, scores, [int(t) for t in types]


CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def main(out: str) -> None:
    tokens, scores, types = vocabulary()
    vocab = len(tokens)
    rng = np.random.default_rng(SEED)

    def rand(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = gguf.GGUFWriter(out, "llama")
    w.add_name("tollgate-tiny-random-llama")
    w.add_vocab_size(vocab)
    w.add_context_length(CTX)
    w.add_embedding_length(D)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(D // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(4)  # <|im_end|>, as ChatML models end a turn
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template(CHATML)

    embd = rand(vocab, D, scale=1.0)
    embd[:, 0] = 1.0  # the constant the output layer uses to steer away from unwanted tokens
    out_w = rand(vocab, D, scale=1.0 / np.sqrt(D))
    out_w[:, 0] = 0.0
    unwanted = [i for i, t in enumerate(types) if t != gguf.TokenType.NORMAL]
    out_w[unwanted, 0] = -1000.0
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(D, dtype=np.float32))
    w.add_tensor("output.weight", out_w)
    kv = KV_HEADS * (D // HEADS)
    for n in range(LAYERS):
        attn_out = rand(D, D, scale=1.0 / np.sqrt(D))
        ffn_down = rand(D, FF, scale=1.0 / np.sqrt(FF))
        attn_out[0, :] = 0.0  # nothing writes dimension 0
        ffn_down[0, :] = 0.0
        w.add_tensor(f"blk.{n}.attn_norm.weight", np.ones(D, dtype=np.float32))
        w.add_tensor(f"blk.{n}.attn_q.weight", rand(D, D, scale=1.0 / np.sqrt(D)))
        w.add_tensor(f"blk.{n}.attn_k.weight", rand(kv, D, scale=1.0 / np.sqrt(D)))
        w.add_tensor(f"blk.{n}.attn_v.weight", rand(kv, D, scale=1.0 / np.sqrt(D)))
        w.add_tensor(f"blk.{n}.attn_output.weight", attn_out)
        w.add_tensor(f"blk.{n}.ffn_norm.weight", np.ones(D, dtype=np.float32))
        w.add_tensor(f"blk.{n}.ffn_gate.weight", rand(FF, D, scale=1.0 / np.sqrt(D)))
        w.add_tensor(f"blk.{n}.ffn_up.weight", rand(FF, D, scale=1.0 / np.sqrt(D)))
        w.add_tensor(f"blk.{n}.ffn_down.weight", ffn_down)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1])
