"""Transformer networks (BERT, GPT-2 and the like) as layer lists, derived from their sizes.

Notation: ``L`` layers, ``h`` hidden size, ``a`` heads, ``s`` sequence length, ``V`` vocabulary,
``f`` feed-forward size (``4h`` by default). Counts are per sequence (the sample).

Layers, in forward order
    Embeddings (word ``V*h``, position ``max_positions*h``, token type ``type_vocab*h``), each
    its own layer. Then per transformer layer ``i`` (names ``layers.{i}.*``): ``ln1``,
    ``attn.qkv`` (``h -> 3h``, with biases), ``attn.scores`` (QK^T), ``attn.softmax``,
    ``attn.dropout``, ``attn.context`` (scores x V), ``attn.out`` (``h -> h``),
    ``attn.dropout_out``, ``ln2``, ``mlp.fc1`` (``h -> f``), ``mlp.gelu``, ``mlp.fc2``
    (``f -> h``), ``mlp.dropout``.
    Pre-LN (GPT-2, the default for ``causal``) puts ``ln1``/``ln2`` before the attention and the
    MLP and ends with ``final_ln``; post-LN (BERT) puts them after each residual add and
    normalises the embeddings instead (``embed.ln``). Both have the same parameter count. Then the
    optional ``pooler`` (``h -> h`` on the first token, BERT's) and the ``logits`` projection
    (``h -> V`` over every position; no parameters of its own when tied to the word embeddings,
    whose gradient is therefore ready only when the embedding's backward is done, as in DDP).
    BERT's MLM transform head and output bias, and its NSP classifier, are left out: the
    published counts (Hugging Face ``BertModel``) do not have them.
FLOPs (forward, 2 per multiply-add, matrix products only)
    Per layer ``2sh*3h + 2s^2h + 2s^2h + 2sh^2 + 2*2shf`` = ``24sh^2 + 4s^2h`` for ``f = 4h``;
    logits ``2shV``; pooler ``2h^2``. Embedding lookups, layer norms, softmax, GeLU, dropout and
    residual adds count 0, as in Narayanan et al. (2021): the total without pooler is
    ``24sLh^2 (1 + s/(6h) + V/(12Lh))``. (Megatron's ``96BsLh^2 (1 + s/(6h) + V/(16Lh))`` is the
    training cost with activation recomputation: 4 x the layers' forward + 3 x the logits'.)
    Attention is counted as the full ``s x s`` product even when ``causal`` (as unfused kernels
    compute it).
Activations (bytes per sequence kept for backward)
    Korthikanti et al. (2022), Section 4.1, with 16-bit activations: per layer ``sh(34 + 5as/h)``,
    attributed to the operation that keeps each tensor: ln1 ``2sh`` (its input), qkv ``2sh``, scores
    ``4sh`` (Q, K), softmax ``2as^2`` (its output), attention dropout ``as^2`` (mask), context
    ``2as^2 + 2sh`` (dropped-out scores, V), out ``2sh``, its dropout ``sh`` (mask), ln2 ``2sh``,
    fc1 ``2sh``, GeLU ``2sf``, fc2 ``2sf``, its dropout ``sh``; for ``f != 4h`` the ``34`` becomes
    ``18 + 4f/h``. Outside the layers, as in their Section 4.3: the embedding dropout mask ``sh``,
    the final (pre-LN) or embedding (post-LN) layer norm's input ``2sh``, the logits projection's
    input ``2sh`` plus the fp32 logits kept by the cross-entropy ``4sV``, and the pooler's tanh
    output ``2h`` (its input is a view of the kept final hidden states). In all, at 16 bits:
    ``L*sh(34 + 5as/h) + 5sh + 4sV (+ 2h with a pooler)``. The catalog stores fp32 figures, twice
    these, so that the memory model's halving for 16-bit activations reproduces the formula exactly
    (even for the masks and fp32 logits, which do not really scale).
"""

from __future__ import annotations

from ._types import Layer

__all__ = ["transformer_layers"]


def transformer_layers(
    *,
    layers: int,
    hidden: int,
    heads: int,
    seq: int,
    vocab: int,
    ffn_hidden: int,
    max_positions: int,
    type_vocab: int,
    tied_embeddings: bool,
    pooler: bool,
    prenorm: bool,
) -> tuple[Layer, ...]:
    """The layers of a transformer with validated sizes (see the module docstring)."""
    L, h, a, s, V, f = layers, hidden, heads, seq, vocab, ffn_hidden
    out: list[Layer] = []

    def add(name: str, kind: str, params: int, flops: float, act16: float) -> None:
        # act16 is Korthikanti's 16-bit figure; the catalog stores fp32 (twice it).
        out.append(Layer(name, kind, int(params), float(flops), 2.0 * act16))

    sh = s * h
    add("embed.word", "embedding", V * h, 0, 0)
    add("embed.position", "embedding", max_positions * h, 0, 0)
    if type_vocab:
        add("embed.token_type", "embedding", type_vocab * h, 0, 0)
    if not prenorm:
        add("embed.ln", "layernorm", 2 * h, 0, 2 * sh)
    add("embed.dropout", "dropout", 0, 0, sh)

    attn_probs = a * s * s  # values in one sequence's attention matrices
    for i in range(L):
        p = f"layers.{i}"
        ln1 = (f"{p}.ln1", "layernorm", 2 * h, 0, 2 * sh)
        ln2 = (f"{p}.ln2", "layernorm", 2 * h, 0, 2 * sh)
        if prenorm:
            add(*ln1)
        add(f"{p}.attn.qkv", "linear", 3 * h * h + 3 * h, 2 * sh * 3 * h, 2 * sh)
        add(f"{p}.attn.scores", "matmul", 0, 2 * s * s * h, 4 * sh)
        add(f"{p}.attn.softmax", "softmax", 0, 0, 2 * attn_probs)
        add(f"{p}.attn.dropout", "dropout", 0, 0, attn_probs)
        add(f"{p}.attn.context", "matmul", 0, 2 * s * s * h, 2 * attn_probs + 2 * sh)
        add(f"{p}.attn.out", "linear", h * h + h, 2 * sh * h, 2 * sh)
        add(f"{p}.attn.dropout_out", "dropout", 0, 0, sh)
        add(*(ln2 if prenorm else ln1))
        add(f"{p}.mlp.fc1", "linear", h * f + f, 2 * sh * f, 2 * sh)
        add(f"{p}.mlp.gelu", "gelu", 0, 0, 2 * s * f)
        add(f"{p}.mlp.fc2", "linear", f * h + h, 2 * s * f * h, 2 * s * f)
        add(f"{p}.mlp.dropout", "dropout", 0, 0, sh)
        if not prenorm:
            add(*ln2)

    if prenorm:
        add("final_ln", "layernorm", 2 * h, 0, 2 * sh)
    if pooler:
        add("pooler", "linear", h * h + h, 2 * h * h, 2 * h)
    add("logits", "linear", 0 if tied_embeddings else V * h, 2 * sh * V, 2 * sh + 4 * s * V)
    return tuple(out)
