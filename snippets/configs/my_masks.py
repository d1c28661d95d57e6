"""Three masks as a reader writes them, saved as my_masks.py, for python -m snippets.maskcheck to check."""
import torch
import torch.nn.functional as F

# Three packed documents of 300, 400 and 300 tokens: the ids of the 1000 real tokens; the batch is padded to 1024.
document_ids = torch.repeat_interleave(torch.arange(3), torch.tensor([300, 400, 300]))
# The same ids padded to 1024 with -1: padding is a document of its own.
padded_ids = F.pad(document_ids, (0, 1024 - len(document_ids)), value=-1)


def causal_documents(b, h, q_idx, kv_idx):
    """Causal within each document, reading the padded ids."""
    return (q_idx >= kv_idx) & (padded_ids[q_idx] == padded_ids[kv_idx])


def unpadded_documents(b, h, q_idx, kv_idx):
    """The same mask, reading the ids of the 1000 real tokens."""
    return (q_idx >= kv_idx) & (document_ids[q_idx] == document_ids[kv_idx])


def recent_tokens(b, h, q_idx, kv_idx):
    """Causal over the last 256 tokens, written with an if."""
    if q_idx - kv_idx >= 256:
        return torch.tensor(False)
    return q_idx >= kv_idx
