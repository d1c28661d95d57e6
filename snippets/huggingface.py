"""Hugging Face Transformers with attn_implementation="flex_attention": a small Llama with random weights,
built from a config (nothing to download), run with FlexAttention and with SDPA.

    python -m snippets.huggingface    # compare the two on a padded batch, and count what each length compiles
"""
from snippets._cli import UsageError, run

# --8<-- [start:select]
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def small_llama(attn_implementation="flex_attention", seed=0):
    """A 2-layer Llama with random weights. For a trained model, the same argument:
    AutoModelForCausalLM.from_pretrained(name, attn_implementation="flex_attention")."""
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2,
                         attn_implementation=attn_implementation)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()
# --8<-- [end:select]


# --8<-- [start:batch]
def padded_batch(tokens, padding, seed=0):
    """Two sequences of `tokens` token ids; the second starts with `padding` pad tokens (left padding),
    which its attention_mask marks with 0."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 128, (2, tokens), generator=g)
    attention_mask = torch.ones(2, tokens, dtype=torch.long)
    attention_mask[1, :padding] = 0
    return input_ids, attention_mask


@torch.no_grad()
def logits(model, input_ids, attention_mask):
    return model(input_ids=input_ids, attention_mask=attention_mask).logits
# --8<-- [end:batch]


# --8<-- [start:graphs]
from torch._dynamo.utils import counters


def graphs_compiled(model, batch):
    """The graphs torch.compile makes during one forward pass."""
    counters.clear()
    logits(model, *batch)
    return counters["stats"]["unique_graphs"]
# --8<-- [end:graphs]


def main(argv) -> int:
    if argv:
        raise UsageError(f"unexpected arguments {' '.join(argv)!r}", "python -m snippets.huggingface")
    # --8<-- [start:print_graphs]
    flex = small_llama("flex_attention")
    for tokens in (40, 40, 41, 42, 60, 129, 200):
        print(f"{tokens} tokens: {graphs_compiled(flex, padded_batch(tokens, 10))} graphs compiled")
    one = [x[:1] for x in padded_batch(60, 10)]  # the first sequence alone: a batch of 1
    print(f"60 tokens, batch 1: {graphs_compiled(flex, one)} graphs compiled")
    # --8<-- [end:print_graphs]
    # --8<-- [start:print_compare]
    sdpa = small_llama("sdpa")  # the same weights as flex (seed 0)
    tokens, padding = 40, 10
    batch = padded_batch(tokens, padding)
    gap = (logits(flex, *batch) - logits(sdpa, *batch)).abs().max()
    print(f"float32, {tokens} tokens, {padding} of them padding: the logits differ by at most {gap:.1e}")
    # --8<-- [end:print_compare]
    # --8<-- [start:print_backward]
    flex.train()
    input_ids, _ = padded_batch(40, 0)
    try:  # with gradients recorded for the attention's inputs, the forward pass stops
        flex(input_ids=input_ids, labels=input_ids).loss.backward()
    except NotImplementedError as e:
        print(f"{type(e).__name__}: {e}")
    # --8<-- [end:print_backward]
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
