"""Open a train_tiny_transformer checkpoint with PyTorch, check it, and continue its text.

    /usr/bin/python3 examples/15_tiny_transformer/load_checkpoint.py runs/tiny_transformer/checkpoints/step_300 [N]

prints the run's progress and N (default 60) greedily decoded characters after "the ", computed
here in PyTorch from the saved weights: the same text the lab prints from the same weights.

Needs only torch (Debian: python3-torch). The checkpoint's state.pt was written by LibTorch's
torch::pickle_save, the same zip archive torch.save writes; manifest.json records sizes and CRC-32s.
"""
import json
import math
import sys
import zlib

import torch

ALPHABET = "\n .abcdefghijklmnopqrstuvwxyz"  # token id = position (include/mpp/models/char_corpus.hpp)


def forward(w, cfg, tokens):
    """The TinyTransformer forward pass, written from the parameter names alone."""
    m = cfg["model"]
    heads, eps = m["num_attention_heads"], m["layer_norm_eps"]
    t = tokens.shape[1]
    x = w["embed.token.weight"][tokens] + w["embed.position.weight"][:t]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, x.shape[-1:], w[p + ".weight"], w[p + ".bias"], eps)
    lin = lambda x, p: torch.nn.functional.linear(x, w[p + ".weight"], w.get(p + ".bias"))
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)
    for b in range(m["num_hidden_layers"]):
        p = "blocks.%d." % b
        q, k, v = lin(ln(x, p + "ln1"), p + "attn.qkv").view(1, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(1, t, -1)
        x = x + lin(y, p + "attn.proj")
        x = x + lin(torch.nn.functional.gelu(lin(ln(x, p + "ln2"), p + "fc")), p + "fc_out")
    return lin(ln(x, "head.ln"), "head.lm_head")


def main(directory, prompt="the ", length=60):
    manifest = json.load(open(directory + "/manifest.json"))
    for name, entry in manifest["files"].items():
        raw = open(directory + "/" + name, "rb").read()
        assert len(raw) == entry["bytes"] and zlib.crc32(raw) == entry["crc32"], name + " is damaged"
    state = torch.load(directory + "/state.pt")
    w = state["model"]
    print("step %d (epoch %d, batch %d), %d tensors, %d parameters" % (
        state["step"], state["epoch"] + 1, state["position"], len(w), sum(t.numel() for t in w.values())))
    tokens = [ALPHABET.index(c) for c in prompt]
    window = manifest["config"]["model"]["max_position_embeddings"]
    with torch.no_grad():
        for _ in range(length):
            logits = forward(w, manifest["config"], torch.tensor([tokens[-window:]]))
            tokens.append(int(logits[0, -1].argmax()))
    # Printed as the lab prints it, so the two can be compared.
    print('greedy sample: "%s"' % "".join(ALPHABET[i] if i < len(ALPHABET) else "?" for i in tokens))


if __name__ == "__main__":
    main(sys.argv[1], length=int(sys.argv[2]) if len(sys.argv) > 2 else 60)
